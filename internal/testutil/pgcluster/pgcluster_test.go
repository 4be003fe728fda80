package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
)

// A committed row survives an immediate stop, and the same URL works again
// after Start: what tests of riding out a database restart rely on.
func TestClusterSurvivesImmediateStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgcluster.ForTest(t, pgcluster.Config{})
	url, err := c.CreateDatabase(ctx, "survive")
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
	require.NoError(t, err)

	require.NoError(t, c.Stop())
	require.False(t, c.Running())
	// The open connection is gone, and new ones are refused.
	require.Error(t, conn.Ping(ctx))
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = pgx.Connect(cctx, url)
	require.Error(t, err)

	require.NoError(t, c.Restart(ctx, 0)) // a stopped cluster restarts too
	require.True(t, c.Running())
	conn2, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn2.Close(ctx)
	var v int
	require.NoError(t, conn2.QueryRow(ctx, "SELECT v FROM t").Scan(&v))
	require.Equal(t, 42, v)
}
