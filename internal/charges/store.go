package charges

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
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

// insertChargeSQL creates the charge of a key, and its first attempt
// ($11 its PSP key), in one statement. The UNIQUE (tenant_id,
// idempotency_key, idempotency_key_created_at) constraint backs the fencing:
// even a bug that let two holders run this phase could not make two charges.
//
// One statement rather than two: every statement costs the server a
// round of its own (bind, a snapshot, executor start and end) whatever it
// writes, which make bench showed to be a large part of a new charge's
// database time; the rows written are the same.
//
// A NULL key creation time ($4) names the key claimed in this very
// transaction, whose created_at is this transaction's phasepay_now(): the
// claim and this insert travel in one exchange (phases, pipeline.go), so
// the key's row has not been read back yet when this is queued.
const insertChargeSQL = `
WITH charge AS (
    INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at,
                         amount, currency, payment_method, description, metadata, status, psp)
    VALUES ($1, $2, $3, coalesce($4::timestamptz, phasepay_now()), $5, $6, $7, $8, $9, 'pending', $10)
    RETURNING ` + chargeColumns + `
), first_attempt AS (
    INSERT INTO charge_attempts (tenant_id, charge_id, n, psp, psp_key)
    SELECT tenant_id, id, 1, psp, $11 FROM charge
)
SELECT ` + chargeColumns + ` FROM charge`

// insertChargeAloneSQL is insertChargeSQL without the attempt's row.
const insertChargeAloneSQL = `
INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at,
                     amount, currency, payment_method, description, metadata, status, psp)
VALUES ($1, $2, $3, coalesce($4::timestamptz, phasepay_now()), $5, $6, $7, $8, $9, 'pending', $10)
RETURNING ` + chargeColumns

// chargeIDConstraints are where a derived charge id held by an earlier
// incarnation of the key meets its charge (ids.go).
var chargeIDConstraints = []string{"charges_pkey", "charge_attempts_pkey"}

// insertCharge queues the insert of the charge and its first attempt
// (attemptKey). The charge returned holds its ids and first attempt at
// once; the rest of its row is filled in when the exchange is read, at the
// latest by the commit: nothing must read it before.
//
// A first attempt under the charge's own PSP key (single-PSP mode) gets
// no row: a charge without attempts reads as exactly that attempt
// (loadAttempts), so the row would say nothing the charge does not, and
// its insert and the update of its outcome cost a new charge 7% of its
// database instructions. It is recorded when anything else is: a renewed
// key (renewKey) or a PSP's hint (hintSQL). With several PSPs every
// attempt has its row, which failover reads.
func insertCharge(tx *phases.Tx, key idempotency.ID, id, pspName, attemptKey string, p CreateParams) *Charge {
	md := p.Metadata
	if md == nil {
		md = map[string]string{}
	}
	var keyCreatedAt *time.Time
	if !key.CreatedAt.IsZero() {
		keyCreatedAt = &key.CreatedAt
	}
	first := []attempt{{N: 1, PSP: pspName, Key: attemptKey, Unrecorded: attemptKey == PSPKey(id)}}
	sql, args := insertChargeSQL, []any{key.TenantID, id, key.Key, keyCreatedAt, p.Amount, p.Currency, p.PaymentMethod, p.Description, md, pspName, attemptKey}
	if first[0].Unrecorded {
		sql, args = insertChargeAloneSQL, args[:10]
	}
	c := &Charge{TenantID: key.TenantID, ID: id, PSP: pspName, attempts: first}
	tx.QueueRow(sql, args, func(row pgx.Row) error {
		got, err := scanCharge(row)
		if err != nil {
			return fmt.Errorf("insert charge: %w", idTaken(err, chargeIDConstraints...))
		}
		got.attempts = first
		*c = *got
		return nil
	})
	return c
}

// chargeOfKey reads the charge a capture's or void's key acts on: the one
// in its path.
func chargeOfKey(ctx context.Context, q idempotency.DBTX, rec idempotency.Record) (*Charge, error) {
	return chargeByID(ctx, q, rec.TenantID, chargeOfPath(rec.Request.Path))
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

// recordAuthorizationSQL writes the PSP's final answer on the charge and,
// in the same statement (see insertChargeSQL for why one), on the attempt
// it answered: attempt $8 gets outcome $9.
const recordAuthorizationSQL = `
WITH ended AS (
    UPDATE charge_attempts SET outcome = $9, ended_at = phasepay_now()
     WHERE tenant_id = $1 AND charge_id = $2 AND n = $8
)
UPDATE charges
   SET status = $3, psp_reference = $4, decline_code = $5, failure_reason = $6, psp = $7, updated_at = phasepay_now()
 WHERE tenant_id = $1 AND id = $2`

// recordChargeAuthorizationSQL is recordAuthorizationSQL without an
// attempt: one that has no row, or none that answered.
const recordChargeAuthorizationSQL = `
UPDATE charges
   SET status = $3, psp_reference = $4, decline_code = $5, failure_reason = $6, psp = $7, updated_at = phasepay_now()
 WHERE tenant_id = $1 AND id = $2`

// updateAuthorization queues c's answer, and the end of attempt a with
// outcome unless a is nil (an authorization found at an earlier PSP by a
// lookup leaves the current attempt as it is). An unrecorded attempt's
// outcome is the charge's status.
func updateAuthorization(tx *phases.Tx, c *Charge, a *attempt, outcome string) {
	if a == nil || a.Unrecorded {
		tx.Queue(recordChargeAuthorizationSQL, c.TenantID, c.ID, c.Status, c.PSPReference, c.DeclineCode, c.FailureReason, c.PSP)
	} else {
		tx.Queue(recordAuthorizationSQL, c.TenantID, c.ID, c.Status, c.PSPReference, c.DeclineCode, c.FailureReason, c.PSP, a.N, outcome)
	}
	if a != nil {
		a.Outcome = &outcome
	}
}

// updateChargePSPSQL moves a pending charge to the PSP of its next attempt
// (a failover), with that attempt's record.
const updateChargePSPSQL = `UPDATE charges SET psp = $3, updated_at = phasepay_now() WHERE tenant_id = $1 AND id = $2`

func updateChargePSP(tx *phases.Tx, c *Charge) {
	tx.Queue(updateChargePSPSQL, c.TenantID, c.ID, c.PSP)
}
