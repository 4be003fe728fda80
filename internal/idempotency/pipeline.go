package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Pipelined transactions: the phase engine sends a transaction's
// statements in one exchange with the database, BEGIN and COMMIT included
// (internal/phases, pipeline.go). A statement queued for that exchange has
// no result anyone can look at before it is sent, so the checks that read a
// result (a fence's rows affected, a claim's "did I insert?") are made by
// the statements themselves, which fail with phasepay's own SQLSTATEs
// (migrations/00013). The failure aborts the transaction, rolling back
// everything in it, and TranslateError maps it back to ErrLeaseLost or
// ErrKeyExists wherever it surfaces.

// The SQLSTATEs of migrations/00013.
const (
	fenceSQLState     = "PPF01" // phasepay_fence: a fenced write matched no row
	keyExistsSQLState = "PPK01" // idempotency_keys_claim: the key exists
)

// ErrKeyExists: a claim found the key already claimed (QueueClaim). The
// caller answers from the key the claim read (QueuedClaim.Existing).
var ErrKeyExists = errors.New("idempotency key exists")

// TranslateError maps the errors of migrations/00013's checks to
// ErrLeaseLost and ErrKeyExists, keeping the database's error in the chain;
// any other error is returned as it is. The phase engine's pipelined
// transaction applies it to whatever an exchange reports.
func TranslateError(err error) error {
	var pg *pgconn.PgError
	if err == nil || !errors.As(err, &pg) {
		return err
	}
	switch {
	case pg.Code == fenceSQLState && !errors.Is(err, ErrLeaseLost):
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	case pg.Code == keyExistsSQLState && !errors.Is(err, ErrKeyExists):
		return fmt.Errorf("%w: %w", ErrKeyExists, err)
	}
	return err
}

// Queuer is a transaction that can hold a statement back until it sends
// the exchange its commit rides in (the phase engine's pipelined
// transaction, phases.Tx): Queue for a write, whose error surfaces at that
// exchange, and QueueRow for a statement whose one row is handed to scan
// then. scan sees pgx.ErrNoRows for a statement that returned no row, and
// the statement's own error if it failed; it is not called for a statement
// that never ran because one before it failed.
type Queuer interface {
	Queue(sql string, args ...any)
	QueueRow(sql string, args []any, scan func(pgx.Row) error)
}

// Execer runs a write: a plain transaction or connection (pgx.Tx, run at
// once), or a Queuer, whose write is queued instead (see write).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// write runs a fenced write on q: queued when q is a Queuer (the fence
// fails the statement, so its error surfaces at the exchange), at once
// otherwise.
func write(ctx context.Context, q Execer, sql string, args ...any) error {
	if qq, ok := q.(Queuer); ok {
		qq.Queue(sql, args...)
		return nil
	}
	_, err := q.Exec(ctx, sql, args...)
	return err
}

// claimFuncSQL is the claim of QueueClaim: idempotency_keys_claim
// (migrations/00013, 00016) holds the key's advisory lock like
// claimLockSQL, then finds (one probe of the heads for a new key) or
// inserts the key like claimSQL, and returns its row either way;
// which of the two it did it leaves in the setting phasepay.claim, read
// here once the function has returned its row (a plpgsql set-returning
// function runs to completion before its caller reads the first row).
const claimFuncSQL = `SELECT current_setting('phasepay.claim') = 'created', ` + recordColumns + `
  FROM idempotency_keys_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::uuid)`

// claimedSQL fails with PPK01 (ErrKeyExists) unless the claim before it
// created the key: queued between the claim and the first phase's writes,
// it rolls those back, with the claim, when the key exists.
const claimedSQL = `SELECT phasepay_claimed()`

// QueuedClaim is the answer of QueueClaim, filled in when the exchange that
// carries it is read.
type QueuedClaim struct {
	// Found and Existing: the key existed, as Existing (read after the
	// key's lock was granted, like Claim's).
	Found    bool
	Existing Record
	// Lease is the new key's lease. Until the exchange is read its Record
	// holds what the claim writes but not what the database decides
	// (CreatedAt, by its clock, is zero); it is complete once the claim
	// committed. Its token is the claim's, drawn before the claim is
	// sent: what releases the lease if the claim's answer is lost
	// (UnlockLostClaim).
	Lease *Lease
}

// QueueClaim queues, in q, the claim of a key and a check that it created
// the key, so that one exchange answers a new key and an existing one:
//
//   - a new key is inserted, and what the caller queues after (the first
//     phase's writes) commits with it;
//   - an existing key is read (QueuedClaim.Existing, for Decide), and the
//     check fails with ErrKeyExists, which rolls back the whole exchange:
//     nothing queued after it runs.
//
// The key's lookup is the claim's, after its lock: one read of the key
// whichever way it goes. q must run READ COMMITTED (the claim checks it).
func (s *Store) QueueClaim(q Queuer, p ClaimParams) *QueuedClaim {
	point := cmp.Or(p.Point, PointStart)
	c := &QueuedClaim{Lease: &Lease{store: s, token: newLeaseToken(), Record: Record{
		TenantID: p.TenantID, Key: p.Key, Request: p.Request, State: StateStarted, Point: point,
		LockVersion: 1, Leased: true, Due: true, ObjectID: p.ObjectID, TraceContext: p.TraceContext, Operation: p.Operation,
	}}}
	q.QueueRow(claimFuncSQL, []any{p.TenantID, p.Key, p.Request.Fingerprint[:], p.Request.Method, p.Request.Path,
		p.Request.Body, s.cfg.Lease.Microseconds(), p.TraceContext, string(point), p.ObjectID, p.Operation,
		s.holderColumn(), s.claimEntries(point), c.Lease.token},
		func(row pgx.Row) error {
			var created bool
			rec, err := scanRecord(row, &created)
			switch {
			case err != nil:
				return fmt.Errorf("claim %q: %w", p.Key, err)
			case created:
				c.Lease.Record = rec
			default:
				c.Existing, c.Found = rec, true
			}
			return nil
		})
	q.QueueRow(claimedSQL, nil, func(row pgx.Row) error {
		var ok bool
		if err := row.Scan(&ok); err != nil {
			return fmt.Errorf("claim %q: %w", p.Key, TranslateError(err))
		}
		return nil
	})
	return c
}

// fenced turns an UPDATE of one key, fenced by its WHERE clause, into a
// statement that fails with PPF01 (ErrLeaseLost) when the fence matched no
// row: a data-modifying CTE runs to completion whatever reads it, and the
// count of its rows is phasepay_fence's argument. what names the write in
// the error.
func fenced(update, what string) string {
	return `WITH fenced AS (` + update + `
RETURNING 1)
SELECT phasepay_fence((SELECT count(*) FROM fenced), '` + what + `')`
}

// fenceError is the error of a fenced write's Exec: ErrLeaseLost when the
// fence failed, the error itself otherwise.
func fenceError(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, TranslateError(err))...)
}
