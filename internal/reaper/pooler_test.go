package reaper_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Pitfall: partition maintenance held a session advisory lock and raised
// its session's timeouts with set_config(…, false). Behind a transaction
// pooler each statement runs on whichever server connection is free:
// under load, the lock stayed held by a server connection other clients
// use (and its unlock failed quietly), and the raised timeouts stayed on
// server connections that then served requests. Maintenance now holds a
// transaction-scoped lock and, behind a pooler, sets nothing in a session.
func TestPartitionMaintenanceBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	conn, err := pgx.Connect(ctx, b.URL)
	require.NoError(t, err)
	require.NoError(t, dbpool.ApplySettings(ctx, conn))
	require.NoError(t, conn.Close(ctx))
	bouncer := pgbouncer.ForTest(t, pgbouncer.Config{Server: b.URL, PoolSize: 4})
	pooled := func() *pgxpool.Pool {
		cfg, err := dbpool.Config{URL: bouncer.URL(b.URL), Pooler: dbpool.PoolerTransaction}.PoolConfig()
		require.NoError(t, err)
		cfg.MaxConns = 4
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	newReaper := func() *reaper.Reaper {
		pool := pooled()
		r, err := reaper.New(pool, b.Keys, chargestest.NewService(t, pool, b.Keys, b.PSP, phases.Config{}),
			reaper.Config{Pooled: true, MaintenanceTimeout: 10 * time.Second})
		require.NoError(t, err)
		return r
	}
	one, other := newReaper(), newReaper()

	// Other clients keep the pooler's server connections changing hands.
	load := pooled()
	loadCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				_, _ = load.Exec(loadCtx, `SELECT pg_sleep(0.001)`)
			}
		})
	}
	for range 15 {
		_, ran, err := one.Maintenance().RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, ran)
	}
	stop()
	wg.Wait()

	var held int
	require.NoError(t, b.Pool.QueryRow(ctx, `
SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND objid = $1
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, reaper.MaintenanceLockID).Scan(&held))
	require.Zero(t, held, "a maintenance lock outlived its run")
	_, ran, err := other.Maintenance().RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran, "another reaper can maintain")

	// Every server connection of the pooler still runs under the
	// database's statement_timeout: hold each in a transaction and ask.
	var txs []pgx.Tx
	for range 4 {
		tx, err := load.Begin(ctx)
		require.NoError(t, err)
		txs = append(txs, tx)
		var timeout string
		require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('statement_timeout')`).Scan(&timeout))
		require.Equal(t, "5s", timeout, "a server connection kept maintenance's session timeout")
	}
	for _, tx := range txs {
		require.NoError(t, tx.Rollback(ctx))
	}
}

// Behind a transaction pooler every statement of the maintenance chore
// runs in a transaction that holds its lock (package maintenance), where
// DETACH … CONCURRENTLY cannot run: the partitions past retention are
// detached with the plain DETACH instead, and dropped all the same.
func TestPooledMaintenanceDropsExpiredPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pool := testdb.Pool(t, b.URL, b.T0.Add(20*24*time.Hour))
	r, err := reaper.New(pool, b.Keys, chargestest.NewService(t, pool, b.Keys, b.PSP, phases.Config{}), reaper.Config{Pooled: true})
	require.NoError(t, err)
	res, maintained, err := r.Maintenance().RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, maintained)
	require.Equal(t, idempotency.PartitionsAhead+1, res.Created)
	require.NotEmpty(t, res.Partitions.Dropped, "the real days' partitions are past retention by the moved clock")
}
