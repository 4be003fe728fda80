package phases

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// pipeTx is the transaction behind Tx. It holds statements back and sends
// them together, BEGIN and COMMIT included.
//
// Run the plain way, a transaction costs an exchange per statement, plus
// one for BEGIN and one for COMMIT. A new charge used to cost about ten.
// A pipeTx costs one exchange per result it needs before it can go on,
// plus one:
//
//   - queue holds a statement back. Its error surfaces at the next
//     exchange, so a check that matters is made by the statement itself
//     (the fences of idempotency.Lease).
//   - Query, QueryRow and exec need their answer now. They send what is
//     queued and their own statement in one exchange, after a BEGIN if
//     none went out yet.
//   - Commit sends what is left and the COMMIT in one exchange.
//
// A transaction that read nothing sends no BEGIN and no COMMIT at all. Its
// statements go out as one pipeline closed by one Sync, which PostgreSQL
// runs as one implicit transaction. It commits or rolls back whole, and
// leaves the connection idle either way. This is what makes a replay cost one
// round trip. Its claim fails because the key exists, and the lookup read
// before the failure holds the answer.
//
// A statement's failure aborts the transaction. A callback's failure is
// the reader's own mistake about a statement that succeeded. Once the
// exchange that committed was read, Commit reports it as a *CallbackError,
// never as a failure to commit.
type pipeTx struct {
	// pool gives conn at the first exchange (acquire), so that a
	// transaction whose statements go out in a batch of many requests
	// never takes a connection of its own (batch.go).
	pool    *pgxpool.Pool
	conn    *pgxpool.Conn
	pending []queued
	// open says a BEGIN went out, so the transaction ends with a COMMIT or
	// a ROLLBACK of its own.
	open bool
	// With autocommit no BEGIN ever goes out, and each exchange is a
	// transaction of its own (inReadTx).
	autocommit bool
	// err is the first error an exchange reported. The transaction is
	// aborted, and only Rollback is left.
	err    error
	closed bool
}

type queued struct {
	sql  string
	args []any
	scan func(pgx.Row) error // nil for a write
}

var _ idempotency.Queuer = (*Tx)(nil)

// inPipeTx runs fn in a pipelined transaction on a connection of pool. It
// commits if fn returns nil, and rolls back otherwise (like pgx.BeginFunc).
func inPipeTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx *Tx) error) error {
	tx := &Tx{p: &pipeTx{pool: pool}}
	defer tx.p.release()
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.p.Rollback(ctx))
	}
	return tx.p.Commit(ctx)
}

// inReadTx runs fn on a connection of pool outside any transaction. Each
// of its reads is an exchange of its own, as on the pool itself.
func inReadTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx *Tx) error) error {
	tx := &Tx{p: &pipeTx{pool: pool, autocommit: true}}
	defer tx.p.release()
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.p.Rollback(ctx))
	}
	return tx.p.Commit(ctx)
}

// notSentError is a transaction's failure to get a connection: nothing of
// it was sent.
type notSentError struct{ err error }

func (e notSentError) Error() string { return e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

// nothingSent reports whether err says a transaction failed before any of
// it went out, for want of a connection.
func nothingSent(err error) bool {
	_, ok := errors.AsType[notSentError](err)
	return ok
}

// acquire takes the transaction's connection, at its first exchange.
func (t *pipeTx) acquire(ctx context.Context) error {
	if t.conn != nil {
		return nil
	}
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return notSentError{err}
	}
	t.conn = conn
	return nil
}

// release gives the connection back, if one was taken. The pool destroys
// a connection left inside a transaction (a lost exchange, say) rather
// than reuse it.
func (t *pipeTx) release() {
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
}

// queue holds sql back until the next exchange. scan, if set, gets its
// row. The arguments are copied now (freeze), so what they point to may
// change before the exchange.
func (t *pipeTx) queue(sql string, args []any, scan func(pgx.Row) error) {
	if t.usable() == nil {
		t.pending = append(t.pending, queued{sql: sql, args: freeze(args), scan: scan})
	}
}

func (t *pipeTx) usable() error {
	switch {
	case t.closed:
		return pgx.ErrTxClosed
	case t.err != nil:
		return fmt.Errorf("transaction aborted: %w", t.err)
	}
	return nil
}

// send sends what is queued, then tail, in one exchange, and reads the
// queued statements' results. The caller reads tail's and closes them.
//
// A BEGIN goes first unless the exchange is implicit (Commit's only one)
// or one went out already. The cbErr it returns is the first error of a
// queued row's callback for a statement that succeeded. The exchange goes
// on regardless, a COMMIT in tail still commits, and the caller decides
// what the callback's failure means.
func (t *pipeTx) send(ctx context.Context, tail []queued, implicit bool) (_ pgx.BatchResults, cbErr error, err error) {
	if err := t.acquire(ctx); err != nil {
		t.pending = nil
		t.err = err
		return nil, nil, err
	}
	b := &pgx.Batch{}
	begin := !implicit && !t.open && !t.autocommit
	if begin {
		b.Queue(beginSQL)
	}
	for _, q := range t.pending {
		b.Queue(q.sql, q.args...)
	}
	for _, q := range tail {
		b.Queue(q.sql, q.args...)
	}
	if err := t.prepare(ctx, b); err != nil {
		t.pending = nil
		t.err = err
		return nil, nil, err
	}
	pending := t.pending
	t.pending = nil
	results := t.conn.SendBatch(ctx, b)
	if begin {
		t.open = true
		if _, err := results.Exec(); err != nil {
			return nil, nil, t.fail(results, err)
		}
	}
	for _, q := range pending {
		if q.scan == nil {
			if _, err := results.Exec(); err != nil {
				return nil, nil, t.fail(results, err)
			}
			continue
		}
		stmtErr, err := readRow(results, q.scan)
		if stmtErr != nil {
			return nil, nil, t.fail(results, stmtErr)
		}
		if err != nil && cbErr == nil {
			cbErr = err
		}
	}
	return results, cbErr, nil
}

// readRow hands a queued statement's row to scan. It tells the statement's
// own failure (stmtErr) from scan's (cbErr), a row that did not decode or
// a check of the reader's. The scan sees the statement's error too, as
// pgx's QueryRow would show it.
func readRow(results pgx.BatchResults, scan func(pgx.Row) error) (stmtErr, cbErr error) {
	rows, err := results.Query()
	if err != nil {
		return translated(err, scan(errRow{err})), nil
	}
	cbErr = scan(&queuedRow{rows: rows})
	rows.Close()
	if err := rows.Err(); err != nil {
		return translated(err, cbErr), nil
	}
	return nil, cbErr
}

// translated is a failed statement's error, as scan reported it if scan
// translated it the way a storage edge does. Charges turns a derived id
// an earlier incarnation holds into ErrObjectIDTaken, say.
func translated(stmtErr, cbErr error) error {
	if cbErr != nil && errors.Is(cbErr, stmtErr) {
		return cbErr
	}
	return stmtErr
}

// errRow is the row of a statement that failed before any row.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// queuedRow is pgx's Row over a queued statement's rows.
type queuedRow struct{ rows pgx.Rows }

func (r *queuedRow) Scan(dest ...any) error {
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	return r.rows.Scan(dest...)
}

// prepare makes every statement of b a prepared statement of the
// connection's own, named by its SQL. That costs an exchange the first
// time a connection sees a statement, and nothing after.
//
// It does so only in pgx's default exec mode (cache_statement). Any other
// mode is set by default_query_exec_mode in DATABASE_URL, or by dbpool
// behind a transaction pooler. Then it prepares nothing, and pgx sends the
// batch as it sends every other query.
//
// Why not pgx's statement cache? A batch that fails invalidates its
// statements in the cache, and the next use of each costs an exchange to
// deallocate and one to prepare again. A pipelined transaction fails as a
// matter of course (a replay's claim, a lost fence), so every replay would
// cost three exchanges instead of one. Statements prepared by name are not
// touched by that invalidation, and a pipeTx only sends constants, so the
// set a connection prepares is bounded.
//
// What a connection has prepared is remembered here. pgx's Prepare knows
// too, but traces every call (a span each, with otelpgx).
//
// The server may forget a statement behind the client's back (DEALLOCATE,
// DISCARD ALL: a pooler's reset query), or find its result type changed.
// The exchange that meets it fails with a retryable error
// (dbstate.StaleStatement, a 503), and note marks the connection's
// statements stale. The connection's next transaction then forgets every
// statement (DEALLOCATE ALL) and prepares them again.
func (t *pipeTx) prepare(ctx context.Context, b *pgx.Batch) error {
	conn := t.conn.Conn()
	if conn.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return nil
	}
	st := statementsOn(conn)
	if st.stale && conn.PgConn().TxStatus() == 'I' {
		if err := conn.DeallocateAll(ctx); err != nil {
			return fmt.Errorf("forget stale prepared statements: %w", err)
		}
		clear(st.names)
		st.stale = false
	}
	for _, q := range b.QueuedQueries {
		if _, ok := st.names[q.SQL]; ok {
			continue
		}
		if _, err := conn.Prepare(ctx, q.SQL, q.SQL); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		st.names[q.SQL] = struct{}{}
	}
	return nil
}

// note marks the connection's prepared statements stale if err says the
// server no longer has one of them (see prepare). It returns err.
func (t *pipeTx) note(err error) error {
	if t.conn != nil && dbstate.StaleStatement(err) {
		statementsOn(t.conn.Conn()).stale = true
	}
	return err
}

// statements is what prepare knows of one connection's prepared
// statements. It holds their SQL, and whether the server lost or changed
// one since.
type statements struct {
	names map[string]struct{}
	stale bool
}

// prepared maps a connection, weakly, to its statements. Only the holder
// of a connection touches its statements, one goroutine at a time. The
// entry goes when the connection is garbage collected.
var prepared sync.Map // weak.Pointer[pgx.Conn] → *statements

func statementsOn(conn *pgx.Conn) *statements {
	key := weak.Make(conn)
	if v, ok := prepared.Load(key); ok {
		return v.(*statements)
	}
	st := &statements{names: map[string]struct{}{}}
	prepared.Store(key, st)
	runtime.AddCleanup(conn, func(k weak.Pointer[pgx.Conn]) { prepared.Delete(k) }, key)
	return st
}

// The transaction control statements of an explicit pipelined transaction.
const (
	beginSQL    = "BEGIN"
	commitSQL   = "COMMIT"
	rollbackSQL = "ROLLBACK"
)

// fail closes results and records err as the transaction's.
func (t *pipeTx) fail(results pgx.BatchResults, err error) error {
	_ = results.Close() // the first error is err; the rest were skipped by the server
	t.err = idempotency.TranslateError(t.note(err))
	return t.err
}

// Query sends what is queued and sql in one exchange.
func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	results, err := t.sendOpen(ctx, queued{sql: sql, args: args})
	if err != nil {
		return nil, err
	}
	rows, err := results.Query()
	if err != nil {
		return nil, t.fail(results, err)
	}
	return &pipeRows{Rows: rows, results: results, tx: t}, nil
}

// QueryRow is Query for one row.
func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &pipeRow{rows: rows, err: err}
}

// exec sends what is queued and sql in one exchange, and returns sql's
// command tag.
func (t *pipeTx) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.usable(); err != nil {
		return pgconn.CommandTag{}, err
	}
	results, err := t.sendOpen(ctx, queued{sql: sql, args: args})
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := results.Exec()
	if err != nil {
		return pgconn.CommandTag{}, t.fail(results, err)
	}
	if err := results.Close(); err != nil {
		t.err = idempotency.TranslateError(t.note(err))
		return pgconn.CommandTag{}, t.err
	}
	return tag, nil
}

// sendOpen sends what is queued and one statement of an open transaction
// (Query, exec).
//
// A queued row's callback that failed aborts the transaction, which has not
// committed. Nothing after it may rely on what the callback was to read.
func (t *pipeTx) sendOpen(ctx context.Context, stmt queued) (pgx.BatchResults, error) {
	results, cbErr, err := t.send(ctx, []queued{stmt}, false)
	if err != nil {
		return nil, err
	}
	if cbErr != nil {
		_ = results.Close()
		t.err = cbErr
		return nil, cbErr
	}
	return results, nil
}

// Commit sends what is queued and the commit in one exchange (see pipeTx).
// It returns nil or a *CallbackError when the transaction committed, any
// other error when it did not.
func (t *pipeTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	if t.err != nil {
		return errors.Join(t.err, t.Rollback(ctx))
	}
	if !t.open {
		t.closed = true
		if len(t.pending) == 0 {
			return nil
		}
		results, cbErr, err := t.send(ctx, nil, true)
		if err != nil {
			return err
		}
		if err := idempotency.TranslateError(t.note(results.Close())); err != nil {
			return err
		}
		return committed(cbErr)
	}
	results, cbErr, err := t.send(ctx, []queued{{sql: commitSQL}}, false)
	if err != nil {
		return errors.Join(err, t.Rollback(ctx))
	}
	tag, err := results.Exec()
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	t.closed = true
	if err != nil {
		return idempotency.TranslateError(t.note(err))
	}
	if tag.String() == "ROLLBACK" {
		// The server refused to commit a transaction a statement
		// failed in, after that statement's results were read.
		return pgx.ErrTxCommitRollback
	}
	return committed(cbErr)
}

// committed is what Commit says of a transaction that committed. That is
// nil, or the callback's failure as a *CallbackError.
func committed(cbErr error) error {
	if cbErr == nil {
		return nil
	}
	return &CallbackError{Err: cbErr}
}

// Rollback ends the transaction without committing. It costs an exchange
// only if a BEGIN went out.
func (t *pipeTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed, t.pending = true, nil
	if !t.open || t.conn == nil || t.conn.Conn().PgConn().IsClosed() || t.conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	_, err := t.conn.Exec(ctx, rollbackSQL)
	return err
}
