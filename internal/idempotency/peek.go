package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// peekColumns are what a peek reads of a key: only what Decide and its
// answers without a claim need (the fingerprint, the state and the lease,
// the schedule, the object and the stored response), and the day it was
// created, which the caller remembers to read that day's partition next
// time (PeekDay). It is the read of a probable retry (phases' key hints),
// most of them replays, whose cost is this statement and its scan:
// lookupSQL's every column (the request body, the trace context, the last
// error…) cost the api a tenth of its CPU per replay in a profile, for
// values no replay uses. The key itself is read too: peekDaySQL orders by
// it, and a column it orders by but does not return costs every execution
// a junk filter, more than the column (12 k instructions of 116 k).
const peekColumns = `key, fingerprint, state, coalesce(locked_until > phasepay_now(), false),
       coalesce(next_attempt_at <= phasepay_now(), true),
       greatest(0, ceil(extract(epoch FROM next_attempt_at - phasepay_now())))::int,
       coalesce(object_id, ''), response_status, response_content_type, response_body, created_at`

// peekSQL reads the key through its heads, as lookupSQL: the newest row
// of the key, wherever it is.
const peekSQL = `SELECT ` + peekColumns + `
  FROM idempotency_keys_newest($1, $2)`

// peekDaySQL reads the key in one day (%[1]s and %[2]s: the day's bounds,
// as literals), by its primary key through idempotency_keys: for the
// server a primary-key SELECT on the day's partition, where newest() is a
// plpgsql call (SPI, the heads probe, then the row through a tuplestore)
// costing about 2.6 times as much CPU.
//
// The bounds are literals so that the planner prunes to the day's
// partition when it plans: the generic plan each connection keeps
// (pitfall Q5 "A plan per execution, or one plan for every value") is one
// index probe of one table, one statement per day. Bound as parameters,
// the pruning would wait for each execution, whose start-up would lock
// and prune every partition. And read through the parent, the key is read
// only where claims look for it: a partition that retention has detached
// (and not dropped yet), or is detaching, is no longer scanned through
// idempotency_keys, and a DETACH or DROP invalidates the plans that named
// it (see PeekDay).
//
// The key is compared as a range of one value, in the primary key's
// order, so that the plan takes the primary key whatever the statistics
// (pitfall Q7 "A day read planned before its day had statistics"). With
// tenant_id, key = $2 and the day's bounds, idempotency_keys_tenant_created
// (tenant_id, created_at DESC, key DESC) matches as well, and on a day's
// partition not yet analyzed both estimate one row: the tie went to that
// index, whose scan walks the tenant's every key of the day. Equal to $2 as
// an order (text's collations are deterministic) leaves the ORDER BY to
// the primary key alone.
const peekDaySQL = `SELECT ` + peekColumns + `
  FROM idempotency_keys
 WHERE tenant_id = $1 AND key >= $2 AND key <= $2
   AND created_at >= '%[1]s' AND created_at < '%[2]s'
 ORDER BY key`

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
// UTC day; the zero time: unknown, which is Peek): it reads that day first,
// and answers from there if the key's row is in it (fromDay). Otherwise
// (the day's partition was dropped or detached, or does not hold the key)
// it answers Peek's read, so a wrong or stale day costs one more read,
// never another answer.
//
// The row found in the day is the key's newest, as Peek would answer. The
// claim (idempotency_keys_claim, migrations/00016) inserts a row for a key
// only when it has no head, or when its newest head's row is not found
// through idempotency_keys, under the key's advisory lock and in
// statements that start after the lock was granted. A head is inserted
// with its row (the AFTER INSERT trigger), so while the row is in an
// attached partition the newest head finds it, and no newer row can be
// created: every claim of the key finds this one. A newer row can exist
// only if the day's partition stopped being attached before that claim
// (retention's DETACH), and then the read answers nothing: it reads
// through idempotency_keys, which no longer holds the partition, as the
// claim does. This relies on the race of two claims both inserting a row
// being closed (the advisory lock, the lookup after it; pitfall 1
// "SELECT-then-INSERT").
//
// A connection's plan for the day (peekDaySQL) names the partition it
// pruned to. Retention's DETACH (its pending mark too) and DROP invalidate
// it, and PostgreSQL plans again at the next execution, before it reads:
// a stale plan never scans a table the parent no longer holds (pitfall R5
// "A plan that outlives its partition").
func (s *Store) PeekDay(ctx context.Context, q DBTX, tenantID int64, key string, day time.Time) (rec Record, fromDay bool, err error) {
	if day.IsZero() {
		rec, err := s.Peek(ctx, q, tenantID, key)
		return rec, false, err
	}
	rec, err = scanPeek(q.QueryRow(ctx, peekDayStatement(day), tenantID, key), tenantID, key)
	switch {
	case err == nil:
		return rec, true, nil
	case errors.Is(err, pgx.ErrNoRows):
		rec, err := s.Peek(ctx, q, tenantID, key)
		return rec, false, err
	default:
		return Record{}, false, fmt.Errorf("peek at %q on %s: %w", key, day.UTC().Format(time.DateOnly), err)
	}
}

// peekDayStatement is peekDaySQL for day's UTC day. The last few days'
// statements are kept (dayReads): formatting one cost a replay about 5% of
// the api's allocations, for the same text all day.
func peekDayStatement(day time.Time) string {
	y, m, d := day.UTC().Date()
	from := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	n := from.Unix() / (24 * 60 * 60)
	slot := &dayReads[uint64(n)%uint64(len(dayReads))]
	if kept := slot.Load(); kept != nil && kept.day == n {
		return kept.sql
	}
	sql := fmt.Sprintf(peekDaySQL, from.Format(time.RFC3339), from.AddDate(0, 0, 1).Format(time.RFC3339))
	slot.Store(&dayRead{day: n, sql: sql})
	return sql
}

// dayRead is one day's peekDaySQL; dayReads keeps one a slot, by day.
type dayRead struct {
	day int64
	sql string
}

var dayReads [8]atomic.Pointer[dayRead]

func scanPeek(row pgx.Row, tenantID int64, key string) (Record, error) {
	rec := Record{TenantID: tenantID, Key: key, partial: true}
	var (
		fp          []byte
		status      *int32
		contentType *string
		body        []byte
	)
	err := row.Scan(&rec.Key, &fp, &rec.State, &rec.Leased, &rec.Due, &rec.RetryAfter, &rec.ObjectID,
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
