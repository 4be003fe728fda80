// Package faults is what the chaos harness injects into phasepay's own
// binaries when they are built with the chaos tag (cmd/api and cmd/reaper,
// chaos_on.go): crashes at the state machine's crash points, and the
// deliberate defects that prove the harness catches what they break. A
// normal build never imports it; the operation files hold no branch for it.
// Its hooks (faults.go) compile only with the chaos tag; the defects' names
// below compile always, for the chaos harness's flags and tests.
//
// Both are read from the environment the harness starts a worker with:
//
//	PHASEPAY_CHAOS_CRASH   point=probability,... (e.g. after_claim=0.02)
//	PHASEPAY_CHAOS_SEED    the seed of the crash draws
//	PHASEPAY_CHAOS_DEFECT  fresh_psp_key | failover_on_unknown (unset: none)
package faults

// The deliberate defects (PHASEPAY_CHAOS_DEFECT).
const (
	// DefectFreshPSPKey sends every authorization under a fresh PSP key
	// and without the lookup by reference that precedes a resend: a naive
	// client with neither defence (the lookup alone would hide the fresh
	// key, since it finds the first authorization and nothing is resent).
	// The chaos harness must report the double authorizations it causes.
	DefectFreshPSPKey = "fresh_psp_key"
	// DefectFailoverOnUnknown takes an unknown outcome for a refusal, so
	// that the charge moves to its next PSP while a request may still be in
	// flight at the first: the pitfall routing exists to avoid. The chaos
	// harness must report the charges authorized at two PSPs.
	DefectFailoverOnUnknown = "failover_on_unknown"
)
