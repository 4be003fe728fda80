package webhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/events"
)

// Redelivery: a new attempt, due now, of deliveries already owed, asked
// for by a tenant (POST /v1/events/{id}/redeliver) or an operator (`bin/api
// webhooks redeliver`, the console), for one event or for one endpoint's
// events of a time window. It is the lever for a receiver that was down
// past the retries (3 days) or lost what it was sent: the delivery becomes
// pending again with its next attempt due now, also after it succeeded or
// was given up, and the deliverers are woken as by a new event.
//
// Only deliveries already owed are made due: an endpoint receives only
// events written after it was created, redelivered or not, and a deleted
// endpoint receives nothing more (its deliveries are left as they are).
// The attempt numbers go on from the delivery's last, and so does its
// give-up horizon: one attempt of an event older than 3 days that fails is
// given up again at once. Every redelivery writes its row in
// webhook_redeliveries (who, when, through what, what, how many) in the
// transaction that makes the deliveries due.

// Who asked for a redelivery, through what (webhook_redeliveries.via).
const (
	ViaAPI     = "api"
	ViaCLI     = "cli"
	ViaConsole = "console"
	// ByTenant is requested_by of a tenant's redelivery (the API).
	ByTenant = "tenant"
)

// ErrNotOwed: the named endpoint is the tenant's, but the event was never
// owed to it (the endpoint was created after the event, or is not
// subscribed to its type).
var ErrNotOwed = errors.New("the event was not delivered to this webhook endpoint")

// ErrWindow: a redelivery's window is empty or inverted.
var ErrWindow = errors.New("the window must end after it starts")

// Redelivery names what to make due now.
type Redelivery struct {
	TenantID int64
	// EventID names one event: its delivery to every live endpoint it was
	// owed to, or only to EndpointID when that is set.
	EventID string
	// EndpointID alone (no EventID) names one endpoint, and From and Until
	// the window of the events whose deliveries there are made due: those
	// written at or after From and before Until.
	EndpointID  string
	From, Until time.Time
	// By is who asked: ByTenant, or the operator's name. Via is ViaAPI,
	// ViaCLI or ViaConsole.
	By, Via string
	// Batch is how many events a window's transaction reads. Default
	// RedeliverBatchSize.
	Batch int
}

// Redelivered is what a redelivery made due.
type Redelivered struct {
	// Deliveries counts the deliveries made due now.
	Deliveries int
	// Endpoints are, for one event, the endpoints it is due at now.
	Endpoints []string
}

// redeliverSet is what a redelivery does to each delivery it makes due:
// pending again, due now, not finished. A lease held right now (an attempt
// under way, begun before the redelivery was asked for) is ended and its
// fencing token bumped: that attempt records nothing when it ends (as for
// a lease lost, the deliverer logs it), and the new attempt is due at once
// rather than after the old one's lease.
const redeliverSet = `
   SET state = 'pending', next_attempt_at = phasepay_now(), finished_at = NULL,
       locked_until = NULL, lock_version = d.lock_version + 1`

// redeliverEventSQL makes one event's deliveries due ($4: at one endpoint,
// or ” for every one), to live endpoints only, and writes the audit row,
// in one statement; deliverers are woken when it commits (pg_notify, as
// events.Write does). It returns the endpoints made due.
const redeliverEventSQL = `
WITH due AS (
    UPDATE webhook_deliveries d` + redeliverSet + `
      FROM webhook_endpoints w
     WHERE d.tenant_id = $1 AND d.event_id = $2 AND d.event_created_at = $3
       AND ($4 = '' OR d.endpoint_id = $4)
       AND w.tenant_id = d.tenant_id AND w.id = d.endpoint_id AND w.deleted_at IS NULL
    RETURNING d.endpoint_id
), audit AS (
    INSERT INTO webhook_redeliveries (tenant_id, requested_at, requested_by, via, event_id, endpoint_id, deliveries)
    SELECT $1, phasepay_now(), $5, $6, $2, nullif($4, ''), count(*) FROM due
)
SELECT endpoint_id FROM due
 WHERE pg_notify('` + events.NotifyChannel + `', '') IS NOT NULL
 ORDER BY endpoint_id`

// owedSQL says whether an event was owed to an endpoint at all.
const owedSQL = `
SELECT EXISTS (SELECT FROM webhook_deliveries
                WHERE tenant_id = $1 AND event_id = $2 AND endpoint_id = $3 AND event_created_at = $4)`

// Redeliver makes the deliveries r names due now and records who asked.
// Errors: events.ErrNotFound (no such event of the tenant's), ErrNotFound
// (no such live endpoint of the tenant's), ErrNotOwed (the event was never
// owed to the endpoint named), ErrWindow.
func Redeliver(ctx context.Context, pool events.DBTX, r Redelivery) (Redelivered, error) {
	if r.By == "" || (r.Via != ViaAPI && r.Via != ViaCLI && r.Via != ViaConsole) {
		return Redelivered{}, fmt.Errorf("redeliver: who asked (%q) and through what (%q) are required", r.By, r.Via)
	}
	if r.EndpointID != "" {
		if _, err := Get(ctx, pool, r.TenantID, r.EndpointID); err != nil {
			return Redelivered{}, fmt.Errorf("redeliver: %w", err)
		}
	}
	if r.EventID == "" {
		return redeliverWindow(ctx, pool, r)
	}
	ev, err := events.Get(ctx, pool, r.TenantID, r.EventID)
	if err != nil {
		return Redelivered{}, fmt.Errorf("redeliver: %w", err)
	}
	if r.EndpointID != "" {
		var owed bool
		if err := pool.QueryRow(ctx, owedSQL, r.TenantID, ev.ID, r.EndpointID, ev.CreatedAt).Scan(&owed); err != nil {
			return Redelivered{}, fmt.Errorf("redeliver %s: %w", ev.ID, err)
		}
		if !owed {
			return Redelivered{}, fmt.Errorf("redeliver %s to %s: %w", ev.ID, r.EndpointID, ErrNotOwed)
		}
	}
	rows, err := pool.Query(ctx, redeliverEventSQL, r.TenantID, ev.ID, ev.CreatedAt, r.EndpointID, r.By, r.Via)
	if err != nil {
		return Redelivered{}, fmt.Errorf("redeliver %s: %w", ev.ID, err)
	}
	eps, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return Redelivered{}, fmt.Errorf("redeliver %s: %w", ev.ID, err)
	}
	return Redelivered{Deliveries: len(eps), Endpoints: append(make([]string, 0, len(eps)), eps...)}, nil
}

// RedeliverBatchSize is how many events one statement of a window's
// redelivery reads: each batch is a short transaction of its own.
const RedeliverBatchSize = 500

// redeliverWindowSQL makes due, for one endpoint ($2), the deliveries of
// the next batch of the tenant's events written in [$3, $4), newest first,
// below the keyset cursor ($5, $6). It walks events_tenant_created (one
// range scan, a batch at a time, however many events the window holds) and
// probes each delivery by its primary key, rather than scanning the
// tenant's deliveries, which have no index by endpoint. It returns how
// many events the batch read, how many deliveries it made due, and the
// batch's last event (the next cursor).
const redeliverWindowSQL = `
WITH picked AS (
    SELECT id, created_at FROM events
     WHERE tenant_id = $1 AND created_at >= $3 AND created_at < $4
       AND (created_at, id) < ($5, $6)
     ORDER BY created_at DESC, id DESC
     LIMIT $7
), due AS (
    UPDATE webhook_deliveries d` + redeliverSet + `
      FROM picked
     WHERE d.tenant_id = $1 AND d.event_id = picked.id AND d.endpoint_id = $2
       AND d.event_created_at = picked.created_at
    RETURNING 1
), last AS (
    SELECT id, created_at FROM picked ORDER BY created_at, id LIMIT 1
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM due),
       coalesce((SELECT id FROM last), ''), (SELECT created_at FROM last)`

// insertWindowAuditSQL writes a window redelivery's audit row before its
// first batch, in that batch's transaction; each batch adds its count.
const insertWindowAuditSQL = `
INSERT INTO webhook_redeliveries (tenant_id, requested_at, requested_by, via, endpoint_id, window_from, window_until, deliveries)
VALUES ($1, phasepay_now(), $2, $3, $4, $5, $6, 0)
RETURNING id`

const countWindowAuditSQL = `
UPDATE webhook_redeliveries SET deliveries = deliveries + $3
 WHERE tenant_id = $1 AND id = $2 AND pg_notify('` + events.NotifyChannel + `', '') IS NOT NULL`

// beginner is what a window's redelivery runs its transactions on: a
// pool, or a connection.
type beginner interface {
	events.DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

// redeliverWindow makes one endpoint's deliveries of a window due, a batch
// of events per transaction, so that a window of a long outage (a million
// events) holds no lock for long. The audit row commits with the first
// batch and counts every batch with it: what was made due is always
// recorded.
func redeliverWindow(ctx context.Context, q events.DBTX, r Redelivery) (Redelivered, error) {
	if r.EndpointID == "" {
		return Redelivered{}, fmt.Errorf("redeliver: an event, or an endpoint and a window, is required")
	}
	if !r.From.Before(r.Until) {
		return Redelivered{}, fmt.Errorf("redeliver to %s: %w", r.EndpointID, ErrWindow)
	}
	db, ok := q.(beginner)
	if !ok {
		return Redelivered{}, fmt.Errorf("redeliver to %s: a window needs a pool or a connection", r.EndpointID)
	}
	var (
		out      Redelivered
		auditID  int64
		cursorAt = r.Until
		cursorID = ""
		batch    = cmp.Or(r.Batch, RedeliverBatchSize)
	)
	for {
		var read, due int
		var lastID string
		var lastAt *time.Time
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if auditID == 0 {
				if err := tx.QueryRow(ctx, insertWindowAuditSQL, r.TenantID, r.By, r.Via, r.EndpointID, r.From, r.Until).Scan(&auditID); err != nil {
					return err
				}
			}
			if err := tx.QueryRow(ctx, redeliverWindowSQL, r.TenantID, r.EndpointID, r.From, r.Until, cursorAt, cursorID,
				batch).Scan(&read, &due, &lastID, &lastAt); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, countWindowAuditSQL, r.TenantID, auditID, due)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("redeliver to %s (%d made due so far): %w", r.EndpointID, out.Deliveries, err)
		}
		out.Deliveries += due
		if read < batch || lastAt == nil {
			return out, nil
		}
		cursorAt, cursorID = *lastAt, lastID
	}
}
