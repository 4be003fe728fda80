package charges

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// Authorize is POST /v1/charges, the operation "charges.create". Its
// phases, and the transaction that commits each with its recovery point,
// fenced by the key's lock_version:
//
//	           claim (tx 1)
//	              │
//	              ▼
//	  ┌─────── start ───────┐   tx 1 too: no foreign call between the claim
//	  │ create the charge   │   and the charge row, so they commit together
//	  ▼                     │   (OneCommitPerPhase: tx 1b)
//	charge_created          │
//	  │ PSP authorize       │   the foreign call, outside any transaction,
//	  │ (key <charge>:authorize)  under a heartbeat-renewed lease
//	  ▼
//	psp_authorized ─────────┐   tx 2, after the call: the PSP's answer on the
//	  │ answer              │   charge; tx 2 too (OneCommitPerPhase: tx 2b):
//	  ▼                     │   the response stored, key done
//	done ◀──────────────────┘
//
// A new charge costs two commits. A PSP that stays unavailable releases the
// lease at charge_created. The next run repeats the call under the same PSP
// key, which can never authorize twice.

// Path is the request path charges' keys are claimed under.
const Path = "/v1/charges"

// The recovery points of an authorization between start and done.
const (
	PointChargeCreated phases.Point = "charge_created"
	PointPSPAuthorized phases.Point = "psp_authorized"
)

// The crash points of an authorization's own commits, besides the claim's
// and the call's.
var (
	CrashAfterChargeCreated = phases.CrashAfter(PointChargeCreated)
	CrashAfterPSPAuthorized = phases.CrashAfter(PointPSPAuthorized)
)

func authorizeOperation(a Authorizer, routes Routes, ids *objectIDs) *phases.Operation[*Charge] {
	return &phases.Operation[*Charge]{
		Name: "charges.create", Method: http.MethodPost, Path: Path,
		Parse: func(_ string, body []byte) (phases.Request, error) {
			req, _, err := ParseCreateRequest(body)
			return req, err
		},
		ObjectID: ids.charge,
		Load: func(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (*Charge, error) {
			c, err := chargeByKey(ctx, tx, run.Lease.Record.ID())
			if err != nil {
				return nil, err
			}
			return c, loadAttempts(ctx, tx, c)
		},
		Phases: []phases.Phase[*Charge]{
			// tx 1, with the claim: the pending charge.
			{To: PointChargeCreated, Commit: createCharge(routes, ids)},
			// tx 2, after the PSP's answer: the answer on the charge, and
			// the response stored.
			{To: PointPSPAuthorized, Call: authorizeCall(a, routes, ids), Commit: recordAuthorization(routes, ids)},
			{To: phases.Done, Commit: func(_ context.Context, _ *phases.Tx, run *phases.Run[*Charge]) (phases.Next, error) {
				return phases.Respond(response(run.Object)), nil
			}},
		},
	}
}

// createCharge is start → charge_created. It records a pending charge and
// its first attempt before anything is sent.
//
// A charge whose id is derived starts at its route's first PSP (pinned). A
// retry of a claim lost in a failover must find the PSP the claim went to.
// Any other starts at the first PSP whose breaker lets new charges in.
func createCharge(routes Routes, ids *objectIDs) func(context.Context, *phases.Tx, *phases.Run[*Charge]) (phases.Next, error) {
	return func(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (phases.Next, error) {
		params, err := requestParams(run.Request())
		if err != nil {
			return phases.Next{}, fmt.Errorf("key %q: stored request: %w", run.Lease.Record.Key, err)
		}
		at := routes.Choose(params.Currency, !routes.Single() && pinned(ids, run, run.ObjectID))
		run.Object = insertCharge(tx, run.Lease.Record.ID(), run.ObjectID, at, attemptKey(run.ObjectID, 1, routes.Single()), params)
		return phases.Proceed(), nil
	}
}

// authorizeCall is the foreign call before psp_authorized. It makes one
// attempt at the PSP of the charge's current attempt, under its key.
//
// The key is derived from the charge id, so the PSP answers a repeat with
// its first answer while it remembers the key. After that, the lookup by
// reference before every resend keeps it from authorizing twice. A run that
// did not commit the current attempt itself first looks the charge up at
// every PSP attempted before (failover.go).
func authorizeCall(a Authorizer, routes Routes, ids *objectIDs) func(context.Context, *phases.Run[*Charge]) (phases.CallOutcome, error) {
	return func(ctx context.Context, run *phases.Run[*Charge]) (phases.CallOutcome, error) {
		c := run.Object
		cur := c.current()
		if !run.Fresh {
			if out, found, err := lookUpEarlier(ctx, routes, c); found || err != nil {
				c.answer = out
				return called(out, err)
			}
		}
		if run.Fresh && !routes.Single() && pinned(ids, run, c.ID) {
			// Nothing was sent under this attempt. A pinned charge cannot
			// go elsewhere (pitfall F3 "A second PSP after a lost
			// claim"), so while its PSP's breaker is open it is held back
			// as busy, not sent to a PSP that fails.
			if wait, held := routes.HoldBack(cur.PSP); held {
				c.answer = psp.Outcome{Class: psp.ClassBusy, RetryAfter: wait, PSP: cur.PSP, Call: psp.CallAuthorize, Key: cur.Key,
					Reason: "the PSP's circuit breaker is open: nothing sent"}
				return called(c.answer, fmt.Errorf("authorize %s at %s: held back by an open breaker: %w", c.ID, cur.PSP, psp.ErrBusy))
			}
		}
		out, err := a.AuthorizeOutcome(ctx, psp.AuthorizeRequest{
			IdempotencyKey: cur.Key,
			PSP:            cur.PSP,
			FirstSend:      run.Fresh,
			KeyCreatedAt:   keyCreatedAt(c, cur),
			Renewed:        c.renewed(),
			Hint:           deref(cur.Hint),
			TenantID:       c.TenantID,
			Amount:         c.Amount,
			Currency:       c.Currency,
			PaymentMethod:  c.PaymentMethod,
			Reference:      c.ID,
		})
		out.PSP = cmp.Or(out.PSP, cur.PSP)
		c.answer = out
		if err != nil {
			err = fmt.Errorf("authorize %s at %s: %w", c.ID, cur.PSP, err)
		}
		return called(out, err)
	}
}

// recordAuthorization is charge_created → psp_authorized. It records the
// PSP's final answer on the charge and its attempt, with its event
// (charge.authorized, .declined or .failed).
//
// A refusal with a PSP left on the charge's route is not an end. The
// refusal and the next attempt commit together, the charge stays at
// charge_created, and the call goes round again to the next PSP. A decline
// is the customer's answer, final everywhere.
func recordAuthorization(routes Routes, ids *objectIDs) func(context.Context, *phases.Tx, *phases.Run[*Charge]) (phases.Next, error) {
	return func(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (phases.Next, error) {
		c, out := run.Object, run.Object.answer
		cur := c.current()
		ended, answered := "", cur
		switch {
		case out.Class == psp.ClassSuccess:
			c.Status, c.PSPReference, ended = StatusAuthorized, &out.Authorization.ID, attemptAuthorized
			c.PSP = cmp.Or(out.PSP, cur.PSP)
		case out.Declined():
			c.Status, c.PSPReference, c.DeclineCode, ended = StatusDeclined, &out.Authorization.ID, out.Authorization.DeclineCode, attemptDeclined
		case out.NewKey:
			// The key is spent and its outcome still unknown. A new
			// attempt at the same PSP, under a new key (failover.go).
			renewKey(tx, c)
			return phases.Again(), nil
		default: // refused, so nothing was done at the PSP and never will be
			if failedOver(tx, run, routes, ids) {
				return phases.Again(), nil
			}
			reason := cmp.Or(out.Reason, "refused by the payment service provider")
			c.Status, c.FailureReason, ended = StatusFailed, &reason, attemptRefused
		}
		if c.PSP != cur.PSP {
			// Found authorized at an earlier PSP. The current attempt was
			// not what answered.
			answered = nil
		}
		updateAuthorization(tx, c, answered, ended)
		if err := writeStatusEvent(ctx, tx, c); err != nil {
			return phases.Next{}, err
		}
		return phases.Proceed(), nil
	}
}

// response is the final answer for a charge the PSP has answered.
func response(c *Charge) phases.Response {
	switch c.Status {
	case StatusDeclined:
		p := problem.New(http.StatusPaymentRequired, problem.CardDeclined, "The card was declined.")
		p.Charge = c.ID
		return phases.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
	case StatusFailed:
		reason := "refused by the payment service provider"
		if c.FailureReason != nil {
			reason = *c.FailureReason
		}
		p := problem.New(http.StatusPaymentRequired, problem.PaymentFailed, "The payment failed: "+reason)
		p.Charge = c.ID
		return phases.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
	}
	return jsonResponse(http.StatusCreated, c)
}

// jsonResponse is an object's answer.
func jsonResponse(status int, v interface{ MarshalJSON() ([]byte, error) }) phases.Response {
	body, err := v.MarshalJSON()
	if err != nil {
		panic(err) // plain fields only, so it cannot fail
	}
	return phases.Response{Status: status, ContentType: "application/json", Body: append(body, '\n')}
}
