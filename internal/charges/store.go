package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
)

const chargeColumns = `tenant_id, id, amount, currency, payment_method, status, psp_reference, decline_code,
       description, metadata, created_at, failure_reason, amount_captured, amount_refunded, psp, settlement,
       amount_refunding`

func scanCharge(row pgx.Row) (*Charge, error) {
	var c Charge
	err := row.Scan(&c.TenantID, &c.ID, &c.Amount, &c.Currency, &c.PaymentMethod, &c.Status, &c.PSPReference,
		&c.DeclineCode, &c.Description, &c.Metadata, &c.CreatedAt, &c.FailureReason, &c.AmountCaptured, &c.AmountRefunded,
		&c.PSP, &c.settlement, &c.amountRefunding)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// insertChargeSQL creates the charge of a key. The UNIQUE (tenant_id,
// idempotency_key, idempotency_key_created_at) constraint backs the fencing:
// even a bug that let two holders run this phase could not make two charges.
//
// A NULL key creation time ($4) names the key claimed in this very
// transaction, whose created_at is this transaction's phasepay_now(): the
// claim and this insert travel in one exchange (phases, pipeline.go), so
// the key's row has not been read back yet when this is queued.
const insertChargeSQL = `
INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at,
                     amount, currency, payment_method, description, metadata, status, psp)
VALUES ($1, $2, $3, coalesce($4::timestamptz, phasepay_now()), $5, $6, $7, $8, $9, 'pending', $10)
RETURNING ` + chargeColumns

// insertCharge inserts the charge. In a pipelined transaction (an
// idempotency.Queuer) the insert is queued and the charge returned is
// filled in when the exchange is read, at the latest by the commit:
// nothing must read it before.
func insertCharge(ctx context.Context, tx pgx.Tx, key idempotency.ID, id, pspName string, p CreateParams) (*Charge, error) {
	md := p.Metadata
	if md == nil {
		md = map[string]string{}
	}
	var keyCreatedAt *time.Time
	if !key.CreatedAt.IsZero() {
		keyCreatedAt = &key.CreatedAt
	}
	args := []any{key.TenantID, id, key.Key, keyCreatedAt, p.Amount, p.Currency, p.PaymentMethod, p.Description, md, pspName}
	if q, ok := tx.(idempotency.Queuer); ok {
		// What the caller may use before the exchange is read: the ids.
		// The row's columns arrive later; what the caller added meanwhile
		// (the first attempt) is kept.
		c := &Charge{TenantID: key.TenantID, ID: id, PSP: pspName}
		q.QueueRow(insertChargeSQL, args, func(row pgx.Row) error {
			got, err := scanCharge(row)
			if err != nil {
				return fmt.Errorf("insert charge: %w", err)
			}
			got.attempts = c.attempts
			*c = *got
			return nil
		})
		return c, nil
	}
	c, err := scanCharge(tx.QueryRow(ctx, insertChargeSQL, args...))
	if err != nil {
		return nil, fmt.Errorf("insert charge: %w", err)
	}
	return c, nil
}

const chargeByKeySQL = `SELECT ` + chargeColumns + ` FROM charges
 WHERE tenant_id = $1 AND idempotency_key = $2 AND idempotency_key_created_at = $3`

func chargeByKey(ctx context.Context, q idempotency.DBTX, key idempotency.ID) (*Charge, error) {
	c, err := scanCharge(q.QueryRow(ctx, chargeByKeySQL, key.TenantID, key.Key, key.CreatedAt))
	if err != nil {
		return nil, fmt.Errorf("charge of key %q: %w", key.Key, err)
	}
	return c, nil
}

// chargeByIDSQL is tenant-scoped: another tenant's charge is not found.
const chargeByIDSQL = `SELECT ` + chargeColumns + ` FROM charges WHERE tenant_id = $1 AND id = $2`

func chargeByID(ctx context.Context, q idempotency.DBTX, tenantID int64, id string) (*Charge, error) {
	c, err := scanCharge(q.QueryRow(ctx, chargeByIDSQL, tenantID, id))
	if err != nil {
		return nil, fmt.Errorf("charge %q: %w", id, err)
	}
	return c, nil
}

const recordAuthorizationSQL = `
UPDATE charges
   SET status = $3, psp_reference = $4, decline_code = $5, failure_reason = $6, psp = $7, updated_at = phasepay_now()
 WHERE tenant_id = $1 AND id = $2`

func updateAuthorization(ctx context.Context, tx pgx.Tx, c *Charge) error {
	if _, err := tx.Exec(ctx, recordAuthorizationSQL, c.TenantID, c.ID, c.Status, c.PSPReference, c.DeclineCode, c.FailureReason, c.PSP); err != nil {
		return fmt.Errorf("record authorization of %s: %w", c.ID, err)
	}
	return nil
}

// updateChargePSPSQL moves a pending charge to the PSP of its next attempt
// (a failover), with that attempt's record.
const updateChargePSPSQL = `UPDATE charges SET psp = $3, updated_at = phasepay_now() WHERE tenant_id = $1 AND id = $2`

func updateChargePSP(ctx context.Context, tx pgx.Tx, c *Charge) error {
	if _, err := tx.Exec(ctx, updateChargePSPSQL, c.TenantID, c.ID, c.PSP); err != nil {
		return fmt.Errorf("move %s to %s: %w", c.ID, c.PSP, err)
	}
	return nil
}
