package formation_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/harness/formation"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/telemetry"
)

// A pool as every phasepay process opens it (dbpool.OpenPool), on the
// formation's multi-host URL, follows the primary across a kill -9 and a
// switchover without being reopened: writes fail only while no node is the
// primary, each failure a retryable "database unavailable" (503, never
// 500), and succeed again within seconds of the promotion. The write
// before each failure survives it (synchronous replication, the
// formation's default).
func TestPoolFollowsThePrimaryAcrossFailovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, err := formation.Start(ctx, formation.Config{Log: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Stop()) })
	names, err := f.SynchronousStandbyNames(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, names, "synchronous replication is the formation's default")

	tel, err := telemetry.New(ctx, "test")
	require.NoError(t, err)
	pool, err := dbpool.OpenPool(ctx, f.URL(), tel)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `CREATE TABLE t (n int PRIMARY KEY)`)
	require.NoError(t, err)

	// Writes every 50 ms until stopped; each failure must be a 503.
	var (
		mu        sync.Mutex
		n         int
		lastOK    time.Time
		unhandled []error
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := pool.Exec(wctx, `INSERT INTO t VALUES ($1)`, i)
			cancel()
			mu.Lock()
			switch {
			case err == nil:
				n, lastOK = i, time.Now()
			case !dbstate.Unavailable(err):
				unhandled = append(unhandled, err)
			}
			mu.Unlock()
		}
	}()
	last := func() (int, time.Time) {
		mu.Lock()
		defer mu.Unlock()
		return n, lastOK
	}
	fail := func(kind string, failover func() (formation.Failover, error)) {
		require.Eventually(t, func() bool { n, _ := last(); return n > 0 }, 10*time.Second, 50*time.Millisecond)
		before, _ := last()
		fo, err := failover()
		require.NoError(t, err)
		require.Eventually(t, func() bool { _, at := last(); return at.After(fo.Promoted) }, 20*time.Second, 50*time.Millisecond,
			"%s: no write succeeded after the promotion", kind)
		_, at := last()
		t.Logf("%s %s → %s: promoted after %s, writing again %s after the failure", kind, fo.From, fo.To,
			fo.Promoted.Sub(fo.Started).Round(time.Millisecond), at.Sub(fo.Started).Round(time.Millisecond))
		var got int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM t WHERE n = $1`, before).Scan(&got))
		require.Equal(t, 1, got, "%s: the write acknowledged before the failure is on the new primary", kind)
	}
	fail("kill -9", func() (formation.Failover, error) { return f.Kill(ctx, formation.KillOptions{}) })
	require.NoError(t, f.WaitHealthy(ctx))
	fail("switchover", func() (formation.Failover, error) { return f.Switchover(ctx) })
	close(stop)
	<-done
	require.Empty(t, unhandled, "writes that failed as something other than a database unavailable (a 500)")
}
