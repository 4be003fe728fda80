package charges

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Lists of charges and refunds: newest first, by keyset on (created_at, id).
//
// Why this order is stable while charges are being created. A page ends at
// an object, and the next page asks for the objects strictly below it in a
// total order on values that never change once a row is inserted: id
// breaks created_at's ties (a test clock, or many rows in one transaction,
// gives them all one created_at). So no object can be shown twice, and any
// object committed before the first page was read is on exactly one page:
// each page's query sees it (READ COMMITTED: each statement sees every
// commit before it), and the keys of the pages cover the whole order
// without overlapping. An OFFSET would shift under every insert above it.
//
// What it does not promise: created_at is the inserting transaction's
// start (phasepay_now), not its commit, so a charge committed while a
// client pages may carry a time older than the page it is on. It then
// shows up on a later page, or not at all if the client is already past
// it; a client that must see every charge, late commits included, follows
// the events instead. A sequence number would not change this: it too is
// taken before the commit, and rows commit out of order.
// TestChargeListHasNoGapsOrDuplicatesUnderConcurrentInserts holds the
// promise.

// listChargesSQL pages through a tenant's charges below the cursor ($2,
// $3): a row comparison, which the index charges_tenant_created
// (tenant_id, created_at DESC, id DESC) serves as a range, so that a page
// deep in the list costs what the first one does. The first page's cursor
// is 'infinity' with an empty id, above every row: an "$2 IS NULL OR …" instead would
// make PostgreSQL read and discard every row above the cursor.
const listChargesSQL = `SELECT ` + chargeColumns + ` FROM charges
 WHERE tenant_id = $1 AND (created_at, id) < ($2, $3)
 ORDER BY created_at DESC, id DESC LIMIT $4`

// top is the cursor of a first page: timestamptz 'infinity' sorts after
// every time a row holds.
var top = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}

// List returns up to limit of the tenant's charges, newest first, after the
// charge startingAfter (from the first if ""). It returns ErrNotFound if
// startingAfter names no charge of the tenant.
func (s *Service) List(ctx context.Context, tenantID int64, startingAfter string, limit int) ([]*Charge, error) {
	return listCharges(ctx, s.pool, tenantID, startingAfter, limit)
}

func listCharges(ctx context.Context, q idempotency.DBTX, tenantID int64, startingAfter string, limit int) ([]*Charge, error) {
	afterAt, afterID := top, ""
	if startingAfter != "" {
		after, err := chargeByID(ctx, q, tenantID, startingAfter)
		if err != nil {
			return nil, fmt.Errorf("list charges: starting_after: %w", err)
		}
		afterAt, afterID = pgtype.Timestamptz{Time: after.CreatedAt, Valid: true}, after.ID
	}
	rows, err := q.Query(ctx, listChargesSQL, tenantID, afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list charges: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Charge, error) { return scanCharge(row) })
	if err != nil {
		return nil, fmt.Errorf("list charges: %w", err)
	}
	return cs, nil
}

// listRefundsSQL pages through the refunds of one charge ($2) below the
// cursor ($3, $4), as listChargesSQL does, on the index
// refunds_charge_created; listAllRefundsSQL through all of the tenant's,
// on refunds_tenant_created. Two statements rather than one with an OR on
// an empty $2: a generic plan for that could use neither index as a range.
const (
	listRefundsSQL = `SELECT ` + refundColumns + refundFrom + `
 WHERE r.tenant_id = $1 AND r.charge_id = $2 AND (r.created_at, r.id) < ($3, $4)
 ORDER BY r.created_at DESC, r.id DESC LIMIT $5`
	listAllRefundsSQL = `SELECT ` + refundColumns + refundFrom + `
 WHERE r.tenant_id = $1 AND (r.created_at, r.id) < ($2, $3)
 ORDER BY r.created_at DESC, r.id DESC LIMIT $4`
)

// ListRefunds returns up to limit of the tenant's refunds, of the charge
// chargeID (all if ""), newest first, after the refund startingAfter (from
// the first if ""). It returns ErrNotFound if chargeID names no charge of
// the tenant, ErrRefundNotFound if startingAfter names no refund of it.
func (s *Service) ListRefunds(ctx context.Context, tenantID int64, chargeID, startingAfter string, limit int) ([]*Refund, error) {
	return listRefunds(ctx, s.pool, tenantID, chargeID, startingAfter, limit)
}

func listRefunds(ctx context.Context, q idempotency.DBTX, tenantID int64, chargeID, startingAfter string, limit int) ([]*Refund, error) {
	if chargeID != "" {
		// Another tenant's charge is not found, exactly as in GET
		// /v1/charges/{id}, rather than an empty list.
		if _, err := chargeByID(ctx, q, tenantID, chargeID); err != nil {
			return nil, fmt.Errorf("list refunds: %w", err)
		}
	}
	afterAt, afterID := top, ""
	if startingAfter != "" {
		after, err := refundByID(ctx, q, tenantID, startingAfter)
		if err != nil {
			return nil, fmt.Errorf("list refunds: starting_after: %w", err)
		}
		afterAt, afterID = pgtype.Timestamptz{Time: after.CreatedAt, Valid: true}, after.ID
	}
	var (
		rows pgx.Rows
		err  error
	)
	if chargeID == "" {
		rows, err = q.Query(ctx, listAllRefundsSQL, tenantID, afterAt, afterID, limit)
	} else {
		rows, err = q.Query(ctx, listRefundsSQL, tenantID, chargeID, afterAt, afterID, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("list refunds: %w", err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Refund, error) { return scanRefund(row) })
	if err != nil {
		return nil, fmt.Errorf("list refunds: %w", err)
	}
	return rs, nil
}
