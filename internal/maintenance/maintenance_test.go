package maintenance_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/maintenance"
	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Every pool, server and client a test starts is stopped by its
// cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const lockID = 0x70700099

// heldLocks counts the advisory locks on lockID held in the whole server
// (pg_locks: every session, the pooler's server connections included).
func heldLocks(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `
SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND (classid::bigint << 32 | objid::bigint) = $1`, int64(lockID)).Scan(&n))
	return n
}

func newService(t *testing.T, pool *pgxpool.Pool, chore maintenance.Chore[int]) *maintenance.Service[int] {
	t.Helper()
	return newServiceWith(t, pool, maintenance.Config{}, chore)
}

// newServiceWith is newService with cfg's Pooled.
func newServiceWith(t *testing.T, pool *pgxpool.Pool, cfg maintenance.Config, chore maintenance.Chore[int]) *maintenance.Service[int] {
	t.Helper()
	s, err := maintenance.New(pool, maintenance.Config{Name: "test chore", LockID: lockID, Interval: time.Hour, Pooled: cfg.Pooled}, chore)
	require.NoError(t, err)
	return s
}

// One process at a time: while one run holds the lock, another skips;
// once it ends, the lock is free again.
func TestMaintenanceRunsOneAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	inside, release := make(chan struct{}), make(chan struct{})
	a := newService(t, pool, func(ctx context.Context, _ *maintenance.Conn) (int, error) {
		close(inside)
		<-release
		return 1, nil
	})
	b := newService(t, pool, func(context.Context, *maintenance.Conn) (int, error) { return 2, nil })

	done := make(chan error, 1)
	go func() {
		_, ran, err := a.RunOnce(ctx)
		if err == nil && !ran {
			err = context.Canceled // must not happen: a is first
		}
		done <- err
	}()
	<-inside
	require.Equal(t, 1, heldLocks(t, pool))
	_, ran, err := b.RunOnce(ctx)
	require.NoError(t, err)
	require.False(t, ran, "another run holds the lock")
	close(release)
	require.NoError(t, <-done)

	require.Zero(t, heldLocks(t, pool), "the lock went with the run's transaction")
	res, ran, err := b.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 2, res)
}

// Start runs at once (the initial tick) and Stop waits for the run; test
// signals say what each run did, without sleeping.
func TestMaintenanceStartsWithARun(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	var runs atomic.Int64
	s := newService(t, pool, func(context.Context, *maintenance.Conn) (int, error) { return int(runs.Add(1)), nil })
	s.TestSignals.Ran.Init(t)
	require.NoError(t, s.Start(context.Background()))
	require.Equal(t, 1, s.TestSignals.Ran.WaitOrTimeout())
	s.Stop()
	s.Stop()
	require.EqualValues(t, 1, runs.Load(), "Interval is an hour: one run")
}

// Pitfall: partition maintenance took a session advisory lock. Behind a
// transaction pooler the lock is taken on one server connection and the
// unlock runs on whichever is free: under load the lock stayed held by a
// server connection that other clients now use, and maintenance stopped
// everywhere else. Behind a pooler (Config.Pooled) each transaction of the
// chore takes a transaction-scoped lock, which ends with its transaction,
// on the connection that took it.
func TestMaintenanceLockIsReleasedBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	direct := testdb.Pool(t, dbURL, time.Time{})
	require.NoError(t, dbpool.ApplySettings(ctx, mustConn(t, dbURL)))
	b := pgbouncer.ForTest(t, pgbouncer.Config{Server: dbURL, PoolSize: 4})
	pooled := func() *pgxpool.Pool {
		cfg, err := dbpool.Config{URL: b.URL(dbURL), Pooler: dbpool.PoolerTransaction}.PoolConfig()
		require.NoError(t, err)
		cfg.MaxConns = 4
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	// A chore that writes, through its Conn, in a transaction and alone.
	chore := func(ctx context.Context, conn *maintenance.Conn) (int, error) {
		if _, err := conn.Exec(ctx, `SELECT 1`); err != nil {
			return 0, err
		}
		return 0, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, `SELECT 1`); return err })
	}
	a := newServiceWith(t, pooled(), maintenance.Config{Pooled: true}, chore)
	other := newServiceWith(t, pooled(), maintenance.Config{Pooled: true}, chore)

	// Other clients keep the pooler's server connections changing hands.
	loadCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	load := pooled()
	for range 3 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				_, _ = load.Exec(loadCtx, `SELECT pg_sleep(0.001)`)
			}
		})
	}
	for range 30 {
		_, ran, err := a.RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, ran)
	}
	stop()
	wg.Wait()
	require.Zero(t, heldLocks(t, direct), "a maintenance lock outlived its run")
	_, ran, err := other.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran, "another process can maintain")
}

func mustConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
