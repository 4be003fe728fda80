package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// A generic plan made while charges is empty and never analyzed looks a
// charge up by walking the tenant's charges (charges_tenant_created) and,
// on a server without autovacuum, keeps doing so for good. The analyzer,
// doing autovacuum's ANALYZE, makes the prepared statement plan again, by
// the primary key.
func TestGenericPlanMadeOnAnEmptyTableIsReplannedAfterAnalyze(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	pool := testdb.Pool(t, url, time.Time{})
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()

	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE by_id (bigint, text) AS SELECT * FROM charges WHERE tenant_id = $1 AND id = $2`)
	require.NoError(t, err)
	plan := func() string {
		t.Helper()
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE by_id (1, 'ch_1')`)
		require.NoError(t, err)
		var lines []string
		for rows.Next() {
			var l string
			require.NoError(t, rows.Scan(&l))
			lines = append(lines, l)
		}
		require.NoError(t, rows.Err())
		return strings.Join(lines, "\n")
	}
	// The premise (PostgreSQL 15): the plan made now, on no rows and no
	// statistics, does not look the charge up by its primary key.
	require.NotContains(t, plan(), "charges_pkey", "the pitfall's premise no longer holds on this server")

	_, err = pool.Exec(ctx, `
		INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at, amount, currency, payment_method, status)
		SELECT 1, 'ch_' || g, 'k' || g, now(), 100, 'usd', 'pm_card_visa', 'pending' FROM generate_series(1, 2000) g`)
	require.NoError(t, err)
	flushStats(t, pool)

	a := &analyzer{pool: pool, emulate: true}
	n, err := a.pass(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1, "charges changed by 2,000 rows is due")
	require.Contains(t, plan(), "charges_pkey", "ANALYZE makes the prepared statement plan again")

	n, err = a.pass(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing changed since: nothing is due")
}

// flushStats makes the server's cumulative statistics show what this
// test's sessions did (PostgreSQL 15 flushes them at most once a second).
func flushStats(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for range 2 {
		conns := pool.AcquireAllIdle(ctx)
		for _, c := range conns {
			_, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
			require.NoError(t, err)
			_, err = c.Exec(ctx, `SELECT 1`)
			require.NoError(t, err)
			c.Release()
		}
	}
}
