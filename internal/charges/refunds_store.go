package charges

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
)

// RefundStatus is where a refund stands with the PSP.
type RefundStatus string

// The statuses of a refund: pending until the PSP's answer is committed.
const (
	RefundPending   RefundStatus = "pending"
	RefundSucceeded RefundStatus = "succeeded"
	RefundFailed    RefundStatus = "failed"
)

// ErrRefundNotFound: no such refund for this tenant.
var ErrRefundNotFound = errors.New("refund not found")

// Refund gives back (part of) a captured charge, once per idempotency key.
type Refund struct {
	TenantID     int64
	ID           string
	Charge       string
	Amount       int64
	Status       RefundStatus
	PSPReference *string
	CreatedAt    time.Time

	failureReason *string
	authorization string      // the charge's PSP authorization, for the PSP call
	psp           string      // the PSP that holds it, where the refund goes
	answer        psp.Outcome // the PSP's answer to this run's call
}

// MarshalJSON renders the API's refund object.
func (r Refund) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID           string       `json:"id"`
		Object       string       `json:"object"`
		Charge       string       `json:"charge"`
		Amount       int64        `json:"amount"`
		Status       RefundStatus `json:"status"`
		PSPReference *string      `json:"psp_reference"`
		CreatedAt    string       `json:"created_at"`
	}{r.ID, "refund", r.Charge, r.Amount, r.Status, r.PSPReference, r.CreatedAt.UTC().Format(time.RFC3339)})
}

// chargeIDRE is what a charge id may look like in a request body.
var chargeIDRE = regexp.MustCompile(`^ch_[a-z0-9]{1,64}$`)

// refundColumns joins the charge for its authorization: a refund is always
// read with the charge it refunds.
const refundColumns = `r.tenant_id, r.id, r.charge_id, r.amount, r.status, r.psp_reference, r.created_at, r.failure_reason,
       coalesce(c.psp_reference, ''), c.psp`

const refundFrom = ` FROM refunds r JOIN charges c ON c.tenant_id = r.tenant_id AND c.id = r.charge_id`

func scanRefund(row pgx.Row) (*Refund, error) {
	var r Refund
	err := row.Scan(&r.TenantID, &r.ID, &r.Charge, &r.Amount, &r.Status, &r.PSPReference, &r.CreatedAt, &r.failureReason, &r.authorization, &r.psp)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrRefundNotFound
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// insertRefundSQL reserves the amount on the charge (the CHECK constraint
// charges_amounts_check refuses a reservation past amount_captured, whatever
// the caller computed) and creates the pending refund, in one statement.
const insertRefundSQL = `
WITH reserved AS (
    UPDATE charges SET amount_refunding = amount_refunding + $6, updated_at = phasepay_now()
     WHERE tenant_id = $1 AND id = $5
    RETURNING psp_reference, psp
), r AS (
    INSERT INTO refunds (tenant_id, id, idempotency_key, idempotency_key_created_at, charge_id, amount, status)
    SELECT $1, $2, $3, $4, $5, $6, 'pending' FROM reserved
    RETURNING *
)
SELECT r.tenant_id, r.id, r.charge_id, r.amount, r.status, r.psp_reference, r.created_at, r.failure_reason,
       coalesce((SELECT psp_reference FROM reserved), ''), (SELECT psp FROM reserved)
  FROM r`

func insertRefund(ctx context.Context, tx *phases.Tx, key idempotency.ID, id string, c *Charge, amount int64) (*Refund, error) {
	r, err := scanRefund(tx.QueryRow(ctx, insertRefundSQL, key.TenantID, id, key.Key, key.CreatedAt, c.ID, amount))
	if err != nil {
		return nil, fmt.Errorf("insert refund of %s: %w", c.ID, idTaken(err, "refunds_pkey"))
	}
	return r, nil
}

// updateRefundSQL ends a refund and moves its reservation on the charge:
// into amount_refunded on success, away on failure. It fails its statement
// (phasepay_fence, migrations/00013) when the refund was not pending: its
// phase is fenced and commits once, so that would be a second end, which
// must not write a second event (no event without its change). A failed
// statement, not a row count, because the engine pipelines the phase's
// statements and reads no result before the exchange.
const updateRefundSQL = `
WITH r AS (
    UPDATE refunds SET status = $3, psp_reference = $4, failure_reason = $5, updated_at = phasepay_now()
     WHERE tenant_id = $1 AND id = $2 AND status = 'pending'
    RETURNING tenant_id, charge_id, amount
), c AS (
    UPDATE charges c
       SET amount_refunding = c.amount_refunding - r.amount,
           amount_refunded = c.amount_refunded + CASE WHEN $3 = 'succeeded' THEN r.amount ELSE 0 END,
           updated_at = phasepay_now()
      FROM r WHERE c.tenant_id = r.tenant_id AND c.id = r.charge_id
)
SELECT phasepay_fence((SELECT count(*) FROM r), 'end of a refund that is no longer pending')`

func updateRefund(tx *phases.Tx, r *Refund) {
	tx.Queue(updateRefundSQL, r.TenantID, r.ID, string(r.Status), r.PSPReference, r.failureReason)
}

const refundByKeySQL = `SELECT ` + refundColumns + refundFrom + `
 WHERE r.tenant_id = $1 AND r.idempotency_key = $2 AND r.idempotency_key_created_at = $3`

func refundByKey(ctx context.Context, q idempotency.DBTX, key idempotency.ID) (*Refund, error) {
	r, err := scanRefund(q.QueryRow(ctx, refundByKeySQL, key.TenantID, key.Key, key.CreatedAt))
	if err != nil {
		return nil, fmt.Errorf("refund of key %q: %w", key.Key, err)
	}
	return r, nil
}

// refundByIDSQL is tenant-scoped: another tenant's refund is not found.
const refundByIDSQL = `SELECT ` + refundColumns + refundFrom + ` WHERE r.tenant_id = $1 AND r.id = $2`

func refundByID(ctx context.Context, q idempotency.DBTX, tenantID int64, id string) (*Refund, error) {
	r, err := scanRefund(q.QueryRow(ctx, refundByIDSQL, tenantID, id))
	if err != nil {
		return nil, fmt.Errorf("refund %q: %w", id, err)
	}
	return r, nil
}
