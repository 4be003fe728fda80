package dbpool_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Without a statement_timeout and a lock_timeout, one statement queued
// behind a lock (a DDL, an operator's open transaction) held its request,
// and every request behind it, for as long as the lock was held. Every
// connection OpenPool makes has both, and an idle-in-transaction timeout;
// DATABASE_URL may set its own.
func TestEveryConnectionHasTimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tel, err := telemetry.New(ctx, "test")
	require.NoError(t, err)
	url := testdb.NewURL(t)

	show := func(url string) (statement, lock, idle string) {
		pool, err := dbpool.OpenPool(ctx, dbpool.Config{URL: url}, tel)
		require.NoError(t, err)
		defer pool.Close()
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),
			        current_setting('idle_in_transaction_session_timeout')`).Scan(&statement, &lock, &idle))
		require.Equal(t, dbpool.ConnectTimeoutDefault, pool.Config().ConnConfig.ConnectTimeout)
		return statement, lock, idle
	}
	statement, lock, idle := show(url)
	require.Equal(t, "5s", statement)
	require.Equal(t, "2s", lock)
	require.Equal(t, "30s", idle)

	statement, lock, _ = show(url + "&statement_timeout=30000&lock_timeout=0")
	require.Equal(t, "30s", statement)
	require.Equal(t, "0", lock)
}
