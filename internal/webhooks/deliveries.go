package webhooks

import (
	"context"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/events"
)

// Delivery is what the tenant sees of one event's delivery to one
// endpoint, with every attempt made.
type Delivery struct {
	EndpointID    string
	State         string // pending, succeeded, failed
	NextAttemptAt *time.Time
	Attempts      []Attempt
}

// Attempt is one HTTP attempt of a delivery.
type Attempt struct {
	Attempt     int
	AttemptedAt time.Time
	// StatusCode is the endpoint's answer, 0 if there was none (timeout,
	// connection refused or lost).
	StatusCode int
	LatencyMS  int
	Error      string
}

const deliveriesSQL = `
SELECT d.endpoint_id, d.state, CASE WHEN d.state = 'pending' THEN d.next_attempt_at END,
       coalesce(a.attempt, 0), coalesce(a.attempted_at, 'epoch'), coalesce(a.status_code, 0),
       coalesce(a.latency_ms, 0), coalesce(a.error, '')
  FROM webhook_deliveries d
  LEFT JOIN webhook_attempts a
    ON a.tenant_id = d.tenant_id AND a.event_id = d.event_id AND a.endpoint_id = d.endpoint_id
   AND a.event_created_at = d.event_created_at
 WHERE d.tenant_id = $1 AND d.event_id = $2 AND d.event_created_at = $3
 ORDER BY d.endpoint_id, a.attempt`

// Deliveries returns the deliveries of one of the tenant's events (none if
// no endpoint was subscribed), each with its attempts in order. It
// returns events.ErrNotFound if the tenant has no such event.
func Deliveries(ctx context.Context, q events.DBTX, tenantID int64, eventID string) ([]Delivery, error) {
	ev, err := events.Get(ctx, q, tenantID, eventID)
	if err != nil {
		return nil, err
	}
	var out []Delivery
	rows, err := q.Query(ctx, deliveriesSQL, tenantID, ev.ID, ev.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("deliveries of %s: %w", eventID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			d Delivery
			a Attempt
		)
		if err := rows.Scan(&d.EndpointID, &d.State, &d.NextAttemptAt, &a.Attempt, &a.AttemptedAt, &a.StatusCode, &a.LatencyMS, &a.Error); err != nil {
			return nil, fmt.Errorf("deliveries of %s: %w", eventID, err)
		}
		if n := len(out); n == 0 || out[n-1].EndpointID != d.EndpointID {
			out = append(out, d)
		}
		if a.Attempt > 0 {
			last := &out[len(out)-1]
			last.Attempts = append(last.Attempts, a)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("deliveries of %s: %w", eventID, err)
	}
	return out, nil
}
