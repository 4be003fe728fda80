package charges

import (
	"cmp"
	"errors"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
)

// classes maps a PSP answer's class (psp.Classify) into the engine's.
var classes = map[psp.Class]phases.Class{
	psp.ClassUnknown:      phases.Unknown,
	psp.ClassSuccess:      phases.Success,
	psp.ClassFinalFailure: phases.Final,
	psp.ClassBusy:         phases.Busy,
}

// called is a PSP's answer in the engine's words: its class, and what the
// request's timeline shows of the call.
//
// What the phase after the call records (the authorization, a decline
// code, the PSP) stays on the object (Charge.answer, Refund.answer). The
// engine needs none of it. An error that says the PSP is unavailable or
// busy is marked so (phases.Unavailable): the client is told 503.
func called(out psp.Outcome, err error) (phases.CallOutcome, error) {
	c := phases.CallOutcome{
		Class:      classes[out.Class],
		RetryAfter: out.RetryAfter,
		Renew:      out.Class == psp.ClassUnknown && out.NewKey,
		Service:    out.PSP,
		Call:       out.Call,
		Key:        out.Key,
		Status:     out.StatusCode,
		Sends:      out.Sent,
		Lookups:    out.Lookups,
	}
	if out.Class == psp.ClassSuccess || out.Declined() {
		c.Result = cmp.Or(out.Authorization.Status, out.Operation.Status)
	}
	if errors.Is(err, psp.ErrUnavailable) || errors.Is(err, psp.ErrBusy) {
		err = phases.Unavailable(err)
	}
	return c, err
}
