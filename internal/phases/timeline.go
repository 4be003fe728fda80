package phases

import (
	"time"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// What the engine adds to a request's timeline (idempotency/timeline.go):
// the PSP calls, which have no statement of their own. Every other entry
// is written by the key statement that makes its change (claim, Advance,
// Finish, Release, Unlock, TakeOver); a release's reason is the public
// words of its cause, as last_error's (idempotency/reason.go).

// notePSPCall notes a PSP call on the lease; the holder's next write (the
// arrow's commit, or the release) records it.
func notePSPCall(lease *idempotency.Lease, out psp.Outcome, took time.Duration) {
	ms := took.Round(time.Millisecond).Milliseconds()
	e := idempotency.Entry{
		Kind: idempotency.KindPSPCall, PSP: out.PSP, Operation: out.Call, PSPKey: out.Key,
		Outcome: out.Class.String(), DurationMS: &ms, Sends: &out.Sent, Lookups: &out.Lookups,
	}
	if out.StatusCode != 0 {
		e.Status = &out.StatusCode
	}
	lease.Note(e)
}
