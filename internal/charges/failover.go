//go:build !defect_failover_on_unknown

package charges

// defectFailoverOnUnknown is false: an unknown outcome never moves a
// charge (attempts.go). Only the deliberately broken build
// (failover_defect.go) sets it.
const defectFailoverOnUnknown = false
