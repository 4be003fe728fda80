package charges

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// Capture: POST /v1/charges/{id}/capture. The states of one request and the
// transaction that commits each arrow:
//
//	          admit + claim (tx 1)   404 unknown charge, 409 charge_pending:
//	              │                  rolled back, nothing stored
//	              ▼
//	  ┌─────── start ──────────────┐ tx 1 too: the charge locked FOR UPDATE;
//	  │ claim the settlement       │ not authorized, already captured or
//	  ▼                            │ voided → 400 charge_not_capturable,
//	capture_started                │ amount over → 400 amount_too_large,
//	  │ PSP capture                │ stored (done)
//	  │ (key <charge>:capture)     outside any transaction, lease heartbeat
//	  ▼
//	psp_captured ───────────────┐  tx 2: captured and amount_captured; a
//	  │ answer                  │  refusal gives the settlement back, 402
//	  ▼                         │  tx 2 too: 200 with the charge, key done
//	done ◀──────────────────────┘
//
// The settlement column, set under the charge's row lock in tx 1, is what
// makes at most one capture or void per charge: a racing capture or void
// waits for the lock and then finds it set, and answers as if it had come
// after the winner.

// CapturePath is the request path pattern of a capture.
const CapturePath = "/v1/charges/{id}/capture"

// The recovery points of a capture between start and done.
const (
	PointCaptureStarted idempotency.RecoveryPoint = "capture_started"
	PointPSPCaptured    idempotency.RecoveryPoint = "psp_captured"
)

// CaptureParams is the body of a capture: the amount to capture, all of
// the authorized amount when nil.
type CaptureParams struct {
	Amount *int64 `json:"amount,omitempty"`
}

// ParseCaptureRequest parses a capture body for the charge id and
// fingerprints what was parsed. Errors are *ValidationError.
func ParseCaptureRequest(chargeID string, body []byte) (idempotency.Canonical, error) {
	var p CaptureParams
	if err := decode(body, &p); err != nil {
		return idempotency.Canonical{}, err
	}
	if p.Amount != nil && (*p.Amount <= 0 || *p.Amount > MaxAmount) {
		return idempotency.Canonical{}, &ValidationError{Fields: []problem.FieldError{{Field: "amount", Message: fmt.Sprintf("must be a positive integer of at most %d", int64(MaxAmount))}}}
	}
	return idempotency.CanonicalizeParams(http.MethodPost, pathOf(CapturePath, chargeID), p)
}

func captureOperation(o Operator) *phases.Operation[*Charge] {
	return &phases.Operation[*Charge]{
		Path: CapturePath, Span: "charges.capture", ResumeSpan: "charges.capture.resume",
		Admit:    admitSettlement,
		ObjectID: func(_ int64, _ string, req idempotency.Canonical, _ int) string { return chargeOfPath(req.Path) },
		Load:     loadCharge,
		Arrows: []phases.Arrow[*Charge]{
			{To: PointCaptureStarted, Commit: startCapture},
			{To: PointPSPCaptured, Call: settleCall(o, psp.KindCapture, "capture", captureAmount), Commit: recordSettlement(StatusCaptured)},
			{To: idempotency.PointDone, Commit: answerCharge},
		},
	}
}

// startCapture is start → capture_started, under the charge's row lock.
func startCapture(ctx context.Context, tx pgx.Tx, run *phases.Run[*Charge]) error {
	c, err := lockCharge(ctx, tx, run.Lease.Record.TenantID, run.ObjectID)
	if err != nil {
		return err
	}
	run.Object = c
	switch {
	case c.Status != StatusAuthorized || c.settlement != nil:
		run.Finish(refusal(problem.ChargeNotCapturable, c.ID, fmt.Sprintf("Charge %s is %s%s and cannot be captured.", c.ID, c.Status, settling(c))))
		return nil
	case captureAmount(c, run.Request()) > c.Amount:
		run.Finish(refusal(problem.AmountTooLarge, c.ID, fmt.Sprintf("The amount exceeds the authorized %d.", c.Amount)))
		return nil
	}
	return claimSettlement(ctx, tx, c, settleCapture)
}

// captureAmount is the amount a capture request asks for: all by default.
func captureAmount(c *Charge, req idempotency.Canonical) int64 {
	var p CaptureParams
	if err := decode(req.Body, &p); err != nil || p.Amount == nil {
		return c.Amount
	}
	return *p.Amount
}

// settling says, for a refusal, which settlement is under way.
func settling(c *Charge) string {
	if c.settlement == nil || (c.Status != StatusAuthorized) {
		return ""
	}
	return ", with a " + string(*c.settlement) + " under way"
}
