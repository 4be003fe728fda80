package charges

import (
	"context"
	"fmt"
	"net/http"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// Void is POST /v1/charges/{id}/void. Its phases, and the transaction that
// commits each:
//
//	          admit + claim (tx 1)   404 unknown charge, 409 charge_pending:
//	              │                  rolled back, nothing stored
//	              ▼
//	  ┌─────── start ──────────────┐ tx 1 too: the charge locked FOR UPDATE;
//	  │ claim the settlement       │ not authorized, already captured or
//	  ▼                            │ voided → 400 charge_not_voidable,
//	void_started                   │ stored (done)
//	  │ PSP void
//	  │ (key <charge>:void)        outside any transaction, lease heartbeat
//	  ▼
//	psp_voided ─────────────────┐  tx 2: voided; a refusal gives the
//	  │ answer                  │  settlement back, 402
//	  ▼                         │  tx 2 too: 200 with the charge, key done
//	done ◀──────────────────────┘
//
// A void and a capture of one charge meet at the charge's row lock and its
// settlement column (see capture.go). At most one of them succeeds.

// VoidPath is the request path pattern of a void.
const VoidPath = "/v1/charges/{id}/void"

// The recovery points of a void between start and done.
const (
	PointVoidStarted phases.Point = "void_started"
	PointPSPVoided   phases.Point = "psp_voided"
)

// ParseVoidRequest parses a void body ({}) for the charge id and
// fingerprints it. Errors are *ValidationError.
func ParseVoidRequest(chargeID string, body []byte) (phases.Request, error) {
	var p struct{}
	if err := decode(body, &p); err != nil {
		return phases.Request{}, err
	}
	return phases.NewRequest(http.MethodPost, pathOf(VoidPath, chargeID), p)
}

func voidOperation(o Operator) *phases.Operation[*Charge] {
	return &phases.Operation[*Charge]{
		Name: "charges.void", Method: http.MethodPost, Path: VoidPath,
		Parse: func(path string, body []byte) (phases.Request, error) {
			return ParseVoidRequest(chargeOfPath(path), body)
		},
		Admit:    admitSettlement,
		ObjectID: chargeOfRequest,
		Load:     loadCharge,
		Phases: []phases.Phase[*Charge]{
			// tx 1, with the claim: the settlement claimed under the
			// charge's lock.
			{To: PointVoidStarted, Commit: startVoid},
			// tx 2, after the PSP's answer: the charge voided, the answer
			// stored.
			{To: PointPSPVoided, Call: settleCall(o, psp.KindVoid, "void", nil), Commit: recordSettlement(StatusVoided)},
			{To: phases.Done, Commit: answerCharge},
		},
	}
}

// startVoid is start → void_started, under the charge's row lock.
func startVoid(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (phases.Next, error) {
	c, err := lockCharge(ctx, tx, run.Lease.Record.TenantID, run.ObjectID)
	if err != nil {
		return phases.Next{}, err
	}
	run.Object = c
	if c.Status != StatusAuthorized || c.settlement != nil {
		return phases.Respond(refusal(problem.ChargeNotVoidable, c.ID, fmt.Sprintf("Charge %s is %s%s and cannot be voided.", c.ID, c.Status, settling(c)))), nil
	}
	claimSettlement(tx, c, settleVoid)
	return phases.Proceed(), nil
}
