package maintenance

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrLockTaken: behind a transaction pooler, a transaction of the chore
// found the chore's lock held by another process, which took the chore
// over between two of this run's transactions. The run ends there.
var ErrLockTaken = errors.New("maintenance lock taken by another process")

// Conn is what a chore runs its statements on: the connection that holds
// the chore's lock, so that the lock and the work share fate (see the
// package comment). It is a pgx connection's Exec, Query, QueryRow and
// Begin (what partition maintenance takes: idempotency.Beginner,
// events.Beginner).
//
// Without a pooler it is one session, which holds the lock. Behind a
// transaction pooler it is the pool, and each statement or transaction
// takes the lock in its own transaction: a statement run alone, a read
// included, runs in a transaction of its own; a query's transaction ends
// when its rows are closed.
type Conn struct {
	conn *pgx.Conn // the session that holds the lock; nil behind a pooler

	pool   *pgxpool.Pool // behind a pooler
	lockID int64
}

var _ interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
} = (*Conn)(nil)

// TransactionsOnly reports that every statement runs in a transaction
// (behind a pooler): a statement that cannot run in one (DETACH …
// CONCURRENTLY) fails here, and the chore must do without it.
func (c *Conn) TransactionsOnly() bool { return c.conn == nil }

// xactLockSQL takes the chore's lock for the transaction, if no one holds
// it.
const xactLockSQL = `SELECT pg_try_advisory_xact_lock($1)`

// Begin starts a transaction; behind a pooler, one that holds the lock
// (ErrLockTaken when another process does).
func (c *Conn) Begin(ctx context.Context) (pgx.Tx, error) {
	if c.conn != nil {
		return c.conn.Begin(ctx)
	}
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	var locked bool
	if err := tx.QueryRow(ctx, xactLockSQL, c.lockID).Scan(&locked); err != nil || !locked {
		_ = tx.Rollback(ctx)
		if err == nil {
			err = ErrLockTaken
		}
		return nil, err
	}
	return tx, nil
}

// Exec runs a statement: behind a pooler, in a transaction of its own that
// holds the lock.
func (c *Conn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if c.conn != nil {
		return c.conn.Exec(ctx, sql, args...)
	}
	var tag pgconn.CommandTag
	err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		var err error
		tag, err = tx.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// Query runs a query: behind a pooler, in a transaction of its own that
// holds the lock, committed when the rows are closed.
func (c *Conn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if c.conn != nil {
		return c.conn.Query(ctx, sql, args...)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return &txRows{Rows: rows, ctx: ctx, tx: tx}, nil
}

// QueryRow is Query for one row.
func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if c.conn != nil {
		return c.conn.QueryRow(ctx, sql, args...)
	}
	return &txRow{c: c, ctx: ctx, sql: sql, args: args}
}

// txRows are a query's rows whose Close ends their transaction.
type txRows struct {
	pgx.Rows
	ctx  context.Context
	tx   pgx.Tx
	done bool
	err  error
}

func (r *txRows) Close() {
	r.Rows.Close()
	if r.done {
		return
	}
	r.done = true
	if err := r.Rows.Err(); err != nil {
		r.err = errors.Join(err, r.tx.Rollback(r.ctx))
		return
	}
	if err := r.tx.Commit(r.ctx); err != nil {
		r.err = fmt.Errorf("commit: %w", err)
	}
}

func (r *txRows) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.Rows.Err()
}

func (r *txRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

// txRow runs its query, in a transaction that holds the lock, when it is
// scanned.
type txRow struct {
	c    *Conn
	ctx  context.Context
	sql  string
	args []any
}

func (r *txRow) Scan(dest ...any) error {
	return pgx.BeginFunc(r.ctx, r.c, func(tx pgx.Tx) error { return tx.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...) })
}
