package dbpool_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// With PostgreSQL's default plan_cache_mode (auto), a prepared statement on
// the day-partitioned idempotency_keys was planned again at every
// execution: the fence and finish UPDATEs of every new charge spent more
// time planning than running. Every connection OpenPool makes reuses one
// generic plan per statement; DATABASE_URL may choose otherwise.
func TestEveryConnectionPlansOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tel, err := telemetry.New(ctx, "test")
	require.NoError(t, err)
	url := testdb.NewURL(t)

	// plans runs a primary-key read of idempotency_keys, prepared the way
	// pgx prepares every statement, more often than auto's five custom
	// plans, and returns the setting and the plans the server made.
	plans := func(url string) (mode string, generic, custom int64) {
		pool, err := dbpool.OpenPool(ctx, dbpool.Config{URL: url}, tel)
		require.NoError(t, err)
		defer pool.Close()
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode))
		const byKey = `SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1 AND key = $2 AND created_at = $3`
		for i := range 8 {
			var n int64
			require.NoError(t, conn.QueryRow(ctx, byKey, int64(i), "k", time.Now()).Scan(&n))
		}
		require.NoError(t, conn.QueryRow(ctx,
			`SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, byKey).
			Scan(&generic, &custom))
		return mode, generic, custom
	}
	mode, generic, custom := plans(url)
	require.Equal(t, dbpool.PlanCacheModeDefault, mode)
	require.Equal(t, int64(0), custom)
	require.Positive(t, generic)

	mode, _, custom = plans(url + "&plan_cache_mode=auto")
	require.Equal(t, "auto", mode)
	require.Positive(t, custom)
}
