package pgbouncer_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// The pooler forwards a test database in transaction mode: each
// transaction (or statement outside one) of a client runs on whichever
// server connection is free, so a statement prepared by name in one is
// unknown in the next once another client holds the first server
// connection: the pitfall DATABASE_POOLER=transaction avoids.
func TestPoolerRunsInTransactionMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	b := pgbouncer.ForTest(t, pgbouncer.Config{Server: dbURL, PoolSize: 2})
	url := b.URL(dbURL)
	require.NotEqual(t, dbURL, url)

	a, err := pgx.Connect(ctx, url+"&default_query_exec_mode=exec")
	require.NoError(t, err)
	defer a.Close(ctx)
	var n int
	require.NoError(t, a.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE id > $1`, 0).Scan(&n))

	// a prepares a statement on the one server connection there is; h
	// then holds that connection in a transaction, so a's next statement
	// goes to a new server connection, which never saw it.
	_, err = a.Prepare(ctx, "mine", `SELECT 1`)
	require.NoError(t, err)
	h, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer h.Close(ctx)
	tx, err := h.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	_, err = a.Exec(ctx, "mine")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "26000", pgErr.Code, "prepared statement does not exist: %v", err)
	require.NoError(t, tx.Rollback(ctx))

	rows, err := b.Exec(ctx, "postgres", "SHOW DATABASES")
	require.NoError(t, err)
	require.NotEmpty(t, rows)
}
