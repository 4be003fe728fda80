package phases

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/harness/testdb"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// A pipelined transaction commits all of its statements or none, whether
// it was sent as one implicit transaction (nothing read before the commit)
// or opened by a read; a failed fence anywhere in it is ErrLeaseLost, and
// the connection goes back to the pool idle.
func TestPipelinedTransactionCommitsAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	const (
		insertSQL = `INSERT INTO tenants (name) VALUES ($1)`
		failSQL   = `SELECT phasepay_fence(0, 'test')`
	)
	count := func(name string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE name LIKE $1 || '/%'`, name).Scan(&n))
		return n
	}
	for _, tc := range []struct {
		name     string
		read     bool // a read before the fence: the transaction is opened by a BEGIN
		fail     bool
		wantRows int
	}{
		{"implicit-ok", false, false, 2},
		{"implicit-fenced", false, true, 0},
		{"explicit-ok", true, false, 2},
		{"explicit-fenced", true, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := inPipeTx(ctx, pool, func(tx *pipeTx) error {
				_, err := tx.Exec(ctx, insertSQL, tc.name+"/1")
				require.NoError(t, err)
				if tc.read {
					var one int
					require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&one))
					require.True(t, tx.open)
				}
				if tc.fail {
					_, err = tx.Exec(ctx, failSQL)
					require.NoError(t, err) // queued: the error comes with the exchange
				}
				_, err = tx.Exec(ctx, insertSQL, tc.name+"/2")
				return err
			})
			if tc.fail {
				require.ErrorIs(t, err, idempotency.ErrLeaseLost)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantRows, count(tc.name))
			conn, err := pool.Acquire(ctx)
			require.NoError(t, err)
			defer conn.Release()
			require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus())
		})
	}
}

// A read after a failed statement reports the failure; the transaction is
// then aborted, and its commit fails rather than committing what came
// before.
func TestPipelinedTransactionAbortsAfterAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	err := inPipeTx(ctx, pool, func(tx *pipeTx) error {
		_, err := tx.Exec(ctx, `INSERT INTO tenants (name) VALUES ('aborted')`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT phasepay_fence(0, 'test')`)
		require.NoError(t, err)
		var one int
		err = tx.QueryRow(ctx, `SELECT 1`).Scan(&one)
		require.ErrorIs(t, err, idempotency.ErrLeaseLost)
		_, err = tx.Exec(ctx, `SELECT 1`)
		require.ErrorIs(t, err, idempotency.ErrLeaseLost)
		return nil // commit anyway: it must not
	})
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE name = 'aborted'`).Scan(&n))
	require.Zero(t, n)
	require.NotErrorIs(t, err, pgx.ErrTxClosed)
}
