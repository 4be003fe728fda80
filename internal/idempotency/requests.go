package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file is the view of keys from outside a request: the tenant's
// (GET /v1/idempotency_keys) and the operator's (`api requests …`), and the
// operator's two levers, RetryNow and TakeForResolution.

// View is a key as a tenant or an operator sees it: where its request
// stands, never its request body or any secret.
type View struct {
	TenantID      int64
	Key           string
	Method, Path  string
	State         RequestState
	Point         RecoveryPoint
	Attempts      int
	NextAttemptAt *time.Time
	// LastError is why the last attempt did not finish, in words a tenant
	// may read; LastErrorDetail its raw cause, for operators only (never
	// shown to a tenant: it may name internal addresses).
	LastError       string
	LastErrorDetail string
	// ResponseStatus is the stored answer's status, once there is one.
	ResponseStatus *int
	ObjectID       string
	CreatedAt      time.Time
	CompletedAt    *time.Time
}

// viewColumns is read by scanView, in this order. The request state is
// computed here, by the database's clock, like every lease decision.
const viewColumns = `tenant_id, key, request_method, request_path,
       ` + requestStateSQL + `,
       recovery_point, attempts, next_attempt_at, coalesce(last_error, ''), coalesce(last_error_detail, ''),
       response_status, coalesce(object_id, ''), created_at, finished_at`

func scanView(row pgx.Row) (View, error) {
	var v View
	err := row.Scan(&v.TenantID, &v.Key, &v.Method, &v.Path, &v.State, &v.Point, &v.Attempts, &v.NextAttemptAt,
		&v.LastError, &v.LastErrorDetail, &v.ResponseStatus, &v.ObjectID, &v.CreatedAt, &v.CompletedAt)
	return v, err
}

// planWithValues sends a list's statement with its values in its text
// (pgx's simple protocol), so that PostgreSQL plans it for them every
// time. phasepay's connections reuse one generic plan per statement
// (dbpool.PlanCacheModeDefault), and a generic plan of the lists below
// can use neither the keyset cursor as an index range ("$3 IS NULL OR …")
// nor the partial index idempotency_keys_unfinished for a state filter
// ("$2 = ” OR …"): it reads every key of every day kept. With 30 days of
// 20,000 keys each, a tenant's second page took 442 ms instead of 2 ms,
// and the operator's list of needs_attention keys 842 ms instead of 20.
// These lists are rare, so planning them each time costs nothing that
// matters.
const planWithValues = pgx.QueryExecModeSimpleProtocol

// viewSQL reads the newest incarnation of one key.
const viewSQL = `SELECT ` + viewColumns + `
  FROM idempotency_keys WHERE tenant_id = $1 AND key = $2
 ORDER BY created_at DESC LIMIT 1`

// GetView returns a key's view, or ErrNotFound.
func GetView(ctx context.Context, q DBTX, tenantID int64, key string) (View, error) {
	v, err := scanView(q.QueryRow(ctx, viewSQL, tenantID, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return View{}, fmt.Errorf("key %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return View{}, fmt.Errorf("key %q: %w", key, err)
	}
	return v, nil
}

// listViewsSQL pages through a tenant's keys, newest first, by keyset:
// ($3, $4) is the (created_at, key) of the last key of the previous page,
// so a page never shifts while new keys are claimed (they sort before it).
// The index idempotency_keys_tenant_created serves the order.
var listViewsSQL = `SELECT ` + viewColumns + `
  FROM idempotency_keys
 WHERE tenant_id = $1 AND ` + requestStateFilterSQL(2) + `
   AND ($3::timestamptz IS NULL OR (created_at, key) < ($3, $4))
 ORDER BY created_at DESC, key DESC
 LIMIT $5`

// ListViews returns up to limit of a tenant's keys in state (any if ""),
// newest first, after the key named startingAfter (none if ""). It returns
// ErrNotFound if startingAfter names no key of the tenant.
func ListViews(ctx context.Context, q DBTX, tenantID int64, state RequestState, startingAfter string, limit int) ([]View, error) {
	var (
		afterAt  *time.Time
		afterKey string
	)
	if startingAfter != "" {
		v, err := GetView(ctx, q, tenantID, startingAfter)
		if err != nil {
			return nil, fmt.Errorf("starting_after: %w", err)
		}
		afterAt, afterKey = &v.CreatedAt, v.Key
	}
	rows, err := q.Query(ctx, listViewsSQL, planWithValues, tenantID, string(state), afterAt, afterKey, limit)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	views, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (View, error) { return scanView(row) })
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return views, nil
}

// Filter selects keys for an operator.
type Filter struct {
	// TenantID, if not zero, restricts the list to one tenant.
	TenantID int64
	// State, if set, restricts it to one request state.
	State RequestState
	// OlderThan, if positive, keeps keys claimed longer ago than this.
	OlderThan time.Duration
	// After, if set, is the last key of the previous page (keyset paging,
	// in List's order).
	After *Cursor
	// Limit bounds the list (default 1000).
	Limit int
}

// operatorListSQL is the operator's list across tenants, oldest first: the
// longest-waiting requests are the most urgent. Each tenant's keys are
// read in that order through idempotency_keys_tenant_created, scanned
// backwards, or idempotency_keys_unfinished for an unfinished state, at
// most $4 per tenant, and the oldest $4 of those kept: an ORDER BY
// created_at across tenants has no index to walk (see browseSQL, its
// newest-first twin) and would sort every key kept. The keyset cursor
// ($5, $6, $7) is the (created_at, tenant_id, key) of the previous page's
// last key; "created_at >= $5" bounds the index scan on its own.
var operatorListSQL = `SELECT ` + viewColumns + `
  FROM (SELECT id AS list_tenant FROM tenants WHERE $1 = 0 OR id = $1) t
 CROSS JOIN LATERAL (
       SELECT * FROM idempotency_keys
        WHERE tenant_id = t.list_tenant AND ` + requestStateFilterSQL(2) + `
          AND created_at <= phasepay_now() - $3 * interval '1 microsecond'
          AND ($5::timestamptz IS NULL OR created_at >= $5)
          AND ($5::timestamptz IS NULL OR (created_at, tenant_id, key) > ($5, $6, $7))
        ORDER BY created_at, key
        LIMIT $4) k
 ORDER BY created_at, tenant_id, key
 LIMIT $4`

// List returns the keys f selects, oldest first, a page of at most
// f.Limit after f.After.
func List(ctx context.Context, q DBTX, f Filter) ([]View, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	var (
		afterAt     *time.Time
		afterTenant int64
		afterKey    string
	)
	if f.After != nil {
		afterAt, afterTenant, afterKey = &f.After.CreatedAt, f.After.TenantID, f.After.Key
	}
	rows, err := q.Query(ctx, operatorListSQL, planWithValues, f.TenantID, string(f.State), f.OlderThan.Microseconds(), f.Limit,
		afterAt, afterTenant, afterKey)
	if err != nil {
		return nil, fmt.Errorf("list requests: %w", err)
	}
	views, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (View, error) { return scanView(row) })
	if err != nil {
		return nil, fmt.Errorf("list requests: %w", err)
	}
	return views, nil
}

// retryNowSQL makes a key's next attempt due now. A needs_attention key
// becomes started again, for one attempt: if that fails too, it is past its
// give-up horizon and returns to needs_attention at once. A held lease is
// left alone (its holder is attempting right now). The timeline gains
// "retried" ($3), naming the operator.
const retryNowSQL = `
UPDATE idempotency_keys
   SET state = 'started', next_attempt_at = phasepay_now(),
       timeline = phasepay_timeline_append(timeline, $3, lock_version)
 WHERE (tenant_id, key, created_at) = (
        SELECT tenant_id, key, created_at FROM idempotency_keys
         WHERE tenant_id = $1 AND key = $2 ORDER BY created_at DESC LIMIT 1)
   AND state IN ('started', 'needs_attention')
RETURNING 1`

// RetryNow makes the next attempt of an unfinished or needs_attention key
// due now (the reaper picks it up at its next pass), recorded in its
// timeline as the operator by's. It returns ErrNotFound for no such key
// and ErrFinished for one that is done.
func (s *Store) RetryNow(ctx context.Context, q DBTX, tenantID int64, key, by string) error {
	return s.dueNow(ctx, q, tenantID, key, s.entries(Entry{Kind: KindRetried, By: RoleOperator, Operator: by}))
}

// DueNow is RetryNow for a report from outside (a PSP's webhook saying
// what became of a call): the key's next attempt is due now, and the
// timeline gets no entry of its own, since the attempt it makes due
// records what it finds.
func (s *Store) DueNow(ctx context.Context, q DBTX, tenantID int64, key string) error {
	return s.dueNow(ctx, q, tenantID, key, nil)
}

func (s *Store) dueNow(ctx context.Context, q DBTX, tenantID int64, key string, entries *string) error {
	var one int
	err := q.QueryRow(ctx, retryNowSQL, tenantID, key, entries).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := GetView(ctx, q, tenantID, key); err != nil {
			return fmt.Errorf("retry %q: %w", key, err)
		}
		return fmt.Errorf("retry %q: %w", key, ErrFinished)
	}
	if err != nil {
		return fmt.Errorf("retry %q: %w", key, err)
	}
	return nil
}

// takeForResolutionSQL hands a needs_attention key to an operator's
// resolution: started again under a fresh lease and a bumped lock_version,
// so that the resolution's writes are fenced like any holder's and nobody
// else (reaper, client retry) can act on the key meanwhile.
const takeForResolutionSQL = `
UPDATE idempotency_keys k
   SET state = 'started', lock_version = k.lock_version + 1,
       locked_until = phasepay_now() + $3 * interval '1 microsecond', next_attempt_at = NULL
  FROM (SELECT tenant_id, key, created_at FROM idempotency_keys
         WHERE tenant_id = $1 AND key = $2 ORDER BY created_at DESC LIMIT 1) newest
 WHERE (k.tenant_id, k.key, k.created_at) = (newest.tenant_id, newest.key, newest.created_at)
   AND k.state = 'needs_attention'
RETURNING false, ` + qualifiedRecordColumns

// TakeForResolution leases a needs_attention key to the operator resolving
// it. It returns ErrNotFound, or ErrNotNeedsAttention for a key in any
// other state. The caller finishes the key (Finish) or gives it back
// (ReturnToAttention).
func (s *Store) TakeForResolution(ctx context.Context, q DBTX, tenantID int64, key string) (*Lease, error) {
	var ignored bool
	rec, err := scanRecord(q.QueryRow(ctx, takeForResolutionSQL, tenantID, key, s.cfg.Lease.Microseconds()), &ignored)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := GetView(ctx, q, tenantID, key); err != nil {
			return nil, fmt.Errorf("resolve %q: %w", key, err)
		}
		return nil, fmt.Errorf("resolve %q: %w", key, ErrNotNeedsAttention)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", key, err)
	}
	return &Lease{store: s, Record: rec}, nil
}

// returnToAttentionSQL gives a key taken for resolution back, unchanged but
// for the bumped lock_version, fenced. The timeline gains the holder's
// notes ($5): the refused resolution, which the bumped lock_version is
// then seen to belong to.
const returnToAttentionSQL = `
UPDATE idempotency_keys
   SET state = 'needs_attention', locked_until = NULL,
       timeline = phasepay_timeline_append(timeline, $5, lock_version)
 WHERE tenant_id = $1 AND key = $2 AND created_at = $3
   AND lock_version = $4
   AND state = 'started'`

// ReturnToAttention gives a key the operator could not resolve back to
// needs_attention, writing the holder's notes (Note: why it was refused)
// in its timeline.
func (l *Lease) ReturnToAttention(ctx context.Context, q DBTX) error {
	r := l.Record
	tag, err := q.Exec(ctx, returnToAttentionSQL, r.TenantID, r.Key, r.CreatedAt, r.LockVersion, l.take())
	if err != nil {
		return fmt.Errorf("return %q to needs_attention: %w", r.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("return %q to needs_attention: %w", r.Key, ErrLeaseLost)
	}
	return nil
}

// setObjectSQL records what the request created, fenced (see fenced).
var setObjectSQL = fenced(`
UPDATE idempotency_keys SET object_id = nullif($5, '')
 WHERE tenant_id = $1 AND key = $2 AND created_at = $3 AND lock_version = $4 AND state = 'started'`, "set object")

// SetObject records, inside the transaction that creates it, the id of the
// object the request created (shown in the tenant's view of the key); ""
// records none, for a request refused before its object was made. It
// returns ErrLeaseLost if the lease was lost.
func (l *Lease) SetObject(ctx context.Context, tx Execer, id string) error {
	r := l.Record
	if err := write(ctx, tx, setObjectSQL, r.TenantID, r.Key, r.CreatedAt, r.LockVersion, id); err != nil {
		return fenceError(err, "set object of %q", r.Key)
	}
	l.Record.ObjectID = id
	return nil
}
