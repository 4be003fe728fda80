package webhooks_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
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

// pitfall Q9 "A backlog every pass reads again": 10⁵ due deliveries of
// tenant A wait at an endpoint that hangs, held at its cap of 4 attempts
// in flight, beside an idle endpoint of A's. Another tenant's first
// delivery must start within the contract's bound, and no statement the
// deliverer runs may read A's backlog: each reads what it takes, or what
// it counts up to webhooks.CountLimit. The claim read A's due deliveries
// in due order and left the capped endpoint's out with a filter after the
// scan (Rows Removed by Filter: 99996, and JIT-compiled), and the backlog
// gauges counted every pending delivery (99,999 rows read); at 300,000 a
// pass took 3.3 s, and another tenant's first delivery up to 6.7 s.
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

	var plans testdb.Plans
	// Every plan costs more than jit_above_cost: the statements that walk
	// tenants and endpoints must be planned without JIT whatever they cost
	// (the claim's estimate passes the default at about 100 days of
	// partitions).
	pool := plans.PlansPool(t, b.url, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["jit_above_cost"] = "0" })
	d, err := webhooks.NewDeliverer(pool, webhooks.DelivererConfig{AllowPrivate: true, Interval: 50 * time.Millisecond})
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

	read := plans.Of("webhook_deliveries", "events")
	require.NotEmpty(t, read)
	var heavy []string
	for _, plan := range read {
		// A count reads what it counts, up to its limit; anything else,
		// the few rows it takes.
		if scanned, removed := testdb.Reads(plan); removed > 100 || scanned > webhooks.CountLimit {
			heavy = append(heavy, fmt.Sprintf("%d rows thrown away, %d read by one scan:\n%s", removed, scanned, plan))
		}
		if strings.Contains(plan, "WITH RECURSIVE busy") && strings.Contains(plan, "JIT:") {
			heavy = append(heavy, "compiled (JIT):\n"+plan)
		}
	}
	require.Empty(t, heavy, "statements that read the backlog instead of what they take")
}
