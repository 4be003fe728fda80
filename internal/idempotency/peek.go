package idempotency

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// peekSQL reads of a key only what Decide and its answers without a claim
// need: the fingerprint, the state and the lease, the schedule, the object
// and the stored response. It is the read of a probable retry (phases'
// key hints), most of them replays, whose cost is this statement and its
// scan: lookupSQL's every column (the request body, the trace context, the
// last error…) cost the api a tenth of its CPU per replay in a profile,
// for values no replay uses. Read through the key's heads, as lookupSQL.
const peekSQL = `SELECT fingerprint, state, coalesce(locked_until > phasepay_now(), false),
       coalesce(next_attempt_at <= phasepay_now(), true),
       greatest(0, ceil(extract(epoch FROM next_attempt_at - phasepay_now())))::int,
       coalesce(object_id, ''), response_status, response_content_type, response_body
  FROM idempotency_keys_newest($1, $2)`

// Peek reads what Decide needs of a key, and what a Mismatch, a Replay, a
// NotDue or an Unresolved answers with. It returns ErrNotFound if there is
// none.
//
// The record is partial: of its request only the fingerprint is set, and
// CreatedAt, Point, LockVersion, Attempts, NextAttemptAt, LastError and
// TraceContext are zero. Any other decision needs the whole record (a
// claim, or Lookup); TakeOver refuses a peeked one.
func (s *Store) Peek(ctx context.Context, q DBTX, tenantID int64, key string) (Record, error) {
	rec := Record{TenantID: tenantID, Key: key, partial: true}
	var (
		fp          []byte
		status      *int32
		contentType *string
		body        []byte
	)
	err := q.QueryRow(ctx, peekSQL, tenantID, key).Scan(&fp, &rec.State, &rec.Leased,
		&rec.Due, &rec.RetryAfter, &rec.ObjectID, &status, &contentType, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("peek at %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("peek at %q: %w", key, err)
	}
	copy(rec.Request.Fingerprint[:], fp)
	if status != nil {
		rec.Response = &Response{Status: int(*status), ContentType: *contentType, Body: body}
	}
	return rec, nil
}
