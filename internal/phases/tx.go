package phases

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Tx is the transaction an arrow commits in (and the claim's Admit reads
// in): the engine's own, pipelined (pipeline.go), so that a transaction
// costs one exchange with the database plus one per read it cannot go on
// without. It says what each call does:
//
//   - Queue holds a write back until the exchange its commit rides in (or
//     the next read), and returns nothing: a write whose outcome matters
//     checks it in the statement itself (a fence, a constraint, a
//     CHECK), so that a failure aborts the transaction and surfaces from
//     the commit. What its arguments point to must not change before then.
//   - QueueRow is Queue for a statement whose one row is handed to scan
//     when its exchange is read.
//   - Query and QueryRow read now: what is queued goes out first, in the
//     same exchange.
//   - Exec runs a statement now and returns its real command tag: an
//     exchange of its own. Prefer Queue in an arrow.
//
// The engine fences, commits and rolls back; an arrow never does.
type Tx struct {
	p *pipeTx
}

var (
	_ idempotency.DBTX   = (*Tx)(nil)
	_ idempotency.Queuer = (*Tx)(nil)
)

// Queue queues a write; see Tx.
func (t *Tx) Queue(sql string, args ...any) { t.p.queue(sql, args, nil) }

// QueueRow queues a statement with one row; scan gets the row when the
// exchange that carries it is read (pgx.ErrNoRows when there is none). An
// error scan returns for a statement that succeeded aborts the transaction
// if it has not committed yet; once it has, the commit reports a
// *CallbackError (the transaction did commit).
func (t *Tx) QueueRow(sql string, args []any, scan func(pgx.Row) error) { t.p.queue(sql, args, scan) }

// Query sends what is queued and sql in one exchange and returns sql's rows.
func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.p.Query(ctx, sql, args...)
}

// QueryRow is Query for one row.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.p.QueryRow(ctx, sql, args...)
}

// Exec sends what is queued and sql in one exchange, and returns sql's
// command tag.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.p.exec(ctx, sql, args...)
}

// CallbackError: a transaction committed, but a queued row's scan failed
// on a row the database returned (a decoding error, say). What was written
// is written; what the scan was to fill in is not to be trusted.
type CallbackError struct{ Err error }

func (e *CallbackError) Error() string {
	return fmt.Sprintf("committed, but reading a queued statement's row failed: %v", e.Err)
}

func (e *CallbackError) Unwrap() error { return e.Err }

// Committed reports whether err says a transaction committed
// (a *CallbackError) even though reading part of its answer failed.
func Committed(err error) bool {
	_, ok := errors.AsType[*CallbackError](err)
	return ok
}
