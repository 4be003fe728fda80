package console

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// The webhook endpoints of every tenant, and one endpoint's recent
// deliveries with every attempt. Secrets are never read: the endpoint
// readers of package webhooks leave them out, and the pages print
// "whsec_…" where one exists. URLs are printed without credentials or
// query (redactURL).

type endpointRow struct {
	Tenant    string
	ID, URL   string
	Events    []string
	CreatedAt time.Time
	Pending   int64 // up to 1000
	Failed    int64 // up to 1000
}

// endpointsSQL lists the live endpoints of every tenant, newest first,
// with their pending deliveries and those given up in the last day, each
// counted up to 1000: a count reads what it counts, and an endpoint that
// hangs can be owed millions (pitfall Q9 "A backlog every pass reads
// again"). The pending count walks webhook_deliveries_endpoint_due, the
// given-up one webhook_deliveries_failed (migrations/00026), each in its
// order, which only that index has: so the walk stops at its LIMIT, and
// no other index of the tenant's deliveries is read through with the
// endpoint as a filter (webhook_deliveries_tenant_pending was, for an
// endpoint with nothing pending: the tenant's every delivery pending
// elsewhere). Package webhooks lists one tenant's endpoints
// (webhooks.List); the console shows them all at once.
const endpointsSQL = `
SELECT t.name, e.id, e.url, e.events, e.created_at,
       (SELECT count(*) FROM (SELECT FROM webhook_deliveries d
         WHERE d.state = 'pending' AND d.tenant_id = e.tenant_id AND d.endpoint_id = e.id
         ORDER BY greatest(d.next_attempt_at, coalesce(d.locked_until, '-infinity'::timestamptz)) LIMIT 1000) p),
       (SELECT count(*) FROM (SELECT FROM webhook_deliveries d
         WHERE d.state = 'failed' AND d.tenant_id = e.tenant_id AND d.endpoint_id = e.id
           AND d.event_created_at > phasepay_now() - interval '1 day'
         ORDER BY d.tenant_id, d.endpoint_id, d.event_created_at LIMIT 1000) f)
  FROM webhook_endpoints e JOIN tenants t ON t.id = e.tenant_id
 WHERE e.deleted_at IS NULL
 ORDER BY e.created_at DESC, e.id DESC
 LIMIT 200`

func (s *Server) webhookEndpoints(r *http.Request) (view, error) {
	rows, err := s.cfg.Pool.Query(r.Context(), endpointsSQL)
	if err != nil {
		return view{}, fmt.Errorf("webhook endpoints: %w", err)
	}
	eps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[endpointRow])
	if err != nil {
		return view{}, fmt.Errorf("webhook endpoints: %w", err)
	}
	return view{template: "webhooks", page: page{Title: "Webhook endpoints", Nav: "webhooks", Live: true, Data: eps}}, nil
}

// deliveryRow is one delivery of an event to the endpoint, with its
// attempts.
type deliveryRow struct {
	EventID        string
	EventType      string
	EventCreatedAt time.Time
	State          string
	Attempts       int
	NextAttemptAt  *time.Time
	LastError      *string
	Tries          []webhooks.Attempt
}

type endpointData struct {
	Tenant     string
	Endpoint   webhooks.Endpoint
	Deliveries []deliveryRow
	// Windows are the redelivery form's choices (redeliver.go).
	Windows []struct{ Value, Label string }
}

// endpointDeliveriesSQL reads an endpoint's deliveries of the last day,
// newest event first, with every attempt of each. Deliveries are keyed by
// event; the last day's partitions are what an operator looks at, and
// the window keeps the read to them.
const endpointDeliveriesSQL = `
SELECT d.event_id, e.type, d.event_created_at, d.state, d.attempts,
       CASE WHEN d.state = 'pending' THEN d.next_attempt_at END, d.last_error
  FROM webhook_deliveries d
  JOIN events e ON e.tenant_id = d.tenant_id AND e.id = d.event_id AND e.created_at = d.event_created_at
 WHERE d.tenant_id = $1 AND d.endpoint_id = $2 AND d.event_created_at > phasepay_now() - interval '1 day'
 ORDER BY d.event_created_at DESC, d.event_id DESC
 LIMIT 100`

const endpointAttemptsSQL = `
SELECT event_id, attempt, attempted_at, coalesce(status_code, 0), latency_ms, coalesce(error, '')
  FROM webhook_attempts
 WHERE tenant_id = $1 AND endpoint_id = $2 AND event_id = ANY($3) AND event_created_at > phasepay_now() - interval '1 day'
 ORDER BY event_id, attempt`

func (s *Server) webhookEndpoint(r *http.Request) (view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	if !validText(q.Get("tenant")) || !validText(q.Get("id")) {
		return view{}, errNotFound
	}
	t, err := tenants.ByName(ctx, s.cfg.Pool, q.Get("tenant"))
	if errors.Is(err, tenants.ErrTenantNotFound) {
		return view{}, errNotFound
	} else if err != nil {
		return view{}, err
	}
	ep, err := webhooks.Get(ctx, s.cfg.Pool, t.ID, q.Get("id"))
	if errors.Is(err, webhooks.ErrNotFound) {
		return view{}, errNotFound
	} else if err != nil {
		return view{}, err
	}
	ep.Secret = "" // never shown (Get does not read it either)
	d := endpointData{Tenant: t.Name, Endpoint: ep, Windows: redeliverWindows}
	rows, err := s.cfg.Pool.Query(ctx, endpointDeliveriesSQL, t.ID, ep.ID)
	if err != nil {
		return view{}, fmt.Errorf("deliveries to %s: %w", ep.ID, err)
	}
	if d.Deliveries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (deliveryRow, error) {
		var dr deliveryRow
		return dr, row.Scan(&dr.EventID, &dr.EventType, &dr.EventCreatedAt, &dr.State, &dr.Attempts, &dr.NextAttemptAt, &dr.LastError)
	}); err != nil {
		return view{}, fmt.Errorf("deliveries to %s: %w", ep.ID, err)
	}
	ids := make([]string, len(d.Deliveries))
	byEvent := map[string]*deliveryRow{}
	for i := range d.Deliveries {
		ids[i] = d.Deliveries[i].EventID
		byEvent[ids[i]] = &d.Deliveries[i]
	}
	rows, err = s.cfg.Pool.Query(ctx, endpointAttemptsSQL, t.ID, ep.ID, ids)
	if err != nil {
		return view{}, fmt.Errorf("attempts to %s: %w", ep.ID, err)
	}
	var (
		eventID string
		a       webhooks.Attempt
	)
	if _, err := pgx.ForEachRow(rows, []any{&eventID, &a.Attempt, &a.AttemptedAt, &a.StatusCode, &a.LatencyMS, &a.Error}, func() error {
		if dr := byEvent[eventID]; dr != nil {
			dr.Tries = append(dr.Tries, a)
		}
		return nil
	}); err != nil {
		return view{}, fmt.Errorf("attempts to %s: %w", ep.ID, err)
	}
	return view{template: "webhook", page: page{Title: "Webhook endpoint " + ep.ID, Nav: "webhooks", Live: true,
		Flash: redeliveredFlash(q), Error: redeliverRefusals[q.Get("refused")], Data: d}}, nil
}
