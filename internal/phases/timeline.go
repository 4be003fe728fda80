package phases

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// What the engine adds to a request's timeline (idempotency/timeline.go):
// the PSP calls, which have no statement of their own, and the reasons of
// releases in stable words. Every other entry is written by the key
// statement that makes its change (claim, Advance, Finish, Release,
// TakeOver).

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

// The reasons of releases that are not the PSP's (a run the database
// failed under is given up with idempotency.Lease.Unlock, whose entry
// says so itself).
const (
	reasonNoOperation = "no operation for this request"
	reasonCanceled    = "attempt canceled"
)

// pspReason says, in the stable words a tenant may read (last_error's
// contract), why a PSP call ended its attempt (busy or unknown): never a
// host, an address or the PSP's raw answer, which stay in the detail.
func pspReason(out psp.Outcome, err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return reasonCanceled
	case out.StatusCode >= 200 && out.StatusCode < 300:
		return "PSP answer not understood"
	case out.StatusCode != 0:
		return fmt.Sprintf("PSP answered %d", out.StatusCode)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "PSP timed out"
	}
	return "PSP unreachable"
}

// withReason gives cause a reason for the timeline unless it has one.
func withReason(reason string, cause error) error {
	if _, ok := errors.AsType[*idempotency.ReasonedError](cause); ok {
		return cause
	}
	return idempotency.Because(reason, cause)
}
