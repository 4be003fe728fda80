// Package events records what happened to a tenant's objects as events, in
// the transaction of the change itself (a transactional outbox): there is
// never a status change without its event, nor an event without its change.
// Write also queues one delivery per webhook endpoint subscribed at that
// moment; internal/webhooks sends them.
//
// This package knows the events tables and nothing of charges: an
// operation passes the type and its object's JSON.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the functions run statements on: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx. Write must be given the transaction of the change
// the event records.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Type names what happened.
type Type string

// The event types of the contract: one per change of an object's status.
const (
	ChargeAuthorized       Type = "charge.authorized"
	ChargeDeclined         Type = "charge.declined"
	ChargeFailed           Type = "charge.failed"
	ChargeCaptured         Type = "charge.captured"
	ChargeVoided           Type = "charge.voided"
	RefundSucceeded        Type = "refund.succeeded"
	RefundFailed           Type = "refund.failed"
	RequestNeedsAttention  Type = "request.needs_attention"
	typeWildcard                = "*"
	maxObjectBytes              = 1 << 20
	notifyChannel               = "phasepay_webhooks"
	eventIDPrefix               = "evt_"
	eventIDTimeHexDigits        = 14
	eventIDRandomHexDigits      = 16
)

// Types lists every event type, in the contract's order.
var Types = []Type{ChargeAuthorized, ChargeDeclined, ChargeFailed, ChargeCaptured, ChargeVoided,
	RefundSucceeded, RefundFailed, RequestNeedsAttention}

// ParseType accepts a known event type; wildcard also accepts "*".
func ParseType(s string, wildcard bool) (Type, error) {
	if wildcard && s == typeWildcard {
		return typeWildcard, nil
	}
	for _, t := range Types {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("%q is not an event type", s)
}

// Sentinel errors.
var (
	// ErrNotFound: no such event for this tenant.
	ErrNotFound = errors.New("event not found")
)

// Event is a stored event. Body is its JSON exactly as every delivery
// sends it and GET /v1/events/{id} answers it.
type Event struct {
	TenantID  int64
	ID        string
	Type      Type
	CreatedAt time.Time
	Body      []byte
}

// writeSQL records the event and fans it out, in one statement (one round
// trip in the phase's transaction):
//
//   - created_at is the database's clock (phasepay_now(), the transaction's
//     start), like every other time phasepay stores; the id carries it to
//     the microsecond, so a lookup by id names its partition;
//   - the body is assembled here, once, from the object's JSON ($3) as the
//     operation rendered it; it is never re-rendered;
//   - one delivery per endpoint of the tenant subscribed to the type and
//     not deleted, as this statement's snapshot sees them: the snapshot is
//     taken after lockEndpointsSQL was granted (see Write), which closes
//     the race with a DELETE of the endpoint;
//   - pg_notify wakes the deliverers when (and only if) the transaction
//     commits.
const writeSQL = `
WITH e AS (
    SELECT phasepay_now() AS at,
           'evt_' || lpad(to_hex((extract(epoch FROM phasepay_now()) * 1000000)::bigint), 14, '0')
                  || left(replace(gen_random_uuid()::text, '-', ''), 16) AS id
), ins AS (
    INSERT INTO events (tenant_id, id, type, created_at, body)
    SELECT $1, e.id, $2, e.at,
           convert_to(format('{"id":%s,"object":"event","type":%s,"created_at":%s,"data":{"object":%s}}',
                             to_json(e.id), to_json($2::text),
                             to_json(to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')), $3::text), 'UTF8')
      FROM e
    RETURNING id, created_at, body
), subscribed AS (
    SELECT id FROM webhook_endpoints
     WHERE tenant_id = $1 AND deleted_at IS NULL AND (events @> ARRAY[$2::text] OR events @> ARRAY['*'])
), queued AS (
    INSERT INTO webhook_deliveries (tenant_id, event_id, event_created_at, endpoint_id, next_attempt_at)
    SELECT $1, ins.id, ins.created_at, subscribed.id, ins.created_at FROM ins, subscribed
    RETURNING 1
)
SELECT ins.id, ins.created_at, ins.body,
       (SELECT count(*) FROM queued) > 0 AND pg_notify('` + notifyChannel + `', '') IS NOT NULL
  FROM ins`

// lockEndpointsSQL is taken, shared, by every event transaction of the
// tenant until it ends, and exclusively by a DELETE of one of its webhook
// endpoints (webhooks.Delete), in advisory namespace 0x70700013. A DELETE
// thus waits for the event transactions in flight (their events were
// written before it answered, and may be delivered), and an event
// statement that starts after the DELETE committed sees the endpoint
// deleted. Shared advisory locks live in the lock table only: unlike
// FOR SHARE on the endpoint rows, concurrent events of one tenant write
// nothing to those rows and make no MultiXacts.
const lockEndpointsSQL = `SELECT pg_advisory_xact_lock_shared(1886388243, hashtext($1::bigint::text))::text`

// LockEndpointsExclusiveSQL is the exclusive side of lockEndpointsSQL,
// for webhooks.Delete.
// (A hash collision of two tenants only makes one's DELETE wait for the
// other's event transactions, which are short.)
const LockEndpointsExclusiveSQL = `SELECT pg_advisory_xact_lock(1886388243, hashtext($1::bigint::text))::text`

// batcher pipelines statements: a pgx.Tx, a pool or a connection.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Write records an event of type typ about object (the object's JSON as
// the API shows it) inside tx, the transaction of the change it records,
// and queues its webhook deliveries. The caller commits, in a READ
// COMMITTED transaction (phasepay's), so that writeSQL's snapshot is
// taken after lockEndpointsSQL is granted. The two statements are
// pipelined: one round trip.
func Write(ctx context.Context, tx DBTX, tenantID int64, typ Type, object []byte) (Event, error) {
	if !json.Valid(object) || len(object) > maxObjectBytes || len(object) == 0 || object[0] != '{' {
		return Event{}, fmt.Errorf("write %s event: the object must be a JSON object of at most %d bytes", typ, maxObjectBytes)
	}
	ev := Event{TenantID: tenantID, Type: typ}
	var (
		notified bool
		ignored  string
	)
	scan := func(row pgx.Row) error { return row.Scan(&ev.ID, &ev.CreatedAt, &ev.Body, &notified) }
	if b, ok := tx.(batcher); ok {
		batch := &pgx.Batch{}
		batch.Queue(lockEndpointsSQL, tenantID)
		batch.Queue(writeSQL, tenantID, string(typ), string(object))
		results := b.SendBatch(ctx, batch)
		err := results.QueryRow().Scan(&ignored)
		if err == nil {
			err = scan(results.QueryRow())
		}
		if cerr := results.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return Event{}, fmt.Errorf("write %s event: %w", typ, err)
		}
		return ev, nil
	}
	if err := tx.QueryRow(ctx, lockEndpointsSQL, tenantID).Scan(&ignored); err != nil {
		return Event{}, fmt.Errorf("write %s event: %w", typ, err)
	}
	if err := scan(tx.QueryRow(ctx, writeSQL, tenantID, string(typ), string(object))); err != nil {
		return Event{}, fmt.Errorf("write %s event: %w", typ, err)
	}
	return ev, nil
}

// queuer is a transaction that holds statements back until its next
// exchange with the database and hands each one's row to a callback then:
// the phase engine's pipelined transaction (idempotency.Queuer).
type queuer interface {
	QueueRow(sql string, args []any, scan func(pgx.Row) error)
}

// Record is Write for a caller that does not need the stored event back.
// In a transaction that holds statements back (the phase engine's, see
// idempotency.Queuer) the event costs no exchange of its own: both of
// Write's statements are queued, in Write's order (the lock's statement
// first, so that writeSQL's snapshot is taken after the lock is granted),
// and their errors abort the transaction at its next exchange or commit.
// In any other transaction it is Write.
func Record(ctx context.Context, tx DBTX, tenantID int64, typ Type, object []byte) error {
	q, ok := tx.(queuer)
	if !ok {
		_, err := Write(ctx, tx, tenantID, typ, object)
		return err
	}
	if !json.Valid(object) || len(object) > maxObjectBytes || len(object) == 0 || object[0] != '{' {
		return fmt.Errorf("write %s event: the object must be a JSON object of at most %d bytes", typ, maxObjectBytes)
	}
	q.QueueRow(lockEndpointsSQL, []any{tenantID}, func(row pgx.Row) error {
		var ignored string
		if err := row.Scan(&ignored); err != nil {
			return fmt.Errorf("write %s event: %w", typ, err)
		}
		return nil
	})
	q.QueueRow(writeSQL, []any{tenantID, string(typ), string(object)}, func(row pgx.Row) error {
		var ev Event
		var notified bool
		if err := row.Scan(&ev.ID, &ev.CreatedAt, &ev.Body, &notified); err != nil {
			return fmt.Errorf("write %s event: %w", typ, err)
		}
		return nil
	})
	return nil
}

// NotifyChannel is the LISTEN channel Write notifies on commit when it
// queued a delivery.
const NotifyChannel = notifyChannel

// CreatedAtOfID returns the creation time an event id carries, or false if
// id is not an event id.
func CreatedAtOfID(id string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(id, eventIDPrefix)
	if !ok || len(rest) != eventIDTimeHexDigits+eventIDRandomHexDigits {
		return time.Time{}, false
	}
	for _, c := range rest {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return time.Time{}, false
		}
	}
	us, err := strconv.ParseInt(rest[:eventIDTimeHexDigits], 16, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMicro(us).UTC(), true
}

// getSQL reads one event; created_at ($3, from the id) confines it to one
// partition.
const getSQL = `SELECT tenant_id, id, type, created_at, body FROM events WHERE tenant_id = $1 AND id = $2 AND created_at = $3`

// Get returns one of the tenant's events, or ErrNotFound.
func Get(ctx context.Context, q DBTX, tenantID int64, id string) (Event, error) {
	at, ok := CreatedAtOfID(id)
	if !ok {
		return Event{}, fmt.Errorf("event %q: %w", id, ErrNotFound)
	}
	ev, err := scanEvent(q.QueryRow(ctx, getSQL, tenantID, id, at))
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, fmt.Errorf("event %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Event{}, fmt.Errorf("event %q: %w", id, err)
	}
	return ev, nil
}

func scanEvent(row pgx.Row) (Event, error) {
	var ev Event
	err := row.Scan(&ev.TenantID, &ev.ID, &ev.Type, &ev.CreatedAt, &ev.Body)
	return ev, err
}

// listSQL pages through a tenant's events, newest first, by keyset on
// (created_at, id) after the event ($3, $4) of the previous page; $2 filters
// on the type (” for any). The indexes events_tenant_created and
// events_tenant_type_created serve both orders.
const listSQL = `SELECT tenant_id, id, type, created_at, body
  FROM events
 WHERE tenant_id = $1 AND ($2 = '' OR type = $2)
   AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
 ORDER BY created_at DESC, id DESC
 LIMIT $5`

// List returns up to limit of the tenant's events of type typ (any if ""),
// newest first, after the event startingAfter (none if ""). It returns
// ErrNotFound if startingAfter names no event of the tenant.
func List(ctx context.Context, q DBTX, tenantID int64, typ Type, startingAfter string, limit int) ([]Event, error) {
	var (
		afterAt *time.Time
		afterID string
	)
	if startingAfter != "" {
		ev, err := Get(ctx, q, tenantID, startingAfter)
		if err != nil {
			return nil, err
		}
		afterAt, afterID = &ev.CreatedAt, ev.ID
	}
	// Sent with its values in its text (pgx's simple protocol), so that it
	// is planned for them: phasepay's connections otherwise reuse one
	// generic plan per statement (dbpool.PlanCacheModeDefault), and a
	// generic plan of the optional filters above can use neither the
	// cursor as an index range nor events_tenant_type_created for a type:
	// with 63,000 events, a page past the first took 31 ms instead of 1,
	// and a rare type 436 ms instead of 0.3.
	rows, err := q.Query(ctx, listSQL, pgx.QueryExecModeSimpleProtocol, tenantID, string(typ), afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return evs, nil
}
