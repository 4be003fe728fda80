package phases

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// onePool is a pool of one connection on a fresh database, so that every
// transaction of a test meets the same connection.
func onePool(t *testing.T, params string) *pgxpool.Pool {
	t.Helper()
	return testdb.Pool(t, testdb.NewURL(t)+params, time.Time{}, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
}

// readTenants is a pipelined transaction with a read (an explicit
// transaction) and a queued statement.
func readTenants(ctx context.Context, pool *pgxpool.Pool) error {
	return inPipeTx(ctx, pool, func(tx *Tx) error {
		tx.Queue(`SELECT count(*) FROM charges WHERE tenant_id = $1`, int64(1))
		var name *string
		return tx.QueryRow(ctx, `SELECT (SELECT name FROM tenants WHERE id > $1 LIMIT 1)`, int64(0)).Scan(&name)
	})
}

// Pitfall: the pipelined transaction remembered the statements it had
// prepared on a connection for the connection's life. Once the server
// forgot them (DISCARD ALL, DEALLOCATE) or found one's result type changed,
// every later transaction on that connection failed. Now the transaction
// that meets it fails with a retryable error and the next one prepares
// again.
func TestStatementsTheServerForgotArePreparedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, forget := range map[string]string{
		"discard all":    `DISCARD ALL`,
		"deallocate all": `DEALLOCATE ALL`,
		"type change":    `ALTER TABLE tenants ALTER COLUMN name TYPE varchar(200)`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := onePool(t, "")
			require.NoError(t, readTenants(ctx, pool))
			conn, err := pool.Acquire(ctx)
			require.NoError(t, err)
			_, err = conn.Conn().PgConn().Exec(ctx, forget).ReadAll()
			conn.Release()
			require.NoError(t, err)

			err = readTenants(ctx, pool)
			require.Error(t, err, "the server forgot or changed the statement")
			require.True(t, dbstate.Unavailable(err), "retryable: %v", err)
			for range 3 {
				require.NoError(t, readTenants(ctx, pool), "the next transactions on the connection")
			}
		})
	}
}

// The pipelined transaction prepared named statements whatever exec mode
// the connection was configured with (default_query_exec_mode). Behind a
// transaction pooler, each transaction gets a server connection that never
// saw them, and every one failed. In any mode but cache_statement it now
// prepares none.
func TestPipelineHonoursExecMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool := onePool(t, "&default_query_exec_mode="+mode)
			require.NoError(t, readTenants(ctx, pool))
			// Replayed: a failed implicit transaction, then a good one.
			err := inPipeTx(ctx, pool, func(tx *Tx) error {
				tx.Queue(`SELECT phasepay_fence(0, $1)`, "test")
				return nil
			})
			require.Error(t, err)
			require.NoError(t, readTenants(ctx, pool))

			var named int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements`,
				pgx.QueryExecModeSimpleProtocol).Scan(&named))
			if mode == "cache_statement" {
				require.Positive(t, named)
			} else {
				require.Zero(t, named, "named prepared statements in mode %s", mode)
			}
		})
	}
}
