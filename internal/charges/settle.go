package charges

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/phasepay/phasepay/internal/jsonbody"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// What capture, void and refund share. They read the charge they act on
// under its row lock, and answer alike a request its state does not allow.

// Operator is the PSP as capture, void and refund see it (*psp.Client).
// OperateOutcome makes one attempt and classifies the answer. The attempt
// includes the client's quick retries, and its lookup before any resend.
type Operator interface {
	OperateOutcome(ctx context.Context, req psp.OperationRequest) (psp.Outcome, error)
}

// ErrChargePending is a charge whose authorization has no known outcome
// yet, so it can be neither captured nor voided yet. Nothing was stored,
// and the same request may be retried with the same key.
var ErrChargePending = errors.New("the charge's authorization is not finished")

// ChargePendingError is ErrChargePending with the pause the client is told.
type ChargePendingError struct{ RetryAfter int }

func (e *ChargePendingError) Error() string { return ErrChargePending.Error() }
func (e *ChargePendingError) Unwrap() error { return ErrChargePending }

// RetryAfterSeconds is what the client is told to wait (Retry-After).
func (e *ChargePendingError) RetryAfterSeconds() int { return max(e.RetryAfter, 1) }

// lockChargeSQL reads a charge under its row lock, in the first phase of a
// capture, void or refund.
//
// Every such request on one charge queues here, so each decides on the
// state the one before it committed. Two captures, a capture and a void,
// or refunds summing past the capture cannot both pass, whichever api
// process runs them.
const lockChargeSQL = `SELECT ` + chargeColumns + ` FROM charges WHERE tenant_id = $1 AND id = $2 FOR UPDATE`

func lockCharge(ctx context.Context, tx *phases.Tx, tenantID int64, id string) (*Charge, error) {
	c, err := scanCharge(tx.QueryRow(ctx, lockChargeSQL, tenantID, id))
	if err != nil {
		return nil, fmt.Errorf("lock charge %q: %w", id, err)
	}
	return c, nil
}

// admitSettlement turns a capture or void away before its key is claimed.
// It refuses a charge the tenant does not have (404), or one whose
// authorization is not finished (409 charge_pending). Neither is stored.
func admitSettlement(ctx context.Context, tx *phases.Tx, tenantID int64, req phases.Request) error {
	c, err := chargeByID(ctx, tx, tenantID, chargeOfPath(req.Path))
	if err != nil {
		return err
	}
	if c.Status == StatusPending {
		return &ChargePendingError{RetryAfter: 1}
	}
	return nil
}

// chargeOfPath is the {id} of /v1/charges/{id}/capture or /void.
func chargeOfPath(path string) string { return phases.Segment(CapturePath, path, "id") }

// chargeOfRequest is the ObjectID of a capture or void, the charge in its
// path whatever the incarnation.
func chargeOfRequest(_ int64, _ string, req phases.Request, _ phases.Incarnation) string {
	return chargeOfPath(req.Path)
}

// pathOf is the request path of a capture or void (pattern) of a charge.
// It is the one spelling of it, for the parsed and the raw fingerprint
// alike (see phases.AsSent).
func pathOf(pattern, chargeID string) string { return strings.Replace(pattern, "{id}", chargeID, 1) }

// refusal is the stored answer of a request the charge's state does not
// allow, a 400 with code naming the charge.
func refusal(code problem.Code, chargeID, detail string) phases.Response {
	p := problem.New(http.StatusBadRequest, code, detail)
	p.Charge = chargeID
	return phases.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
}

// failure is the stored answer of an operation the PSP refused, a 402
// payment_failed with the PSP's reason naming the charge.
func failure(chargeID, reason string) phases.Response {
	p := problem.New(http.StatusPaymentRequired, problem.PaymentFailed, "The payment failed: "+reason)
	p.Charge = chargeID
	return phases.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
}

// decode decodes a body strictly (package jsonbody), its refusals as a
// *ValidationError naming the field.
func decode(body []byte, v any) error {
	err := jsonbody.Decode(body, v)
	if jerr, ok := errors.AsType[*jsonbody.Error](err); ok {
		return &ValidationError{Fields: []problem.FieldError{{Field: jerr.Field, Message: jerr.Message}}}
	}
	return err
}

// settleCall is the foreign call of a capture or void, on the charge's
// authorization, under the key derived from the charge and the kind.
func settleCall(o Operator, kind psp.OperationKind, suffix string, amount func(*Charge, phases.Request) int64) func(context.Context, *phases.Run[*Charge]) (phases.CallOutcome, error) {
	return func(ctx context.Context, run *phases.Run[*Charge]) (phases.CallOutcome, error) {
		c := run.Object
		// To the PSP that holds the authorization (routing between PSPs).
		req := psp.OperationRequest{Kind: kind, IdempotencyKey: c.ID + ":" + suffix, FirstSend: run.Fresh, Reference: c.ID, PSP: c.PSP}
		if c.PSPReference != nil {
			req.Authorization = *c.PSPReference
		}
		if amount != nil {
			req.Amount = amount(c, run.Request())
		}
		out, err := operate(ctx, o, req)
		c.answer = out
		return called(out, err)
	}
}

// operate makes one capture, void or refund attempt. Its outcome names the
// PSP it went to, which a router names but a single PSP's client does not.
func operate(ctx context.Context, o Operator, req psp.OperationRequest) (psp.Outcome, error) {
	out, err := o.OperateOutcome(ctx, req)
	out.PSP = cmp.Or(out.PSP, req.PSP, DefaultPSP)
	return out, err
}

// recordSettlementSQL writes the PSP's answer to a capture or void. A
// success sets the new status and the amount captured. A refusal, nothing
// done at the PSP, gives the settlement back, so that another capture or
// void may be tried.
const recordSettlementSQL = `
UPDATE charges
   SET status = $3, amount_captured = $4, settlement = CASE WHEN $5 THEN settlement END, updated_at = phasepay_now()
 WHERE tenant_id = $1 AND id = $2`

// recordSettlement is the phase after a capture's or void's PSP call. It
// records the answer, and a success's event in the same transaction. A
// refusal ends the request at once with 402 payment_failed.
func recordSettlement(success Status) func(context.Context, *phases.Tx, *phases.Run[*Charge]) (phases.Next, error) {
	return func(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (phases.Next, error) {
		c, out := run.Object, run.Object.answer
		ok := out.Class == psp.ClassSuccess
		if ok {
			c.Status = success
			if success == StatusCaptured {
				c.AmountCaptured = out.Operation.Amount
			}
		}
		tx.Queue(recordSettlementSQL, c.TenantID, c.ID, c.Status, c.AmountCaptured, ok)
		if !ok {
			return phases.Respond(failure(c.ID, out.Reason)), nil // the status did not change, so no event
		}
		if err := writeStatusEvent(ctx, tx, c); err != nil { // charge.captured or .voided, with the change
			return phases.Next{}, err
		}
		return phases.Proceed(), nil
	}
}

// answerCharge is the last phase of a capture or void, 200 with the charge.
func answerCharge(_ context.Context, _ *phases.Tx, run *phases.Run[*Charge]) (phases.Next, error) {
	return phases.Respond(jsonResponse(http.StatusOK, run.Object)), nil
}

// loadCharge reads the charge of a capture or void being resumed.
func loadCharge(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (*Charge, error) {
	return chargeOfKey(ctx, tx, run.Lease.Record)
}

const claimSettlementSQL = `UPDATE charges SET settlement = $3, updated_at = phasepay_now() WHERE tenant_id = $1 AND id = $2`

// claimSettlement queues, under the row lock, that c's one capture or void
// is s. The caller checked that it had none.
func claimSettlement(tx *phases.Tx, c *Charge, s settlement) {
	tx.Queue(claimSettlementSQL, c.TenantID, c.ID, string(s))
	c.settlement = &s
}
