package charges

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// An operator's resolution of a capture, void or refund. Each is looked up
// at the PSP that holds the charge's authorization, by the reference it was
// sent with (the charge for a capture or void, the refund for a refund),
// and the answer decides as for a charge: the PSP holds the operation, so
// it cannot be marked failed; it holds none, so it cannot be marked
// succeeded. A capture marked failed while the PSP had captured would give
// the settlement back for a void the PSP then refuses; a refund marked
// failed would let the customer be refunded twice.
//
// The resolution commits what the operation's own last phase would have:
// the PSP's result on the object (captured and its amount, voided, a
// refund succeeded), or the operation given up (a capture's or void's
// settlement released, a refund failed and its amount no longer held), the
// event of the change, and the answer stored, in one transaction with the
// audit record, fenced by the resolution's lease.

// OperationFinder is the PSP as a resolution of a capture, void or refund
// asks it (*psp.Client, *routing.Router): whether it holds the operation.
type OperationFinder interface {
	FindOperation(ctx context.Context, req psp.OperationRequest) (psp.Operation, bool, error)
}

// resolveSettlement settles a needs_attention capture or void (kind).
func (s *Service) resolveSettlement(ctx context.Context, lease *idempotency.Lease, r Resolution, kind psp.OperationKind) (idempotency.Response, error) {
	c, err := chargeOfKey(ctx, s.pool, lease.Record)
	if err != nil {
		return idempotency.Response{}, err
	}
	if lease.Record.Point == idempotency.PointStart {
		// Its settlement was never claimed, so nothing was sent.
		return s.resolveUnsent(ctx, lease, r, c.ID)
	}
	if err := awaiting(c, kind); err != nil {
		return idempotency.Response{}, err
	}
	req := psp.OperationRequest{Kind: kind, Reference: c.ID, Authorization: deref(c.PSPReference), PSP: c.PSP}
	op, pspSaid, err := s.askPSP(ctx, req, r)
	if err != nil {
		return idempotency.Response{}, err
	}
	return s.settle(ctx, lease, r, pspSaid, func(tx pgx.Tx) (idempotency.Response, error) {
		c, err := scanCharge(tx.QueryRow(ctx, lockChargeSQL, c.TenantID, c.ID))
		if err != nil {
			return idempotency.Response{}, fmt.Errorf("lock charge %s: %w", req.Reference, err)
		}
		if err := awaiting(c, kind); err != nil {
			return idempotency.Response{}, err
		}
		ok := r.As == ResolveSucceeded
		if ok {
			c.Status = StatusVoided
			if kind == psp.KindCapture {
				c.Status, c.AmountCaptured = StatusCaptured, captureAmount(c, lease.Record.Request)
				if op != nil {
					c.AmountCaptured = op.Amount // what the PSP captured
				}
			}
		}
		// As recordSettlement: the PSP's result, or the settlement given
		// back so that another capture or void may be tried.
		if _, err := tx.Exec(ctx, recordSettlementSQL, c.TenantID, c.ID, c.Status, c.AmountCaptured, ok); err != nil {
			return idempotency.Response{}, fmt.Errorf("resolve %s of %s: %w", kind.Call(), c.ID, err)
		}
		if !ok {
			return resolvedFailure(c.ID), nil // the status did not change: no event
		}
		if err := writeStatusEvent(ctx, tx, c); err != nil {
			return idempotency.Response{}, err
		}
		return jsonResponse(http.StatusOK, c), nil
	})
}

// awaiting checks that c is held by a capture or void (kind) whose outcome
// is not recorded: authorized, its settlement claimed by kind. A needs_attention
// key at capture_started or void_started always finds it so; anything else
// is not what the operator was shown, and nothing is changed.
func awaiting(c *Charge, kind psp.OperationKind) error {
	if c.Status != StatusAuthorized || c.settlement == nil || string(*c.settlement) != kind.Call() {
		return fmt.Errorf("resolve %s of %s: the charge is %s%s, not awaiting this %s", kind.Call(), c.ID, c.Status, settling(c), kind.Call())
	}
	return nil
}

// resolveRefund settles a needs_attention refund.
func (s *Service) resolveRefund(ctx context.Context, lease *idempotency.Lease, r Resolution) (idempotency.Response, error) {
	ref, err := refundByKey(ctx, s.pool, lease.Record.ID())
	if errors.Is(err, ErrRefundNotFound) {
		// Stopped before its refund existed: nothing was sent.
		return s.resolveUnsent(ctx, lease, r, refundParams(lease.Record.Request).Charge)
	}
	if err != nil {
		return idempotency.Response{}, err
	}
	if ref.Status != RefundPending {
		return idempotency.Response{}, fmt.Errorf("resolve refund %s: it is %s, not awaiting the PSP", ref.ID, ref.Status)
	}
	req := psp.OperationRequest{Kind: psp.KindRefund, Reference: ref.ID, Authorization: ref.authorization, PSP: ref.psp}
	op, pspSaid, err := s.askPSP(ctx, req, r)
	if err != nil {
		return idempotency.Response{}, err
	}
	return s.settle(ctx, lease, r, pspSaid, func(tx pgx.Tx) (idempotency.Response, error) {
		if r.As == ResolveSucceeded {
			ref.Status = RefundSucceeded
			if op != nil {
				ref.PSPReference = &op.ID
			}
		} else {
			ref.Status, ref.failureReason = RefundFailed, new(string(ResolvedFailedReason))
		}
		// As recordRefund: the reservation on the charge refunded or
		// released; fenced on the refund being pending.
		if _, err := tx.Exec(ctx, updateRefundSQL, ref.TenantID, ref.ID, string(ref.Status), ref.PSPReference, ref.failureReason); err != nil {
			return idempotency.Response{}, fmt.Errorf("resolve refund %s: %w", ref.ID, err)
		}
		if err := writeRefundEvent(ctx, tx, ref); err != nil {
			return idempotency.Response{}, err
		}
		if ref.Status == RefundFailed {
			return resolvedFailure(ref.Charge), nil
		}
		return jsonResponse(http.StatusCreated, ref), nil
	})
}

// resolveUnsent settles a capture, void or refund that stopped before its
// PSP call could be made: only failed is true, and nothing but the answer
// changes.
func (s *Service) resolveUnsent(ctx context.Context, lease *idempotency.Lease, r Resolution, chargeID string) (idempotency.Response, error) {
	if r.As == ResolveSucceeded {
		return idempotency.Response{}, fmt.Errorf("%w: the request stopped before its PSP call, so nothing was sent to the PSP", ErrResolutionContradicted)
	}
	return s.settle(ctx, lease, r, "", func(pgx.Tx) (idempotency.Response, error) {
		return resolvedFailure(chargeID), nil
	})
}

// askPSP looks req up at the PSP that holds its authorization, unless
// r.Force, and refuses an answer that contradicts r.As. It returns the
// operation found (nil: none, or not asked) and a one-line account of what
// the PSP said, for the audit record.
func (s *Service) askPSP(ctx context.Context, req psp.OperationRequest, r Resolution) (*psp.Operation, string, error) {
	if r.Force {
		return nil, "", nil
	}
	finder, ok := s.psp.(OperationFinder)
	if !ok {
		return nil, "", fmt.Errorf("%w: this PSP client cannot look a %s up", ErrPSPLookupFailed, req.Kind.Call())
	}
	op, found, err := finder.FindOperation(ctx, req)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s of %s: %w", ErrPSPLookupFailed, req.Kind.Call(), req.Reference, err)
	}
	where := pspName(req.PSP)
	if !found {
		said := fmt.Sprintf("no %s of %s on %s at %s", req.Kind.Call(), req.Reference, req.Authorization, where)
		if r.As == ResolveSucceeded {
			return nil, "", fmt.Errorf("%w: asked to mark the %s of %s succeeded, but the PSP says: %s",
				ErrResolutionContradicted, req.Kind.Call(), req.Reference, said)
		}
		return nil, said, nil
	}
	said := fmt.Sprintf("%s %s of %d at %s", op.Status, op.ID, op.Amount, where)
	if r.As == ResolveFailed {
		return nil, "", fmt.Errorf("%w: asked to mark the %s of %s failed, but the PSP holds %s %s (%s %d)",
			ErrResolutionContradicted, req.Kind.Call(), req.Reference, req.Kind.Call(), op.ID, op.Status, op.Amount)
	}
	return &op, said, nil
}

// pspName names a PSP in what a resolution records: "default" with one.
func pspName(name string) string {
	if name == "" {
		return DefaultPSP
	}
	return name
}
