package charges

import (
	"context"
	"fmt"
	"net/http"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// Capture is POST /v1/charges/{id}/capture. Its phases, and the
// transaction that commits each:
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
// The settlement column, set under the charge's row lock in tx 1, allows at
// most one capture or void per charge. A racing capture or void waits for
// the lock, then finds it set, and answers as if it came after the winner.

// CapturePath is the request path pattern of a capture.
const CapturePath = "/v1/charges/{id}/capture"

// The recovery points of a capture between start and done.
const (
	PointCaptureStarted phases.Point = "capture_started"
	PointPSPCaptured    phases.Point = "psp_captured"
)

// CaptureParams is the body of a capture. A nil Amount captures all of the
// authorized amount.
type CaptureParams struct {
	Amount *int64 `json:"amount,omitempty"`
}

// ParseCaptureRequest parses a capture body for the charge id and
// fingerprints what was parsed. Errors are *ValidationError.
func ParseCaptureRequest(chargeID string, body []byte) (phases.Request, error) {
	var p CaptureParams
	if err := decode(body, &p); err != nil {
		return phases.Request{}, err
	}
	if p.Amount != nil && (*p.Amount <= 0 || *p.Amount > MaxAmount) {
		return phases.Request{}, &ValidationError{Fields: []problem.FieldError{{Field: "amount", Message: fmt.Sprintf("must be a positive integer of at most %d", int64(MaxAmount))}}}
	}
	return phases.NewRequest(http.MethodPost, pathOf(CapturePath, chargeID), p)
}

func captureOperation(o Operator) *phases.Operation[*Charge] {
	return &phases.Operation[*Charge]{
		Name: "charges.capture", Method: http.MethodPost, Path: CapturePath,
		Parse: func(path string, body []byte) (phases.Request, error) {
			return ParseCaptureRequest(chargeOfPath(path), body)
		},
		Admit:    admitSettlement,
		ObjectID: chargeOfRequest,
		Load:     loadCharge,
		Phases: []phases.Phase[*Charge]{
			// tx 1, with the claim: the settlement claimed under the
			// charge's lock.
			{To: PointCaptureStarted, Commit: startCapture},
			// tx 2, after the PSP's answer: the capture recorded, the
			// answer stored.
			{To: PointPSPCaptured, Call: settleCall(o, psp.KindCapture, "capture", captureAmount), Commit: recordSettlement(StatusCaptured)},
			{To: phases.Done, Commit: answerCharge},
		},
	}
}

// startCapture is start → capture_started, under the charge's row lock.
func startCapture(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (phases.Next, error) {
	c, err := lockCharge(ctx, tx, run.Lease.Record.TenantID, run.ObjectID)
	if err != nil {
		return phases.Next{}, err
	}
	run.Object = c
	switch {
	case c.Status != StatusAuthorized || c.settlement != nil:
		return phases.Respond(refusal(problem.ChargeNotCapturable, c.ID, fmt.Sprintf("Charge %s is %s%s and cannot be captured.", c.ID, c.Status, settling(c)))), nil
	case captureAmount(c, run.Request()) > c.Amount:
		return phases.Respond(refusal(problem.AmountTooLarge, c.ID, fmt.Sprintf("The amount exceeds the authorized %d.", c.Amount))), nil
	}
	claimSettlement(tx, c, settleCapture)
	return phases.Proceed(), nil
}

// captureAmount is the amount a capture request asks for, all by default.
func captureAmount(c *Charge, req phases.Request) int64 {
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
