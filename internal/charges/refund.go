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

// Refund is POST /v1/refunds. Its phases, and the transaction that
// commits each:
//
//	          admit + claim (tx 1)   404 unknown charge: rolled back
//	              │
//	              ▼
//	  ┌─────── start ──────────────┐ tx 1 too: the charge locked FOR UPDATE;
//	  │ reserve, create the refund │ not captured → 400 charge_not_refundable,
//	  ▼                            │ more than is left → 400 amount_too_large,
//	refund_created                 │ stored (done); else the amount reserved
//	  │ PSP refund                 │ on the charge and a pending refund row
//	  │ (key <refund>:refund)      outside any transaction, lease heartbeat
//	  ▼
//	psp_refunded ───────────────┐  tx 2: succeeded (reserved → refunded) or
//	  │ answer                  │  failed (reservation released)
//	  ▼                         │  tx 2 too: 201 refund, or 402; key done
//	done ◀──────────────────────┘
//
// The reservation (charges.amount_refunding) is taken under the charge's
// row lock and bounded by a CHECK constraint. It keeps pending and
// succeeded refunds together within amount_captured, however many refunds
// race on one charge.

// RefundPath is the request path of a refund.
const RefundPath = "/v1/refunds"

// The recovery points of a refund between start and done.
const (
	PointRefundCreated phases.Point = "refund_created"
	PointPSPRefunded   phases.Point = "psp_refunded"
)

// RefundParams is the body of a refund. A nil Amount refunds all that is
// left.
type RefundParams struct {
	Charge string `json:"charge"`
	Amount *int64 `json:"amount,omitempty"`
}

// ParseRefundRequest parses a refund body and fingerprints what was parsed.
// Errors are *ValidationError.
func ParseRefundRequest(body []byte) (phases.Request, RefundParams, error) {
	var p RefundParams
	if err := decode(body, &p); err != nil {
		return phases.Request{}, p, err
	}
	verr := &ValidationError{}
	if !chargeIDRE.MatchString(p.Charge) {
		verr.add("charge", "must be a charge id, ch_ followed by 1 to 64 of a-z and 0-9")
	}
	if p.Amount != nil && (*p.Amount <= 0 || *p.Amount > MaxAmount) {
		verr.add("amount", "must be a positive integer of at most %d", int64(MaxAmount))
	}
	if len(verr.Fields) > 0 {
		return phases.Request{}, p, verr
	}
	req, err := phases.NewRequest(http.MethodPost, RefundPath, p)
	return req, p, err
}

func refundOperation(o Operator, ids *objectIDs) *phases.Operation[*Refund] {
	return &phases.Operation[*Refund]{
		Name: "refunds.create", Method: http.MethodPost, Path: RefundPath,
		Parse: func(_ string, body []byte) (phases.Request, error) {
			req, _, err := ParseRefundRequest(body)
			return req, err
		},
		Admit: func(ctx context.Context, tx *phases.Tx, tenantID int64, req phases.Request) error {
			_, err := chargeByID(ctx, tx, tenantID, refundParams(req).Charge)
			return err
		},
		ObjectID: ids.refund,
		Load: func(ctx context.Context, tx *phases.Tx, run *phases.Run[*Refund]) (*Refund, error) {
			return refundByKey(ctx, tx, run.Lease.Record.ID())
		},
		Phases: []phases.Phase[*Refund]{
			// tx 1, with the claim: the amount reserved on the charge and
			// the pending refund, under the charge's lock.
			{To: PointRefundCreated, Commit: createRefund},
			// tx 2, after the PSP's answer: the refund's end, the answer
			// stored.
			{To: PointPSPRefunded, Call: refundCall(o), Commit: recordRefund},
			{To: phases.Done, Commit: answerRefund},
		},
	}
}

// createRefund is start → refund_created, under the charge's row lock.
func createRefund(ctx context.Context, tx *phases.Tx, run *phases.Run[*Refund]) (phases.Next, error) {
	p := refundParams(run.Request())
	c, err := lockCharge(ctx, tx, run.Lease.Record.TenantID, p.Charge)
	if err != nil {
		return phases.Next{}, err
	}
	left := c.AmountCaptured - c.AmountRefunded - c.amountRefunding
	amount := left
	if p.Amount != nil {
		amount = *p.Amount
	}
	var refused phases.Response
	switch {
	case c.Status != StatusCaptured || left == 0:
		refused = refusal(problem.ChargeNotRefundable, c.ID, fmt.Sprintf("Charge %s is %s with %d left to refund.", c.ID, c.Status, max(left, 0)))
	case amount > left:
		refused = refusal(problem.AmountTooLarge, c.ID, fmt.Sprintf("The amount exceeds the %d left to refund.", left))
	}
	if refused.Status != 0 {
		// No refund was made, so the key names no object. The refund id
		// derived for it would answer 404 (pitfall C5 "A refused
		// request's key names an object that does not exist"). The
		// refusal names the charge.
		if err := run.Lease.SetObject(ctx, tx, ""); err != nil {
			return phases.Next{}, err
		}
		return phases.Respond(refused), nil
	}
	if run.Object, err = insertRefund(ctx, tx, run.Lease.Record.ID(), run.ObjectID, c, amount); err != nil {
		return phases.Next{}, err
	}
	return phases.Proceed(), nil
}

// refundCall is the foreign call, the refund of the charge's authorization
// under the key derived from the refund.
func refundCall(o Operator) func(context.Context, *phases.Run[*Refund]) (phases.CallOutcome, error) {
	return func(ctx context.Context, run *phases.Run[*Refund]) (phases.CallOutcome, error) {
		r := run.Object
		out, err := operate(ctx, o, psp.OperationRequest{
			Kind: psp.KindRefund, IdempotencyKey: r.ID + ":refund", FirstSend: run.Fresh,
			Authorization: r.authorization, Amount: r.Amount, Reference: r.ID, PSP: r.psp,
		})
		r.answer = out
		return called(out, err)
	}
}

// recordRefund is refund_created → psp_refunded. It records the refund's
// end, turns the charge's reservation into a refund or releases it, and
// writes the event (refund.succeeded or .failed) in the same transaction.
func recordRefund(ctx context.Context, tx *phases.Tx, run *phases.Run[*Refund]) (phases.Next, error) {
	r, out := run.Object, run.Object.answer
	if out.Class == psp.ClassSuccess {
		r.Status, r.PSPReference = RefundSucceeded, &out.Operation.ID
	} else {
		reason := cmp.Or(out.Reason, "refused by the payment service provider")
		r.Status, r.failureReason = RefundFailed, &reason
	}
	updateRefund(tx, r)
	if err := writeRefundEvent(ctx, tx, r); err != nil {
		return phases.Next{}, err
	}
	return phases.Proceed(), nil
}

// answerRefund is psp_refunded → done. It answers 201 with the refund, or
// 402.
func answerRefund(_ context.Context, _ *phases.Tx, run *phases.Run[*Refund]) (phases.Next, error) {
	r := run.Object
	if r.Status == RefundFailed {
		return phases.Respond(failure(r.Charge, cmp.Or(deref(r.failureReason), "refused by the payment service provider"))), nil
	}
	return phases.Respond(jsonResponse(http.StatusCreated, r)), nil
}

// refundParams reads a stored refund request, validated before it was
// stored.
func refundParams(req phases.Request) RefundParams {
	var p RefundParams
	_ = decode(req.Body, &p)
	return p
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
