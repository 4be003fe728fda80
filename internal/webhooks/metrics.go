package webhooks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/phasepay/phasepay/internal/events"
)

// backlogSQLTemplate measures what waits, reading a bounded part of it
// whatever the backlog (pitfall Q9 "A backlog every pass reads again"):
//
//   - the pending deliveries, counted up to CountLimit;
//   - the age of the oldest event with a pending delivery: each tenant's
//     oldest, the first entry of the tenant in
//     webhook_deliveries_tenant_pending;
//   - how long the longest-waiting due delivery has been due: the first
//     due of each endpoint the walk visits (walk.go: every endpoint with
//     pending deliveries, but EndpointsPerPass of a tenant's at most).
//
// Each is a probe per tenant or endpoint with pending deliveries, or a
// walk of an index that stops at its LIMIT (the count is ordered as its
// index is, so that no bitmap scan reads every entry before the LIMIT can
// stop it). {{busy}} lists the tenants measured: busySQL, or tenant $2.
const backlogSQLTemplate = `
WITH RECURSIVE busy (tenant_id) AS ({{busy}}),
tenants AS (
    SELECT busy.tenant_id,
           (SELECT d.event_created_at FROM webhook_deliveries d
             WHERE d.state = 'pending' AND d.tenant_id = busy.tenant_id
             ORDER BY d.event_created_at LIMIT 1) AS oldest
      FROM busy
     WHERE busy.tenant_id IS NOT NULL
),
first_due AS (
    SELECT (SELECT ` + dueAtExpr + ` FROM webhook_deliveries d
             WHERE d.state = 'pending' AND d.tenant_id = busy.tenant_id AND d.endpoint_id = walk.endpoint_id
             ORDER BY ` + dueAtExpr + ` LIMIT 1) AS due
      FROM busy
     CROSS JOIN LATERAL (
        WITH RECURSIVE walk (endpoint_id, n, wrapped) AS (` + walkSQL + `)
        SELECT endpoint_id FROM walk
     ) walk
     WHERE busy.tenant_id IS NOT NULL
)
SELECT (SELECT count(*) FROM (SELECT FROM webhook_deliveries d WHERE d.state = 'pending'{{tenant}}
                                ORDER BY d.tenant_id, d.event_created_at LIMIT {{count_limit}}) c),
       coalesce((SELECT extract(epoch FROM phasepay_now() - min(oldest)) FROM tenants), 0)::float8,
       coalesce((SELECT extract(epoch FROM phasepay_now() - min(due)) FROM first_due WHERE due <= phasepay_now()), 0)::float8`

// backlogSQL is backlogSQLTemplate over every tenant; tenantBacklogSQL
// over tenant $2 alone ({{tenant}} restricts its count).
var (
	backlogSQL = withLimits(strings.NewReplacer("{{busy}}", busySQL, "{{tenant}}", "").
			Replace(backlogSQLTemplate), caps{})
	tenantBacklogSQL = withLimits(strings.NewReplacer("{{busy}}", "SELECT $2::bigint", "{{tenant}}", " AND d.tenant_id = $2").
				Replace(backlogSQLTemplate), caps{})
)

// BacklogStats is what waits to be delivered.
type BacklogStats struct {
	// Pending counts the deliveries not yet succeeded nor given up, up to
	// CountLimit: a larger backlog reads CountLimit.
	Pending int64
	// OldestAge is the age, in seconds, of the oldest event with a pending
	// delivery: up to 3 days while an endpoint is down, which is the
	// endpoint's problem, not the deliverers'.
	OldestAge float64
	// DueDelay is how long, in seconds, the longest-waiting due delivery
	// has been due: deliverers that keep up hold it near zero (a first
	// attempt starts within REAPER_INTERVAL of its commit). The alarm. Of
	// a tenant with more than EndpointsPerPass endpoints owed deliveries,
	// a measure sees that many, in turn.
	DueDelay float64
}

// Querier runs the backlog's statement: a *pgxpool.Pool, a *pgx.Conn or
// a pgx.Tx.
type Querier interface {
	events.DBTX
	batcher
}

// Backlog measures what waits to be delivered.
func Backlog(ctx context.Context, q Querier) (BacklogStats, error) {
	b, err := backlog(ctx, q, backlogSQL, walkStart())
	if err != nil {
		return BacklogStats{}, fmt.Errorf("webhook backlog: %w", err)
	}
	return b, nil
}

// TenantBacklog measures what waits to be delivered to one tenant's
// endpoints: while another tenant's endpoints all hang, its own backlog
// stays near zero (the chaos harness checks it).
func TenantBacklog(ctx context.Context, q Querier, tenantID int64) (BacklogStats, error) {
	b, err := backlog(ctx, q, tenantBacklogSQL, walkStart(), tenantID)
	if err != nil {
		return BacklogStats{}, fmt.Errorf("webhook backlog of tenant %d: %w", tenantID, err)
	}
	return b, nil
}

// backlog runs one of the backlog statements, planned without JIT
// (collectWithoutJIT: it walks every tenant's endpoints).
func backlog(ctx context.Context, q Querier, sql string, args ...any) (BacklogStats, error) {
	bs, err := collectWithoutJIT(ctx, q, pgx.RowToStructByPos[BacklogStats], sql, args...)
	if err != nil {
		return BacklogStats{}, err
	}
	if len(bs) != 1 {
		return BacklogStats{}, fmt.Errorf("%d rows, not 1", len(bs))
	}
	return bs[0], nil
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
