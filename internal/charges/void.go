package charges

import (
	"context"
	"fmt"
	"net/http"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// Void: POST /v1/charges/{id}/void. The states of one request and the
// transaction that commits each arrow:
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
// settlement column (see capture.go): at most one of them succeeds.

// VoidPath is the request path pattern of a void.
const VoidPath = "/v1/charges/{id}/void"

// The recovery points of a void between start and done.
const (
	PointVoidStarted idempotency.RecoveryPoint = "void_started"
	PointPSPVoided   idempotency.RecoveryPoint = "psp_voided"
)

// ParseVoidRequest parses a void body ({}) for the charge id and
// fingerprints it. Errors are *ValidationError.
func ParseVoidRequest(chargeID string, body []byte) (idempotency.Canonical, error) {
	var p struct{}
	if err := decode(body, &p); err != nil {
		return idempotency.Canonical{}, err
	}
	return idempotency.CanonicalizeParams(http.MethodPost, pathOf(VoidPath, chargeID), p)
}

func voidOperation(o Operator) *phases.Operation[*Charge] {
	return &phases.Operation[*Charge]{
		Name: "charges.void", ResumeSpan: "charges.void.resume", Path: VoidPath,
		Admit:    admitSettlement,
		ObjectID: func(req idempotency.Canonical) string { return chargeOfPath(req.Path) },
		Load:     loadCharge,
		// tx 1: the claim and the settlement claimed under the charge's lock.
		WithClaim: []phases.Arrow[*Charge]{
			{To: PointVoidStarted, Commit: startVoid},
		},
		// tx 2, after the PSP's answer: the charge voided, the answer stored.
		Steps: []phases.Step[*Charge]{{
			Call: settleCall(o, psp.KindVoid, "void", nil),
			Arrows: []phases.Arrow[*Charge]{
				{To: PointPSPVoided, Commit: recordSettlement(StatusVoided)},
				{To: idempotency.PointDone, Commit: answerCharge},
			},
		}},
	}
}

// startVoid is start → void_started, under the charge's row lock.
func startVoid(ctx context.Context, tx *phases.Tx, run *phases.Run[*Charge]) (phases.Transition, error) {
	c, err := lockCharge(ctx, tx, run.Lease.Record.TenantID, run.ObjectID)
	if err != nil {
		return phases.Transition{}, err
	}
	run.Object = c
	if c.Status != StatusAuthorized || c.settlement != nil {
		return phases.Respond(refusal(problem.ChargeNotVoidable, c.ID, fmt.Sprintf("Charge %s is %s%s and cannot be voided.", c.ID, c.Status, settling(c)))), nil
	}
	claimSettlement(tx, c, settleVoid)
	return phases.Next(), nil
}
