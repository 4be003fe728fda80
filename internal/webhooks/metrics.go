package webhooks

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/phasepay/phasepay/internal/events"
)

// backlogSQL measures what waits: pending deliveries, the age of the
// oldest one's event, and how long the longest-waiting due delivery has
// been due without a deliverer taking it. Served by the partial index
// webhook_deliveries_due.
const backlogSQL = `
SELECT count(*),
       coalesce(extract(epoch FROM phasepay_now() - min(event_created_at)), 0)::float8,
       coalesce(extract(epoch FROM phasepay_now() - min(` + dueAtExpr + `)
                                   FILTER (WHERE ` + dueAtExpr + ` <= phasepay_now())), 0)::float8
  FROM webhook_deliveries WHERE state = 'pending'`

// BacklogStats is what waits to be delivered.
type BacklogStats struct {
	// Pending counts the deliveries not yet succeeded nor given up.
	Pending int64
	// OldestAge is the age, in seconds, of the oldest event with a pending
	// delivery: up to 3 days while an endpoint is down, which is the
	// endpoint's problem, not the deliverers'.
	OldestAge float64
	// DueDelay is how long, in seconds, the longest-waiting due delivery
	// has been due: deliverers that keep up hold it near zero (a first
	// attempt starts within REAPER_INTERVAL of its commit). The alarm.
	DueDelay float64
}

// Backlog measures what waits to be delivered.
func Backlog(ctx context.Context, q events.DBTX) (BacklogStats, error) {
	var b BacklogStats
	if err := q.QueryRow(ctx, backlogSQL).Scan(&b.Pending, &b.OldestAge, &b.DueDelay); err != nil {
		return BacklogStats{}, fmt.Errorf("webhook backlog: %w", err)
	}
	return b, nil
}

// tenantBacklogSQL is backlogSQL for one tenant, read along
// webhook_deliveries_tenant_due.
const tenantBacklogSQL = backlogSQL + ` AND tenant_id = $1`

// TenantBacklog measures what waits to be delivered to one tenant's
// endpoints: while another tenant's endpoints all hang, its own backlog
// stays near zero (the chaos harness checks it).
func TenantBacklog(ctx context.Context, q events.DBTX, tenantID int64) (BacklogStats, error) {
	var b BacklogStats
	if err := q.QueryRow(ctx, tenantBacklogSQL, tenantID).Scan(&b.Pending, &b.OldestAge, &b.DueDelay); err != nil {
		return BacklogStats{}, fmt.Errorf("webhook backlog of tenant %d: %w", tenantID, err)
	}
	return b, nil
}

func (d *Deliverer) backlog(ctx context.Context) {
	b, err := Backlog(ctx, d.pool)
	if err != nil {
		return // the pass that follows reports the database
	}
	d.m.backlog.Record(ctx, b.Pending)
	d.m.backlogAge.Record(ctx, b.OldestAge)
	d.m.dueDelay.Record(ctx, b.DueDelay)
}

type instruments struct {
	attempts, failed                metric.Int64Counter
	attemptSeconds, deliverySeconds metric.Float64Histogram
	backlog                         metric.Int64Gauge
	backlogAge, dueDelay            metric.Float64Gauge
}

func newInstruments(m metric.Meter) (instruments, error) {
	var (
		in   instruments
		errs []error
		err  error
	)
	in.attempts, err = m.Int64Counter("phasepay.webhooks.attempts", metric.WithDescription("Webhook delivery attempts, by endpoint and whether they got a 2xx."))
	errs = append(errs, err)
	in.failed, err = m.Int64Counter("phasepay.webhooks.failed", metric.WithDescription("Webhook deliveries given up after 3 days of failed attempts, by endpoint."))
	errs = append(errs, err)
	in.attemptSeconds, err = m.Float64Histogram("phasepay.webhooks.attempt.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one webhook attempt, up to the endpoint's answer or the timeout."))
	errs = append(errs, err)
	in.deliverySeconds, err = m.Float64Histogram("phasepay.webhooks.delivery.latency", metric.WithUnit("s"),
		metric.WithDescription("From an event's commit to its successful delivery to one endpoint."))
	errs = append(errs, err)
	in.backlog, err = m.Int64Gauge("phasepay.webhooks.backlog", metric.WithDescription("Webhook deliveries pending (not yet succeeded nor given up)."))
	errs = append(errs, err)
	in.backlogAge, err = m.Float64Gauge("phasepay.webhooks.backlog.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest event with a pending delivery (up to 3 days while an endpoint is down)."))
	errs = append(errs, err)
	in.dueDelay, err = m.Float64Gauge("phasepay.webhooks.delivery.due_delay", metric.WithUnit("s"),
		metric.WithDescription("How long the longest-waiting due webhook delivery has waited for a deliverer. Alarm above a minute."))
	errs = append(errs, err)
	if in.failed != nil {
		in.failed.Add(context.Background(), 0)
	}
	return in, errors.Join(errs...)
}
