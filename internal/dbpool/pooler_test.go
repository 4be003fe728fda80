package dbpool_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Pitfall: every connection's statement, lock and idle timeouts and its
// plan_cache_mode were startup parameters. PgBouncer refuses a startup
// parameter it does not know ("unsupported startup parameter"), and told
// to ignore them (ignore_startup_parameters) drops them: every statement
// then ran without a timeout, silently. Behind a transaction pooler the
// settings are the database's defaults, set by `api migrate`, and checked
// at start.
func TestSettingsHoldBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tel, err := telemetry.New(ctx, "test")
	require.NoError(t, err)
	dbURL := testdb.NewURL(t)
	strict := pgbouncer.ForTest(t, pgbouncer.Config{Server: dbURL, PoolSize: 2})
	lenient := pgbouncer.ForTest(t, pgbouncer.Config{Server: dbURL, PoolSize: 2, Settings: map[string]string{
		"ignore_startup_parameters": "statement_timeout,lock_timeout,idle_in_transaction_session_timeout,plan_cache_mode",
	}})
	open := func(db dbpool.Config) *pgxpool.Pool {
		pool, err := dbpool.OpenPool(ctx, db, tel)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}

	// Configured as for the server itself: refused, or silently unbounded.
	err = open(dbpool.Config{URL: strict.URL(dbURL)}).Ping(ctx)
	require.ErrorContains(t, err, "unsupported startup parameter")
	err = dbpool.CheckSettings(ctx, open(dbpool.Config{URL: lenient.URL(dbURL)}))
	require.ErrorIs(t, err, dbpool.ErrSettings)
	require.ErrorContains(t, err, "statement_timeout is off")

	// Declared: no startup parameter; the database's defaults hold once
	// `api migrate` set them.
	pooled := open(dbpool.Config{URL: strict.URL(dbURL), Pooler: dbpool.PoolerTransaction})
	require.ErrorIs(t, dbpool.CheckSettings(ctx, pooled), dbpool.ErrSettings)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	require.NoError(t, dbpool.ApplySettings(ctx, conn))
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, restartServerConns(ctx, strict))
	require.NoError(t, dbpool.CheckSettings(ctx, pooled))
	var statement, lock, idle, plans string
	require.NoError(t, pooled.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),
		current_setting('idle_in_transaction_session_timeout'), current_setting('plan_cache_mode')`).Scan(&statement, &lock, &idle, &plans))
	require.Equal(t, []string{"5s", "2s", "30s", dbpool.PlanCacheModeDefault}, []string{statement, lock, idle, plans})
	require.Equal(t, pgx.QueryExecModeExec, pooled.Config().ConnConfig.DefaultQueryExecMode)
}

// restartServerConns makes the pooler close its server connections, so
// that the next ones start with the database's new defaults.
func restartServerConns(ctx context.Context, b *pgbouncer.Bouncer) error {
	_, err := b.Exec(ctx, "postgres", "RECONNECT")
	return err
}

// DATABASE_POOLER takes one value, DATABASE_DIRECT_URL only beside it, and
// a pooler rules out the exec mode that needs named statements.
func TestPoolerConfigIsValidated(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"unknown pooler":     {map[string]string{"DATABASE_POOLER": "session"}, "DATABASE_POOLER"},
		"direct, no pooler":  {map[string]string{"DATABASE_DIRECT_URL": "postgres://x@h/db"}, "DATABASE_DIRECT_URL is set but DATABASE_POOLER is not"},
		"named statements":   {map[string]string{"DATABASE_POOLER": "transaction", "DATABASE_URL": "postgres://x@h/db?default_query_exec_mode=cache_statement"}, "cache_statement"},
		"bad direct URL":     {map[string]string{"DATABASE_POOLER": "transaction", "DATABASE_DIRECT_URL": "postgres://x@h:notaport/db"}, "DATABASE_DIRECT_URL"},
		"pooler with direct": {map[string]string{"DATABASE_POOLER": "transaction", "DATABASE_DIRECT_URL": "postgres://x@h/db"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := dbpool.ConfigFromEnv(func(k string) string { return tc.env[k] })
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, "postgres://x@h/db", c.Direct())
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}
