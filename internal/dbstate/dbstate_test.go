package dbstate_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/testsignal"
	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
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

// Pitfall: a prepared statement the server dropped (DEALLOCATE, DISCARD
// ALL) or whose result type a column change altered, and a function whose
// row type an online ADD COLUMN changed under a call in flight, answered
// 500, though the same request a moment later succeeds. They are
// retryable: 503 database_unavailable, as a restart is.
func TestStaleStatementsAreRetryable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	other, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer other.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE stale (a int, b text);
CREATE FUNCTION stale_rows() RETURNS SETOF stale LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_sleep(0.5); RETURN QUERY SELECT * FROM stale; END $$`)
	require.NoError(t, err)

	// Gone: prepared by name, then dropped by the server.
	_, err = conn.Prepare(ctx, "one", `SELECT a FROM stale`)
	require.NoError(t, err)
	_, err = conn.PgConn().Exec(ctx, "DISCARD ALL").ReadAll()
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "one")
	require.True(t, dbstate.StaleStatement(err), "%v", err)
	require.True(t, dbstate.Unavailable(err), "%v", err)

	// Changed: its result type is no longer the planned one.
	_, err = conn.Prepare(ctx, "all", `SELECT * FROM stale`)
	require.NoError(t, err)
	_, err = other.Exec(ctx, `ALTER TABLE stale ALTER COLUMN b TYPE varchar(10)`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "all")
	require.True(t, dbstate.StaleStatement(err), "%v", err)
	require.True(t, dbstate.Unavailable(err), "%v", err)

	// A function's row type grown under a call in flight.
	pid := conn.PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, `SELECT a FROM stale_rows()`, pgx.QueryExecModeSimpleProtocol)
		done <- err
	}()
	testsignal.WaitFor(t, 10*time.Second, func() bool {
		var sleeping bool
		require.NoError(t, other.QueryRow(ctx, `SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'`, pid).Scan(&sleeping))
		return sleeping
	}, "the call never reached its pg_sleep")
	_, err = other.Exec(ctx, `ALTER TABLE stale ADD COLUMN c int`)
	require.NoError(t, err)
	err = <-done
	require.False(t, dbstate.StaleStatement(err), "%v", err)
	require.True(t, dbstate.Unavailable(err), "%v", err)

	// Not every feature_not_supported is one.
	_, err = conn.Exec(ctx, `SELECT count(*) FROM stale FOR UPDATE`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "0A000", pgErr.Code)
	require.False(t, dbstate.Unavailable(err), "%v", err)
}
