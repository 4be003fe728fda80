package dbstate_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/harness/pgcluster"
	"github.com/phasepay/phasepay/internal/dbstate"
)

// The errors a stopped, restarting or blocked server really produces are
// "unavailable"; the answers of a working server and the PSP's network
// errors are not. Without this, a database restart answered 500 without
// Retry-After.
func TestDatabaseErrorsAreClassified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgcluster.ForTest(t, pgcluster.Config{})
	url := c.URL("postgres")

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)

	// A working server's refusal.
	_, err = conn.Exec(ctx, `SELECT 1/0`)
	require.Error(t, err)
	require.False(t, dbstate.Unavailable(err), "division by zero: %v", err)

	// statement_timeout and lock_timeout.
	_, err = conn.Exec(ctx, `SET statement_timeout = '50ms'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_sleep(1)`)
	require.True(t, dbstate.Unavailable(err), "statement timeout: %v", err)
	_, err = conn.Exec(ctx, `RESET statement_timeout`)
	require.NoError(t, err)

	// A write on a node that is no longer the primary (a failover).
	_, err = conn.Exec(ctx, `BEGIN READ ONLY; CREATE TEMP TABLE x (v int)`)
	require.True(t, dbstate.Unavailable(err), "read-only: %v", err)
	_, err = conn.Exec(ctx, `ROLLBACK`)
	require.NoError(t, err)

	// The PSP's connection refused is not the database's.
	_, err = http.Get("http://127.0.0.1:1/")
	require.Error(t, err)
	require.False(t, dbstate.Unavailable(err), "http: %v", err)

	// The server goes away under an open connection, then refuses new ones.
	require.NoError(t, c.Stop())
	_, err = conn.Exec(ctx, `SELECT 1`)
	require.True(t, dbstate.Unavailable(err), "broken connection: %v", err)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = pgx.Connect(cctx, url)
	require.True(t, dbstate.Unavailable(err), "connect refused: %v", err)

	require.True(t, dbstate.Unavailable(dbstate.Wrap(err)))
	require.ErrorIs(t, dbstate.Wrap(err), dbstate.ErrUnavailable)
	require.NoError(t, dbstate.Wrap(nil))
}
