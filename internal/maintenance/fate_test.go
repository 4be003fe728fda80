package maintenance_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/maintenance"
	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// The maintenance lock was held by a transaction on one connection while
// the chore ran on the pool's others. When the lock's connection died (its
// backend killed, a network cut), the lock was free for a second process,
// whose chore ran while the first one's went on: two processes
// maintaining at once. The chore now runs on the connection that holds
// the lock: the session that holds it, or behind a transaction pooler the
// transaction that takes it. Killed with the lock, the chore cannot go on
// while another process takes its turn.
func TestMaintenanceChoreDiesWithItsLock(t *testing.T) {
	t.Parallel()
	t.Run("session", func(t *testing.T) {
		t.Parallel()
		pool := testdb.New(t)
		testChoreDiesWithItsLock(t, pool, pool, false)
	})
	t.Run("behind a transaction pooler", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		dbURL := testdb.NewURL(t)
		direct := testdb.Pool(t, dbURL, time.Time{})
		require.NoError(t, dbpool.ApplySettings(ctx, mustConn(t, dbURL)))
		b := pgbouncer.ForTest(t, pgbouncer.Config{Server: dbURL, PoolSize: 4})
		cfg, err := dbpool.Config{URL: b.URL(dbURL), Pooler: dbpool.PoolerTransaction}.PoolConfig()
		require.NoError(t, err)
		cfg.MaxConns = 4
		pooled, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pooled.Close)
		testChoreDiesWithItsLock(t, pooled, direct, true)
	})
}

// testChoreDiesWithItsLock runs a chore on pool that stops after it took
// the lock; kills the backend holding the lock (seen through direct); runs
// another process's chore; and then lets the first go on: it must fail,
// and only the second may have written.
func testChoreDiesWithItsLock(t *testing.T, pool, direct *pgxpool.Pool, pooled bool) {
	ctx := context.Background()
	_, err := direct.Exec(ctx, `CREATE TABLE chore_log (by text NOT NULL)`)
	require.NoError(t, err)
	inside, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(goOn) }) })
	a := newServiceWith(t, pool, maintenance.Config{Pooled: pooled}, func(ctx context.Context, conn *maintenance.Conn) (int, error) {
		// The chore's work, in one transaction: behind a pooler, the one
		// that holds the lock.
		return 0, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			close(inside)
			<-goOn
			_, err := tx.Exec(ctx, `INSERT INTO chore_log VALUES ('a')`)
			return err
		})
	})
	b := newServiceWith(t, pool, maintenance.Config{Pooled: pooled}, func(ctx context.Context, conn *maintenance.Conn) (int, error) {
		_, err := conn.Exec(ctx, `INSERT INTO chore_log VALUES ('b')`)
		return 0, err
	})
	done := make(chan error, 1)
	go func() {
		_, _, err := a.RunOnce(ctx)
		done <- err
	}()
	<-inside

	var killed bool
	require.NoError(t, direct.QueryRow(ctx, `
SELECT pg_terminate_backend(pid, 10000) FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND (classid::bigint << 32 | objid::bigint) = $1`, int64(lockID)).Scan(&killed))
	require.True(t, killed, "the lock's backend is gone")
	_, ran, err := b.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran, "the lock is free once its holder is gone")

	once.Do(func() { close(goOn) })
	require.Error(t, <-done, "the chore went on after its lock was gone")
	rows, err := direct.Query(ctx, `SELECT by FROM chore_log`)
	require.NoError(t, err)
	by, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, by, "two processes did the chore at once")
}
