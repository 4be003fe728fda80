package dbpool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/testsignal"
	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
)

// After a failover, the node a pool's connections were opened to may
// still run, as a standby (or as a primary being drained read-only): every
// write on those connections is refused with 25006. pgx closes a
// connection only on a FATAL error, so the pool went on handing out the
// same connections to the old primary, and every write failed, on every
// api process, until each connection's lifetime ran out. With a
// multi-host DATABASE_URL (target_session_attrs=read-write), a pool from
// OpenPool drops such a connection at its first refusal, and the next one
// it opens goes to the new primary: writes fail at most once per
// connection held, each failure a retryable "database unavailable".
//
// Two throw-away clusters stand in for the two nodes; which one takes
// writes is switched with default_transaction_read_only, which
// target_session_attrs tells apart as a standby's hot standby mode.
func TestPoolLeavesANodeThatBecameReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tel, err := telemetry.New(ctx, "test")
	require.NoError(t, err)
	a := pgcluster.ForTest(t, pgcluster.Config{})
	b := pgcluster.ForTest(t, pgcluster.Config{})
	setReadOnly := func(c *pgcluster.Cluster, on string) {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "ALTER SYSTEM SET default_transaction_read_only = "+on)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
		require.NoError(t, err)
		// The postmaster reloads, then signals every backend to: a new
		// session sees the setting once the postmaster has it, and every
		// idle backend applies it before its next statement.
		testsignal.WaitFor(t, 10*time.Second, func() bool {
			fresh, err := pgx.Connect(ctx, c.URL("postgres"))
			require.NoError(t, err)
			defer fresh.Close(ctx)
			var got string
			require.NoError(t, fresh.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&got))
			return got == on
		}, "default_transaction_read_only never became %s", on)
	}
	for _, c := range []*pgcluster.Cluster{a, b} {
		url, err := c.CreateDatabase(ctx, "follow")
		require.NoError(t, err)
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "CREATE TABLE t (v int)")
		require.NoError(t, err)
		require.NoError(t, conn.Close(ctx))
	}
	setReadOnly(b, "on") // b is the standby
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/follow?sslmode=disable&target_session_attrs=read-write",
		a.Port(), b.Port())
	pool, err := dbpool.OpenPool(ctx, dbpool.Config{URL: url}, tel)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// Four connections, all to a, the primary.
	const held = 4
	conns := make([]*pgxpool.Conn, 0, held)
	for range held {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		_, err := c.Exec(ctx, "INSERT INTO t VALUES (1)")
		require.NoError(t, err)
		c.Release()
	}

	// The failover: a takes no more writes, b does.
	setReadOnly(b, "off")
	setReadOnly(a, "on")

	var failures int
	for i := range 3 * held {
		_, err := pool.Exec(ctx, "INSERT INTO t VALUES (2)")
		if err != nil {
			failures++
			require.True(t, dbstate.Unavailable(err), "write %d: %v is a 500, not a retryable 503", i, err)
			require.LessOrEqual(t, failures, held, "write %d: the pool keeps connections to the old primary: %v", i, err)
			continue
		}
	}
	var onB int
	bconn, err := pgx.Connect(ctx, b.URL("follow"))
	require.NoError(t, err)
	defer bconn.Close(ctx)
	require.NoError(t, bconn.QueryRow(ctx, "SELECT count(*) FROM t WHERE v = 2").Scan(&onB))
	require.Equal(t, 3*held-failures, onB, "every write that succeeded went to the new primary")
}
