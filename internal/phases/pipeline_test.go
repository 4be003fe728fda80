package phases

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// A pipelined transaction commits all of its statements or none, whether
// sent as one implicit transaction or opened by a read. A failed fence
// anywhere in it is ErrLeaseLost, and the connection goes back idle.
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
			err := inPipeTx(ctx, pool, func(tx *Tx) error {
				tx.Queue(insertSQL, tc.name+"/1")
				if tc.read {
					var one int
					require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&one))
					require.True(t, tx.p.open)
				}
				if tc.fail {
					tx.Queue(failSQL) // queued: the error comes with the exchange
				}
				tx.Queue(insertSQL, tc.name+"/2")
				return nil
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
	err := inPipeTx(ctx, pool, func(tx *Tx) error {
		tx.Queue(`INSERT INTO tenants (name) VALUES ('aborted')`)
		tx.Queue(`SELECT phasepay_fence(0, 'test')`)
		var one int
		err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one)
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

// A queued row's reader that fails after the statement succeeded made the
// commit report failure, though the transaction had committed. A caller
// told "failed" retries what is already written.
//
// Once the exchange that committed was read, Commit now says it committed
// (a *CallbackError). Before the commit, the same failure aborts the
// transaction, so nothing relies on what could not be read.
func TestCommittedTransactionIsReportedCommittedWhenAReaderFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	readerFails := errors.New("the reader's own mistake")
	count := func(name string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE name = $1`, name).Scan(&n))
		return n
	}
	for _, tc := range []struct {
		name          string
		open          bool // a read first: the commit rides with a COMMIT of its own
		readAfter     bool // a read after the failing reader, before the commit
		wantCommitted bool
	}{
		{"implicit", false, false, true},
		{"explicit", true, false, true},
		{"read-after", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := inPipeTx(ctx, pool, func(tx *Tx) error {
				if tc.open {
					var one int
					require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&one))
				}
				tx.QueueRow(`INSERT INTO tenants (name) VALUES ($1) RETURNING id`, []any{"cb-" + tc.name},
					func(row pgx.Row) error {
						var id int64
						require.NoError(t, row.Scan(&id))
						return readerFails
					})
				if tc.readAfter {
					var one int
					require.ErrorIs(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&one), readerFails)
				}
				return nil
			})
			require.ErrorIs(t, err, readerFails)
			require.Equal(t, tc.wantCommitted, Committed(err))
			want := 0
			if tc.wantCommitted {
				want = 1
			}
			require.Equal(t, want, count("cb-"+tc.name))
		})
	}
}

// Exec on the engine's transaction runs its statement now and returns the
// real command tag: a RowsAffected check reads what the database did, never
// a silent zero.
func TestExecReturnsItsRealCommandTag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	err := inPipeTx(ctx, pool, func(tx *Tx) error {
		tx.Queue(`INSERT INTO tenants (name) VALUES ('tag-1'), ('tag-2')`)
		tag, err := tx.Exec(ctx, `UPDATE tenants SET name = name || '!' WHERE name LIKE 'tag-%'`)
		require.NoError(t, err)
		require.EqualValues(t, 2, tag.RowsAffected())
		return nil
	})
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE name LIKE 'tag-%!'`).Scan(&n))
	require.Equal(t, 2, n)
}

// A queued statement writes its arguments as they were when it was queued.
// A phase that changes a pointer, slice, map or bytes after queueing the
// write does not change what is written.
func TestQueuedArgumentsAreCopiedWhenQueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := pool.Exec(ctx, `CREATE TABLE queued (s text, m jsonb, b bytea, l text[])`)
	require.NoError(t, err)
	s, m, b, l := "queued", map[string]string{"k": "queued"}, []byte("queued"), []string{"queued"}
	require.NoError(t, inPipeTx(ctx, pool, func(tx *Tx) error {
		tx.Queue(`INSERT INTO queued VALUES ($1, $2, $3, $4)`, &s, m, b, l)
		s, m["k"], b[0], l[0] = "changed", "changed", 'X', "changed"
		return nil
	}))
	var got [4]string
	require.NoError(t, pool.QueryRow(ctx, `SELECT s, m->>'k', convert_from(b, 'UTF8'), l[1] FROM queued`).
		Scan(&got[0], &got[1], &got[2], &got[3]))
	require.Equal(t, [4]string{"queued", "queued", "queued", "queued"}, got)
}
