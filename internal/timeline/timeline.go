// Package timeline reads a request's whole life for operators (bin/api
// requests show, the console): its key's timeline, as the key's own
// statements recorded it (internal/idempotency, timeline.go), with the
// events its transactions wrote, their webhook delivery attempts and the
// redeliveries asked for of them, merged in time order. Two queries (the
// key's row, then its events with their attempts), and a third for the
// redeliveries when it wrote events.
//
// Nothing here is for tenants: entries name processes (holders) and raw
// causes. The tenant's view is the key's timeline alone, stripped of both
// (internal/httpapi, GET /v1/idempotency_keys/{key}/timeline).
package timeline

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// DBTX is what Read runs its two queries on: a pool, a connection or a
// transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The kinds Read adds to the key's own (idempotency.Kind*).
const (
	// KindEvent: an event written in one of the request's transactions
	// (EventID, EventType).
	KindEvent idempotency.Kind = "event"
	// KindWebhookAttempt: one attempt to deliver such an event to an
	// endpoint (EventID, EndpointID, Attempt, the endpoint's Status, its
	// DurationMS, the Error in stable words).
	KindWebhookAttempt idempotency.Kind = "webhook_attempt"
	// KindWebhookRedelivery: a redelivery asked for of such an event
	// (EventID; EndpointID, or "" for every endpoint it was owed to), by
	// the tenant or an operator (Operator: "tenant" or the operator's
	// name; Via: api, cli or console), and how many deliveries it made
	// due (Attempt).
	KindWebhookRedelivery idempotency.Kind = "webhook_redelivery"
)

// Entry is one moment of a request's life: an entry of its key's timeline,
// or an event or a delivery attempt.
type Entry struct {
	idempotency.Entry
	EventID    string `json:"event_id,omitempty"`
	EventType  string `json:"event_type,omitempty"`
	EndpointID string `json:"endpoint_id,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
	Error      string `json:"error,omitempty"`
	Via        string `json:"via,omitempty"`
}

// Timeline is a request's life as an operator reads it.
type Timeline struct {
	Key      idempotency.ID
	ObjectID string
	// Holder holds the key's lease now ("" when nobody does).
	Holder string
	// TraceContext is the W3C traceparent of the request that claimed the
	// key ("" if it had none); TraceID its trace id.
	TraceContext string
	Entries      []Entry
}

// TraceID returns the trace id of the claiming request, or "".
func (t *Timeline) TraceID() string { return TraceID(t.TraceContext) }

// TraceID returns the trace id of a W3C traceparent
// (version-traceid-spanid-flags), or "" if it is not one.
func TraceID(traceparent string) string {
	if len(traceparent) != 55 || traceparent[2] != '-' || traceparent[35] != '-' {
		return ""
	}
	return traceparent[3:35]
}

// eventsSQL reads the events the request's transactions wrote, with each
// one's delivery attempts. An event is written in the transaction of the
// change it records (internal/events), and its created_at is that
// transaction's phasepay_now(), the very instant the key's entries of that
// transaction are stamped with: so the events are found by (tenant,
// created_at) at the instants of the timeline ($2), through
// events_tenant_created, a probe per instant, however many events the
// tenant has, and kept only if they are about the request's object ($3)
// or, for request.needs_attention, its key ($4). Attempts are read by
// their primary key's prefix (tenant, event).
//
// Sent with its values (simple protocol): a generic plan of created_at =
// ANY($2) would probe every day partition of events kept; with the values
// the planner reads only the days the instants fall on.
const eventsSQL = `
SELECT ev.id, ev.type, ev.created_at,
       coalesce(a.endpoint_id, ''), coalesce(a.attempt, 0), a.attempted_at, a.status_code,
       coalesce(a.latency_ms, 0), coalesce(a.error, '')
  FROM events ev
  LEFT JOIN webhook_attempts a
    ON a.tenant_id = ev.tenant_id AND a.event_id = ev.id AND a.event_created_at = ev.created_at
 WHERE ev.tenant_id = $1 AND ev.created_at = ANY($2::timestamptz[])
   AND CASE WHEN ev.type = 'request.needs_attention'
            THEN convert_from(ev.body, 'UTF8')::jsonb #>> '{data,object,key}' = $4
            ELSE $3 <> '' AND convert_from(ev.body, 'UTF8')::jsonb #>> '{data,object,id}' = $3 END
 ORDER BY ev.created_at, ev.id, a.attempted_at, a.attempt`

// Read returns the life of a tenant's key (its newest incarnation), or
// idempotency.ErrNotFound.
func Read(ctx context.Context, q DBTX, tenantID int64, key string) (*Timeline, error) {
	h, err := idempotency.ReadHistory(ctx, q, tenantID, key)
	if err != nil {
		return nil, err
	}
	t := &Timeline{Key: h.ID, ObjectID: h.ObjectID, Holder: h.Holder, TraceContext: h.TraceContext}
	base := make([]Entry, len(h.Entries))
	var instants []time.Time
	for i, e := range h.Entries {
		base[i] = Entry{Entry: e}
		if !slices.ContainsFunc(instants, e.At.Equal) {
			instants = append(instants, e.At)
		}
	}
	var extra []Entry
	if len(instants) > 0 {
		if extra, err = readEvents(ctx, q, tenantID, key, h.ObjectID, instants); err != nil {
			return nil, err
		}
	}
	t.Entries = merge(base, extra)
	return t, nil
}

func readEvents(ctx context.Context, q DBTX, tenantID int64, key, objectID string, instants []time.Time) ([]Entry, error) {
	rows, err := q.Query(ctx, eventsSQL, pgx.QueryExecModeSimpleProtocol, tenantID, instants, objectID, key)
	if err != nil {
		return nil, fmt.Errorf("events of %q: %w", key, err)
	}
	defer rows.Close()
	var events, attempts []Entry
	for rows.Next() {
		var (
			ev          Entry
			attempt     Entry
			attemptedAt *time.Time
			status      *int
			latency     int64
		)
		ev.Kind = KindEvent
		if err := rows.Scan(&ev.EventID, &ev.EventType, &ev.At, &attempt.EndpointID, &attempt.Attempt, &attemptedAt,
			&status, &latency, &attempt.Error); err != nil {
			return nil, fmt.Errorf("events of %q: %w", key, err)
		}
		if n := len(events); n == 0 || events[n-1].EventID != ev.EventID {
			events = append(events, ev)
		}
		if attemptedAt != nil {
			attempt.Kind, attempt.At, attempt.EventID, attempt.EventType = KindWebhookAttempt, *attemptedAt, ev.EventID, ev.EventType
			attempt.Status, attempt.DurationMS = status, &latency
			attempts = append(attempts, attempt)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("events of %q: %w", key, err)
	}
	redeliveries, err := readRedeliveries(ctx, q, tenantID, events)
	if err != nil {
		return nil, err
	}
	extra := append(append(events, attempts...), redeliveries...)
	slices.SortStableFunc(extra, func(a, b Entry) int { return a.At.Compare(b.At) })
	return extra, nil
}

// merge puts extra (sorted by time) among base (the key's timeline, in the
// order its statements wrote it) by time, an entry of base first when
// both have the same instant: an event comes after the entries of the
// transaction that wrote it.
func merge(base, extra []Entry) []Entry {
	out := make([]Entry, 0, len(base)+len(extra))
	i := 0
	for _, x := range extra {
		for i < len(base) && !base[i].At.After(x.At) {
			out = append(out, base[i])
			i++
		}
		out = append(out, x)
	}
	return append(out, base[i:]...)
}

// redeliveriesSQL reads the redeliveries asked for of the request's events
// (webhook_redeliveries, written by package webhooks), through
// webhook_redeliveries_event. A redelivery of an endpoint's window names no
// event, and is not among them.
const redeliveriesSQL = `
SELECT requested_at, requested_by, via, event_id, coalesce(endpoint_id, ''), deliveries
  FROM webhook_redeliveries
 WHERE tenant_id = $1 AND event_id = ANY($2::text[])
 ORDER BY requested_at, id`

// readRedeliveries returns the redeliveries asked for of events, each an
// entry at the time it was asked for.
func readRedeliveries(ctx context.Context, q DBTX, tenantID int64, events []Entry) ([]Entry, error) {
	if len(events) == 0 {
		return nil, nil
	}
	ids := make([]string, len(events))
	types := map[string]string{}
	for i, ev := range events {
		ids[i], types[ev.EventID] = ev.EventID, ev.EventType
	}
	rows, err := q.Query(ctx, redeliveriesSQL, tenantID, ids)
	if err != nil {
		return nil, fmt.Errorf("redeliveries: %w", err)
	}
	var (
		out []Entry
		e   Entry
	)
	_, err = pgx.ForEachRow(rows, []any{&e.At, &e.Operator, &e.Via, &e.EventID, &e.EndpointID, &e.Attempt}, func() error {
		e.Kind, e.EventType = KindWebhookRedelivery, types[e.EventID]
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redeliveries: %w", err)
	}
	return out, nil
}
