package formation_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/tools/formation"
)

// A pool as every phasepay process opens it (dbpool.OpenPool), on the
// formation's multi-host URL, follows the primary across a kill -9 of it
// without being reopened: writes fail only while no node is the primary,
// each failure a retryable "database unavailable" (503, never 500), and
// succeed again within seconds of the promotion. The last write
// acknowledged before the failure survives it (synchronous replication,
// the formation's default). make failover adds switchovers, under load,
// with api and reaper processes; this is the short version that fits in
// make test (about 30 s, most of it the formation's start).
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
	pool, err := dbpool.OpenPool(ctx, dbpool.Config{URL: f.URL()}, tel)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `CREATE TABLE t (n int PRIMARY KEY)`)
	require.NoError(t, err)

	// Writes every 50 ms until stopped; each failure must be a 503.
	type write struct {
		at time.Time
		ok bool
	}
	var (
		mu        sync.Mutex
		writes    []write
		lastOK    int
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
			writes = append(writes, write{time.Now(), err == nil})
			switch {
			case err == nil:
				lastOK = i
			case !dbstate.Unavailable(err):
				unhandled = append(unhandled, err)
			}
			mu.Unlock()
		}
	}()
	// backAfter returns how long after t writes failed until one
	// succeeded, and whether one did.
	backAfter := func(t time.Time) (time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		var failed *write
		for i, w := range writes {
			switch {
			case w.at.Before(t):
			case !w.ok && failed == nil:
				failed = &writes[i]
			case w.ok && failed != nil:
				return w.at.Sub(t), true
			}
		}
		return 0, false
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return lastOK > 0 }, 10*time.Second, 50*time.Millisecond)
	mu.Lock()
	before := lastOK
	mu.Unlock()

	fo, err := f.Kill(ctx, formation.KillOptions{})
	require.NoError(t, err)
	var back time.Duration
	require.Eventually(t, func() bool { var ok bool; back, ok = backAfter(fo.Started); return ok }, 20*time.Second, 50*time.Millisecond,
		"no write succeeded after the promotion")
	t.Logf("kill -9 %s → %s: promoted after %s, writing again %s after the failure", fo.From, fo.To,
		fo.Promoted.Sub(fo.Started).Round(time.Millisecond), back.Round(time.Millisecond))
	close(stop)
	<-done
	var got int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM t WHERE n = $1`, before).Scan(&got))
	require.Equal(t, 1, got, "the write acknowledged before the failure is on the new primary")
	require.Empty(t, unhandled, "writes that failed as something other than a database unavailable (a 500)")
}
