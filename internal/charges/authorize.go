package charges

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// Authorize: POST /v1/charges. The states of one request, and the
// transaction that commits each arrow (each recovery point is committed with
// its arrow's effects, fenced by the key's lock_version):
//
//	           claim (tx 1)
//	              │
//	              ▼
//	  ┌─────── start ───────┐   tx 1 too: no foreign call between the claim
//	  │ create the charge   │   and the charge row, so they commit together
//	  ▼                     │   (unless OneCommitPerPhase: tx 1b)
//	charge_created          │
//	  │ PSP authorize       │   the foreign call, outside any transaction,
//	  │ (key <charge>:authorize)  under a heartbeat-renewed lease
//	  ▼
//	psp_authorized ─────────┐   tx 2: the PSP's answer on the charge row
//	  │ answer              │   tx 2 too (unless OneCommitPerPhase: tx 2b):
//	  ▼                     │   the response stored for replay, key done
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

// The crash points of an authorization: after each commit, and after the
// PSP answered but before its answer committed (the lost-response case).
const (
	CrashAfterClaim         = phases.CrashAfterClaim
	CrashAfterChargeCreated = CrashPoint("after_" + PointChargeCreated)
	CrashAfterPSPCall       = phases.CrashAfterPSPCall
	CrashAfterPSPAuthorized = CrashPoint("after_" + PointPSPAuthorized)
)

func authorizeOperation(a Authorizer) *phases.Operation[*Charge] {
	return &phases.Operation[*Charge]{
		Path: Path, Span: "charges.create", ResumeSpan: "charges.resume",
		ObjectID: func(idempotency.Canonical) string { return newChargeID() },
		Load: func(ctx context.Context, q idempotency.DBTX, lease *idempotency.Lease) (*Charge, error) {
			return chargeByKey(ctx, q, lease.Record.ID())
		},
		Arrows: []phases.Arrow[*Charge]{
			{To: PointChargeCreated, Commit: createCharge},
			{To: PointPSPAuthorized, Call: authorizeCall(a), Commit: recordAuthorization},
			{To: idempotency.PointDone, Commit: func(_ context.Context, _ pgx.Tx, run *phases.Run[*Charge]) error {
				run.Finish(response(run.Object))
				return nil
			}},
		},
	}
}

// createCharge is start → charge_created: a pending charge row, with the id
// the claim recorded on the key.
func createCharge(ctx context.Context, tx pgx.Tx, run *phases.Run[*Charge]) error {
	params, err := ParseCreateParams(run.Request().Body)
	if err != nil {
		return fmt.Errorf("key %q: stored request: %w", run.Lease.Record.Key, err)
	}
	run.Object, err = insertCharge(ctx, tx, run.Lease.Record.ID(), run.ObjectID, params)
	return err
}

// authorizeCall is the foreign call before psp_authorized: one attempt, with
// the PSP client's own quick retries and lookups. Its PSP key is derived
// from the charge id, unique across tenants and stable across retries and
// takeovers, so the PSP answers a repeat with its first answer while it
// remembers the key; after that, the lookup by reference that precedes
// every resend (unless the charge is fresh) keeps it from authorizing twice.
func authorizeCall(a Authorizer) func(context.Context, *phases.Run[*Charge]) (psp.Outcome, error) {
	return func(ctx context.Context, run *phases.Run[*Charge]) (psp.Outcome, error) {
		c := run.Object
		out, err := a.AuthorizeOutcome(ctx, psp.AuthorizeRequest{
			IdempotencyKey: PSPKey(c.ID),
			FirstSend:      run.Fresh || defectNoLookup,
			Amount:         c.Amount,
			Currency:       c.Currency,
			PaymentMethod:  c.PaymentMethod,
			Reference:      c.ID,
		})
		if err != nil {
			return out, fmt.Errorf("authorize %s: %w", c.ID, err)
		}
		return out, nil
	}
}

// recordAuthorization is charge_created → psp_authorized: the PSP's final
// answer (an authorization, a decline or a refusal) on the charge row, and
// its event (charge.authorized, .declined or .failed) in the same
// transaction.
func recordAuthorization(ctx context.Context, tx pgx.Tx, run *phases.Run[*Charge]) error {
	c, out := run.Object, run.Outcome
	switch {
	case out.Class == psp.ClassSuccess:
		c.Status, c.PSPReference = StatusAuthorized, &out.Authorization.ID
	case out.Declined():
		c.Status, c.PSPReference, c.DeclineCode = StatusDeclined, &out.Authorization.ID, out.Authorization.DeclineCode
	default: // refused: nothing was done at the PSP, and never will be
		reason := cmp.Or(out.Reason, "refused by the payment service provider")
		c.Status, c.FailureReason = StatusFailed, &reason
	}
	if err := updateAuthorization(ctx, tx, c); err != nil {
		return err
	}
	return writeStatusEvent(ctx, tx, c)
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
