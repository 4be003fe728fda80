//go:build defect_failover_on_unknown

package charges

// defectFailoverOnUnknown, in this deliberately broken build (tag
// defect_failover_on_unknown), treats an unknown outcome as a refusal and
// moves the charge to its next PSP: the pitfall routing exists to avoid. It
// exists only so the chaos harness can prove it catches the charges this
// authorizes at two PSPs (internal/chaos, TestChaosRoutingCatchesFailoverOnUnknown).
// Never build it otherwise.
const defectFailoverOnUnknown = true
