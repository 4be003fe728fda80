package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// peekColumns are what a peek reads of a key: only what Decide and its
// answers without a claim need (the fingerprint, the state and the lease,
// the schedule, the object and the stored response), and the day it was
// created, which the caller remembers to read that day's partition next
// time (PeekDay). It is the read of a probable retry (phases' key hints),
// most of them replays, whose cost is this statement and its scan:
// lookupSQL's every column (the request body, the trace context, the last
// error…) cost the api a tenth of its CPU per replay in a profile, for
// values no replay uses.
const peekColumns = `fingerprint, state, coalesce(locked_until > phasepay_now(), false),
       coalesce(next_attempt_at <= phasepay_now(), true),
       greatest(0, ceil(extract(epoch FROM next_attempt_at - phasepay_now())))::int,
       coalesce(object_id, ''), response_status, response_content_type, response_body, created_at`

// peekSQL reads the key through its heads, as lookupSQL: the newest row
// of the key, wherever it is.
const peekSQL = `SELECT ` + peekColumns + `
  FROM idempotency_keys_newest($1, $2)`

// peekDaySQL reads the key in one day partition (%s: its name, quoted), by
// its primary key's prefix: for the server a plain primary-key SELECT on
// one table, where newest() is a plpgsql call (SPI, the heads probe, then
// the row through a tuplestore) costing about 2.6 times as much CPU.
//
// The EXISTS keeps it to a partition that is attached, not being detached:
// a table that retention has detached but not dropped yet (DETACH …
// CONCURRENTLY, then DROP TABLE, in two statements; a pass that dies
// between them leaves the table until the next), or is detaching
// (inhdetachpending), still holds its rows under its name, but claims no
// longer see them (see PeekDay). It is checked only when the row is found
// (a subplan per row), read in the same snapshot as the row.
const peekDaySQL = `SELECT ` + peekColumns + `
  FROM %s k
 WHERE tenant_id = $1 AND key = $2
   AND EXISTS (SELECT FROM pg_inherits i
                WHERE i.inhrelid = k.tableoid AND i.inhparent = 'idempotency_keys'::regclass
                  AND NOT i.inhdetachpending)`

// undefinedTable is the SQLSTATE of a statement naming a table that does
// not exist: a day partition that retention dropped, or never had (its
// keys in an operator's DEFAULT partition).
const undefinedTable = "42P01"

// Peek reads what Decide needs of a key, and what a Mismatch, a Replay, a
// NotDue or an Unresolved answers with. It returns ErrNotFound if there is
// none.
//
// The record is partial: of its request only the fingerprint is set, and
// Point, LockVersion, Attempts, NextAttemptAt, LastError and TraceContext
// are zero (CreatedAt is set). Any other decision needs the whole record
// (a claim, or Lookup); TakeOver refuses a peeked one.
func (s *Store) Peek(ctx context.Context, q DBTX, tenantID int64, key string) (Record, error) {
	rec, err := scanPeek(q.QueryRow(ctx, peekSQL, tenantID, key), tenantID, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("peek at %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("peek at %q: %w", key, err)
	}
	return rec, nil
}

// PeekDay is Peek for a key the caller believes was created on day (its
// UTC day; the zero time: unknown, which is Peek): it reads that day's
// partition first, and answers from there if the key's row is in it
// (fromDay). Otherwise — the partition does not exist (dropped by
// retention: SQLSTATE 42P01), is not attached, or does not hold the key —
// it answers Peek's read, so a wrong or stale day costs one more read,
// never another answer. q must not be a transaction: a read of a dropped
// partition fails its statement, which would abort the transaction (in one,
// PeekDay is Peek).
//
// The row found in the day's attached partition is the key's newest, as
// Peek would answer. The claim (idempotency_keys_claim, migrations/00016)
// inserts a row for a key only when it has no head, or when its newest
// head's row is not found through idempotency_keys, under the key's
// advisory lock and in statements that start after the lock was granted.
// A head is inserted with its row (the AFTER INSERT trigger), so while the
// row is in an attached partition the newest head finds it, and no newer
// row can be created: every claim of the key finds this one. A newer row
// can exist only if the day's partition stopped being attached before
// that claim (retention's DETACH), and then the partition read answers
// nothing. This relies on the race of two claims both inserting a row
// being closed (the advisory lock, the lookup after it; pitfall 1
// "SELECT-then-INSERT"), and on the detached table not being read: between
// retention's DETACH and its DROP a claim no longer finds the old row and
// may create a new one, while the old row can still be read under the
// partition's name. peekDaySQL's
// EXISTS on pg_inherits closes that one, in the snapshot of the read: a
// claim that missed the old row started after the detach (or its pending
// mark) committed, so a read that sees the newer row sees the detach too.
func (s *Store) PeekDay(ctx context.Context, q DBTX, tenantID int64, key string, day time.Time) (rec Record, fromDay bool, err error) {
	if _, inTx := q.(pgx.Tx); day.IsZero() || inTx {
		rec, err := s.Peek(ctx, q, tenantID, key)
		return rec, false, err
	}
	sql := fmt.Sprintf(peekDaySQL, pgx.Identifier{DayPartition(day)}.Sanitize())
	rec, err = scanPeek(q.QueryRow(ctx, sql, tenantID, key), tenantID, key)
	var pg *pgconn.PgError
	switch {
	case err == nil:
		return rec, true, nil
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pg) && pg.Code == undefinedTable:
		rec, err := s.Peek(ctx, q, tenantID, key)
		return rec, false, err
	default:
		return Record{}, false, fmt.Errorf("peek at %q in %s: %w", key, DayPartition(day), err)
	}
}

func scanPeek(row pgx.Row, tenantID int64, key string) (Record, error) {
	rec := Record{TenantID: tenantID, Key: key, partial: true}
	var (
		fp          []byte
		status      *int32
		contentType *string
		body        []byte
	)
	err := row.Scan(&fp, &rec.State, &rec.Leased, &rec.Due, &rec.RetryAfter, &rec.ObjectID,
		&status, &contentType, &body, &rec.CreatedAt)
	if err != nil {
		return Record{}, err
	}
	copy(rec.Request.Fingerprint[:], fp)
	if status != nil {
		rec.Response = &Response{Status: int(*status), ContentType: *contentType, Body: body}
	}
	return rec, nil
}
