package phases

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Tx is the transaction a phase commits in, and the one Admit and Load
// read in.
//
// It is pipelined (pipeline.go). A transaction costs one exchange with the
// database, plus one per read it cannot go on without. Each call says what
// it does:
//
//   - Queue holds a write back until the commit's exchange or the next
//     read, and copies its arguments now. A write whose outcome matters
//     checks it in the statement itself (a fence, a constraint), so that
//     its failure aborts the transaction and surfaces from the commit.
//   - QueueRow is Queue for a statement whose one row goes to scan.
//   - Query and QueryRow read now, sending what is queued first.
//   - Exec runs a statement now and returns its real command tag.
//
// The engine fences, commits and rolls back. A phase never does.
type Tx struct {
	p *pipeTx
}

var (
	_ idempotency.DBTX   = (*Tx)(nil)
	_ idempotency.Queuer = (*Tx)(nil)
)

// Queue queues a write. See Tx.
func (t *Tx) Queue(sql string, args ...any) { t.p.queue(sql, args, nil) }

// QueueRow queues a statement with one row, handed to scan when its
// exchange is read (pgx.ErrNoRows when there is none).
//
// An error scan returns for a statement that succeeded aborts the
// transaction if it has not committed yet. Once it has, the commit reports
// a *CallbackError.
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
// command tag. Prefer Queue in a phase, since Exec costs an exchange.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.p.exec(ctx, sql, args...)
}

// CallbackError is a transaction that committed although a queued row's
// scan failed on a row the database returned (a decoding error, say).
// What was written is written. What the scan was to fill in is not to be
// trusted.
type CallbackError struct{ Err error }

func (e *CallbackError) Error() string {
	return fmt.Sprintf("committed, but reading a queued statement's row failed: %v", e.Err)
}

func (e *CallbackError) Unwrap() error { return e.Err }

// Committed reports whether err says a transaction committed even though
// reading part of its answer failed (a *CallbackError).
func Committed(err error) bool {
	_, ok := errors.AsType[*CallbackError](err)
	return ok
}
