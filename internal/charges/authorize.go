package charges

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// Authorize: POST /v1/charges, the operation "charges.create". The states
// of one request, and the transaction that commits each arrow (each
// recovery point is committed with its arrow's effects, fenced by the
// key's lock_version):
//
//	           claim (tx 1)
//	              │
//	              ▼
//	  ┌─────── start ───────┐   tx 1 too (WithClaim): no foreign call between
//	  │ create the charge   │   the claim and the charge row, so they commit
//	  ▼                     │   together (unless OneCommitPerPhase: tx 1b)
//	charge_created          │
//	  │ PSP authorize       │   the foreign call, outside any transaction,
//	  │ (key <charge>:authorize)  under a heartbeat-renewed lease
//	  ▼
//	psp_authorized ─────────┐   tx 2 (the step after the call): the PSP's
//	  │ answer              │   answer on the charge row; tx 2 too (unless
//	  ▼                     │   OneCommitPerPhase: tx 2b): the response
//	                        │   stored for replay, key done
//	done ◀──────────────────┘
//
// A new charge therefore costs two commits; a resumed one starts at its
// recovery point and costs one commit per remaining transaction. A PSP that
// stays unavailable releases the lease at charge_created: the next retry or
// the reaper resumes there and repeats the PSP call with the same PSP key,
// which can never authorize twice.

// Path is the request path charges' keys are claimed under.
const Path = "/v1/charges"

// The recovery points of an authorization between start and done.
const (
	PointChargeCreated idempotency.RecoveryPoint = "charge_created"
	PointPSPAuthorized idempotency.RecoveryPoint = "psp_authorized"
)

// The crash points of an authorization's own commits (besides the
// engine's phases.CrashAfterClaim and phases.CrashAfterPSPCall): after
// each transaction whose first arrow reaches the point.
const (
	CrashAfterChargeCreated = phases.CrashPoint("after_" + PointChargeCreated)
	CrashAfterPSPAuthorized = phases.CrashPoint("after_" + PointPSPAuthorized)
)

func authorizeOperation(a Authorizer, routes Routes, ids *objectIDs) *phases.Operation[*Charge] {
	return &phases.Operation[*Charge]{
		Name: "charges.create", ResumeSpan: "charges.resume", Path: Path,
		ObjectID: ids.charge,
		Load: func(ctx context.Context, q idempotency.DBTX, lease *idempotency.Lease) (*Charge, error) {
			c, err := chargeByKey(ctx, q, lease.Record.ID())
			if err != nil {
				return nil, err
			}
			return c, loadAttempts(ctx, q, c)
		},
		// tx 1: the claim and the pending charge.
		WithClaim: []phases.Arrow[*Charge]{
			{To: PointChargeCreated, Commit: createCharge(routes, ids)},
		},
		// tx 2, after the PSP's answer: the answer on the charge, and the
		// response stored.
		Steps: []phases.Step[*Charge]{{
			Call: authorizeCall(a, routes),
			Arrows: []phases.Arrow[*Charge]{
				{To: PointPSPAuthorized, Commit: recordAuthorization(routes, ids)},
				{To: idempotency.PointDone, Commit: func(_ context.Context, _ *phases.Tx, run *phases.Run[*Charge]) (phases.Transition, error) {
					return phases.Respond(response(run.Object)), nil
				}},
			},
		}},
	}
}

// createCharge is start → charge_created: a pending charge row, with the id
// the claim recorded on the key, at the PSP its route starts at, and its
// first attempt there, recorded before anything is sent. That PSP is the
// route's first for a charge whose id is derived (pinned: a retry of a
// claim lost in a failover must find the PSP the claim went to), else the
// first whose breaker lets new charges in.
func createCharge(routes Routes, ids *objectIDs) func(context.Context, *phases.Tx, *phases.Run[*Charge]) (phases.Transition, error) {
	return func(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (phases.Transition, error) {
		params, err := requestParams(run.Request())
		if err != nil {
			return phases.Transition{}, fmt.Errorf("key %q: stored request: %w", run.Lease.Record.Key, err)
		}
		at := routes.Choose(params.Currency, !routes.Single() && pinned(ids, run, run.ObjectID))
		run.Object = insertCharge(tx, run.Lease.Record.ID(), run.ObjectID, at, attemptKey(run.ObjectID, 1, routes.Single()), params)
		return phases.Next(), nil
	}
}

// authorizeCall is the foreign call before psp_authorized: one attempt, with
// the PSP client's own quick retries and lookups. Its PSP key is derived
// from the charge id, unique across tenants and stable across retries and
// takeovers, so the PSP answers a repeat with its first answer while it
// remembers the key; after that, the lookup by reference that precedes
// every resend (unless the charge is fresh) keeps it from authorizing twice.
//
// With several PSPs the call goes to the charge's current attempt's PSP
// under that attempt's key; a run that did not commit that attempt itself
// first looks the charge up at every PSP attempted before (failover.go).
func authorizeCall(a Authorizer, routes Routes) func(context.Context, *phases.Run[*Charge]) (psp.Outcome, error) {
	return func(ctx context.Context, run *phases.Run[*Charge]) (psp.Outcome, error) {
		c := run.Object
		cur := c.current()
		if !run.Fresh {
			if out, found, err := lookUpEarlier(ctx, routes, c); found || err != nil {
				return out, err
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
		if out.PSP == "" {
			out.PSP = cur.PSP
		}
		if err != nil {
			return out, fmt.Errorf("authorize %s at %s: %w", c.ID, cur.PSP, err)
		}
		return out, nil
	}
}

// recordAuthorization is charge_created → psp_authorized: the PSP's final
// answer (an authorization, a decline or a refusal) on the charge row and
// its attempt, and its event (charge.authorized, .declined or .failed) in
// the same transaction.
//
// A refusal with a PSP left on the charge's route is not an end: the
// refusal and the next attempt, at the next PSP, commit together and the
// charge stays at charge_created (phases.Again), so that the next call goes
// there, Fresh. Only a refusal moves a charge: the PSP answered that it
// did nothing. A decline is the customer's answer, final everywhere; an
// unknown outcome never reaches this arrow (the engine releases the run).
func recordAuthorization(routes Routes, ids *objectIDs) func(context.Context, *phases.Tx, *phases.Run[*Charge]) (phases.Transition, error) {
	return func(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (phases.Transition, error) {
		c, out := run.Object, run.Outcome
		cur := c.current()
		ended, answered := "", cur
		switch {
		case out.Class == psp.ClassSuccess:
			c.Status, c.PSPReference, ended = StatusAuthorized, &out.Authorization.ID, attemptAuthorized
			c.PSP = cmp.Or(out.PSP, cur.PSP)
		case out.Declined():
			c.Status, c.PSPReference, c.DeclineCode, ended = StatusDeclined, &out.Authorization.ID, out.Authorization.DeclineCode, attemptDeclined
		case out.NewKey:
			// The key is spent, its outcome still unknown: a new attempt
			// at the same PSP, under a new key (failover.go).
			renewKey(tx, c)
			return phases.Again(), nil
		default: // refused: nothing was done at the PSP, and never will be
			if failedOver(tx, run, routes, ids) {
				return phases.Again(), nil
			}
			reason := cmp.Or(out.Reason, "refused by the payment service provider")
			c.Status, c.FailureReason, ended = StatusFailed, &reason, attemptRefused
		}
		if c.PSP != cur.PSP {
			// Found authorized at an earlier PSP: the current attempt
			// was not what answered.
			answered = nil
		}
		updateAuthorization(tx, c, answered, ended)
		if err := writeStatusEvent(ctx, tx, c); err != nil {
			return phases.Transition{}, err
		}
		return phases.Next(), nil
	}
}

// response is the final answer for a charge the PSP has answered.
func response(c *Charge) idempotency.Response {
	switch c.Status {
	case StatusDeclined:
		p := problem.New(http.StatusPaymentRequired, problem.CardDeclined, "The card was declined.")
		p.Charge = c.ID
		return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
	case StatusFailed:
		reason := "refused by the payment service provider"
		if c.FailureReason != nil {
			reason = *c.FailureReason
		}
		p := problem.New(http.StatusPaymentRequired, problem.PaymentFailed, "The payment failed: "+reason)
		p.Charge = c.ID
		return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
	}
	return jsonResponse(http.StatusCreated, c)
}

// jsonResponse is an object's answer.
func jsonResponse(status int, v interface{ MarshalJSON() ([]byte, error) }) idempotency.Response {
	body, err := v.MarshalJSON()
	if err != nil {
		panic(err) // plain fields only: cannot fail
	}
	return idempotency.Response{Status: status, ContentType: "application/json", Body: append(body, '\n')}
}
