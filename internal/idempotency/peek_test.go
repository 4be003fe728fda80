package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Peek reads fewer columns than Lookup, for a probable retry: every
// decision it makes, and every answer it gives without a claim, must be
// Lookup's. What it leaves out makes its record unfit for a takeover,
// which refuses it rather than resume a run with no request.
func TestPeekDecidesAndAnswersAsLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	then := testdb.Pool(t, b.url, t0)
	due := testdb.Pool(t, b.url, t0.Add(2*time.Second))
	other, err := idempotency.Canonicalize("POST", "/v1/things", []byte(`{"n":2}`))
	require.NoError(t, err)

	check := func(q idempotency.DBTX, key string, want idempotency.Decision) idempotency.Record {
		t.Helper()
		full, err := b.store.Lookup(ctx, q, b.tenant, key)
		require.NoError(t, err)
		peek, err := b.store.Peek(ctx, q, b.tenant, key)
		require.NoError(t, err)
		require.Equal(t, want, idempotency.Decide(peek, b.req.Fingerprint))
		for _, fp := range []idempotency.Fingerprint{b.req.Fingerprint, other.Fingerprint} {
			require.Equal(t, idempotency.Decide(full, fp), idempotency.Decide(peek, fp))
		}
		require.Equal(t, full.TenantID, peek.TenantID)
		require.Equal(t, full.Key, peek.Key)
		require.Equal(t, full.State, peek.State)
		require.Equal(t, full.Leased, peek.Leased)
		require.Equal(t, full.Due, peek.Due)
		require.Equal(t, full.RetryAfter, peek.RetryAfter)
		require.Equal(t, full.ObjectID, peek.ObjectID)
		require.Equal(t, full.Response, peek.Response)
		require.Empty(t, peek.Request.Body, "the request body is what Peek does not read")
		return peek
	}

	rec, _, err := claim(ctx, then, b.store, b.tenant, "k", b.req)
	require.NoError(t, err)
	check(then, "k", idempotency.InProgress)
	lease := b.store.LeaseOf(rec)
	require.NoError(t, pgx.BeginFunc(ctx, then, func(tx pgx.Tx) error { return lease.SetObject(ctx, tx, "obj_1") }))
	_, err = lease.Release(ctx, then, errors.New("psp unavailable"), 0)
	require.NoError(t, err)
	check(then, "k", idempotency.NotDue)
	peek := check(due, "k", idempotency.TakeOver)
	_, err = b.store.TakeOver(ctx, due, peek)
	require.Error(t, err)
	require.NotErrorIs(t, err, idempotency.ErrInProgress, "not a lost race: a record no takeover may start from")
	full, err := b.store.Lookup(ctx, due, b.tenant, "k")
	require.NoError(t, err)
	require.Equal(t, rec.LockVersion, full.LockVersion, "nothing taken over")

	rec, _, err = claim(ctx, then, b.store, b.tenant, "done", b.req)
	require.NoError(t, err)
	resp := idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"id": 1}` + "\n")}
	require.NoError(t, pgx.BeginFunc(ctx, then, func(tx pgx.Tx) error { return b.store.LeaseOf(rec).Finish(ctx, tx, resp) }))
	require.Equal(t, &resp, check(then, "done", idempotency.Replay).Response)

	_, err = b.store.Peek(ctx, then, b.tenant, "none")
	require.ErrorIs(t, err, idempotency.ErrNotFound)
}

// peekDay is PeekDay that must answer from the day's partition or not, as
// fromDay says.
func peekDay(t *testing.T, b *testBundle, q idempotency.DBTX, key string, d time.Time, fromDay bool) (idempotency.Record, error) {
	t.Helper()
	rec, from, err := b.store.PeekDay(context.Background(), q, b.tenant, key, d)
	require.Equal(t, fromDay, from, "answered from %s", partitionName(d))
	return rec, err
}

// A retry whose key's day is known is read in that day's partition, by
// primary key, and answered as Peek answers; without a day, PeekDay is
// Peek.
func TestPeekDayReadsTheKeysPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(30)
	finishedKey(t, b, d.Add(5*time.Hour), "k", true)
	q := testdb.Pool(t, b.url, d.Add(6*time.Hour))

	peek, err := b.store.Peek(ctx, q, b.tenant, "k")
	require.NoError(t, err)
	require.Equal(t, d.Add(5*time.Hour), peek.CreatedAt.UTC(), "the day to read next time")
	for _, at := range []time.Time{d, d.Add(23 * time.Hour), peek.CreatedAt.In(time.FixedZone("UTC-10", -10*3600))} {
		rec, err := peekDay(t, b, q, "k", at, true)
		require.NoError(t, err)
		require.Equal(t, peek, rec)
		require.Equal(t, idempotency.Replay, idempotency.Decide(rec, b.req.Fingerprint))
	}
	rec, err := peekDay(t, b, q, "k", time.Time{}, false)
	require.NoError(t, err)
	require.Equal(t, peek, rec)

	_, err = peekDay(t, b, q, "none", d, false)
	require.ErrorIs(t, err, idempotency.ErrNotFound)
}

// A day hint that outlives its partition: the key's day was dropped by
// retention (or only detached, the DROP still to come) and the key claimed
// anew on another day. The old day must not answer with the old row; the
// read falls back to the key's heads and answers the new one. And a day
// that never had a partition (or one that does not hold the key) falls
// back as well.
func TestDayHintThatOutlivesItsPartitionFallsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old, detached, later := day(40), day(41), day(45)
	finishedKey(t, b, old.Add(time.Hour), "dropped", true)
	finishedKey(t, b, detached.Add(time.Hour), "detached", true)
	laterPool := testdb.Pool(t, b.url, later.Add(time.Hour))
	_, err := idempotency.EnsurePartitions(ctx, laterPool)
	require.NoError(t, err)

	// The old day dropped; the detached day detached and not dropped, as a
	// retention pass that died between its DETACH and its DROP leaves it.
	_, err = b.pool.Exec(ctx, `ALTER TABLE idempotency_keys DETACH PARTITION `+partitionName(old))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `DROP TABLE `+partitionName(old))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ALTER TABLE idempotency_keys DETACH PARTITION `+partitionName(detached))
	require.NoError(t, err)
	require.True(t, partitionExists(t, b.pool, partitionName(detached)))

	anew, err := idempotency.Canonicalize("POST", "/v1/things", []byte(`{"n":3}`))
	require.NoError(t, err)
	for key, d := range map[string]time.Time{"dropped": old, "detached": detached} {
		_, created, err := claim(ctx, laterPool, b.store, b.tenant, key, anew)
		require.NoError(t, err)
		require.True(t, created, "%s: claimed anew once its day is gone", key)

		rec, err := peekDay(t, b, laterPool, key, d, false)
		require.NoError(t, err, key)
		require.Equal(t, anew.Fingerprint, rec.Request.Fingerprint, "%s: the new row, not the old", key)
		require.Equal(t, later.Add(time.Hour), rec.CreatedAt.UTC(), key)
		require.Equal(t, idempotency.InProgress, idempotency.Decide(rec, anew.Fingerprint), key)
		// With the day corrected, the partition answers.
		_, err = peekDay(t, b, laterPool, key, rec.CreatedAt, true)
		require.NoError(t, err, key)
	}

	// A day with no partition at all, and a day whose partition exists but
	// does not hold the key.
	for _, d := range []time.Time{day(-400), later.AddDate(0, 0, 1)} {
		rec, err := peekDay(t, b, laterPool, "dropped", d, false)
		require.NoError(t, err, partitionName(d))
		require.Equal(t, anew.Fingerprint, rec.Request.Fingerprint)
	}
	require.False(t, partitionExists(t, b.pool, partitionName(day(-400))))
}
