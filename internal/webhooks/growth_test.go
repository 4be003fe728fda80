package webhooks_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/harness/testdb"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// seedDueSQL queues $3 events of tenant $1, each with a delivery due now
// to endpoint $2, as a tenant's declined charges would: built in one
// statement, not through events.Write, so that a test can pile up 10⁵ of
// them in seconds. The events are spread over the last hour, in today's
// and yesterday's partitions.
const seedDueSQL = `
WITH ev AS (
    INSERT INTO events (tenant_id, id, type, created_at, body)
    SELECT $1, 'evt_seed_' || g, 'charge.declined', phasepay_now() - (g % 3600) * interval '1 second', '{}'
      FROM generate_series(1, $3::int) g
    RETURNING tenant_id, id, created_at
)
INSERT INTO webhook_deliveries (tenant_id, event_id, event_created_at, endpoint_id, next_attempt_at)
SELECT tenant_id, id, created_at, $2, created_at FROM ev`

// planRecorder collects the plan of every statement run on a pool, with
// what each read (auto_explain, with ANALYZE and BUFFERS).
type planRecorder struct {
	mu    sync.Mutex
	plans []string
}

// pool opens a pool on url configured as phasepay's processes configure
// theirs (dbpool: statement timeout, one generic plan per statement),
// whose every statement's plan r records.
func (r *planRecorder) pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	return testdb.Pool(t, url, time.Time{}, func(cfg *pgxpool.Config) {
		dbpool.ConfigurePool(cfg, url)
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			if strings.Contains(n.Message, "Query Text:") {
				r.mu.Lock()
				defer r.mu.Unlock()
				r.plans = append(r.plans, n.Message)
			}
		}
		next := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if _, err := conn.Exec(ctx, `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;
SET auto_explain.log_analyze = on; SET auto_explain.log_timing = off; SET auto_explain.log_buffers = on;
SET auto_explain.log_level = notice`); err != nil {
				return err
			}
			if next != nil {
				return next(ctx, conn)
			}
			return nil
		}
	})
}

var (
	removedByFilter = regexp.MustCompile(`Rows Removed by (?:Join )?Filter: (\d+)`)
	scanOfBacklog   = regexp.MustCompile(`Scan .*on (?:webhook_deliveries|events)_p\d+ .*actual rows=(\d+) loops=(\d+)`)
)

// reads returns, for one recorded plan, the most rows any of its nodes
// read and threw away (Rows Removed by Filter), and the most rows any of
// its scans of the deliveries or the events returned (all loops).
func reads(plan string) (removed, scanned int) {
	for _, m := range removedByFilter.FindAllStringSubmatch(plan, -1) {
		n, _ := strconv.Atoi(m[1])
		removed = max(removed, n)
	}
	for _, m := range scanOfBacklog.FindAllStringSubmatch(plan, -1) {
		rows, _ := strconv.Atoi(m[1])
		loops, _ := strconv.Atoi(m[2])
		scanned = max(scanned, rows*loops)
	}
	return removed, scanned
}

// pitfall 90 "A backlog every pass reads again": 10⁵ due deliveries of
// tenant A wait at an endpoint that hangs, held at its cap of 4 attempts
// in flight, beside an idle endpoint of A's. Another tenant's first
// delivery must start within the contract's bound, and no statement the
// deliverer runs may read A's backlog: each reads what it takes, or what
// it counts up to webhooks.CountLimit. The claim read A's due deliveries in due order and left
// the capped endpoint's out with a filter after the scan (Rows Removed by
// Filter: 99996), its lease statement found each picked row among the
// tenant's every delivery (Rows Removed by Join Filter: 399996), and the
// backlog gauges counted every pending delivery; at 300,000 a pass took
// 3.3 s, and another tenant's first delivery up to 6.7 s.
func TestBacklogAtCappedEndpointDelaysNoOtherTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tenantA, tenantB := b.newTenant(t, "a"), b.newTenant(t, "b")
	hang := newHangingServer(t)
	hanging, err := webhooks.Create(ctx, b.pool, tenantA, hang.url+"/hook", []string{"*"})
	require.NoError(t, err)
	idle, _ := receiver(t, ok)
	b.endpointOf(t, tenantA, idle.URL)
	const backlog = 100_000 // ten times webhooks.CountLimit
	_, err = b.pool.Exec(ctx, seedDueSQL, tenantA, hanging.ID, backlog)
	require.NoError(t, err)
	// As autovacuum would soon after such a growth (the test server runs
	// without it): a plan made on empty statistics reads whatever it
	// guessed was small.
	_, err = b.pool.Exec(ctx, `ANALYZE events, webhook_deliveries, webhook_endpoints`)
	require.NoError(t, err)

	var rec planRecorder
	d, err := webhooks.NewDeliverer(rec.pool(t, b.url), webhooks.DelivererConfig{AllowPrivate: true, Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(runCtx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	t.Cleanup(hang.release) // before the deliverer's stop, which waits for its attempts
	require.Eventually(t, func() bool { return hang.inflight.Load() >= webhooks.PerEndpointDefault }, 10*time.Second, 10*time.Millisecond)

	srv, got := receiver(t, ok)
	b.endpointOf(t, tenantB, srv.URL)
	committed := time.Now()
	ev := b.eventOf(t, tenantB)
	bound := firstDeliveryBound(50 * time.Millisecond)
	r := wait(t, got, 2*bound)
	took := time.Since(committed)
	require.Equal(t, ev.Body, r.body)
	require.Less(t, took, bound, "tenant B's first delivery, beside %d deliveries due at A's capped endpoint", backlog)
	t.Logf("tenant B's first delivery %s after its commit, beside %d due deliveries at a capped endpoint", took, backlog)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.plans)
	var heavy []string
	for _, plan := range rec.plans {
		if !strings.Contains(plan, " on webhook_deliveries_p") && !strings.Contains(plan, " on events_p") {
			continue // the catalog's, the endpoints': nothing a backlog grows
		}
		// A count reads what it counts, up to its limit; anything else,
		// the few rows it takes.
		if removed, scanned := reads(plan); removed > 100 || scanned > webhooks.CountLimit {
			heavy = append(heavy, fmt.Sprintf("%d rows thrown away, %d read by one scan:\n%s", removed, scanned, plan))
		}
	}
	require.Empty(t, heavy, "statements that read the backlog instead of what they take")
}
