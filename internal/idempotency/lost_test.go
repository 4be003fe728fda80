package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// The release of a takeover whose answer was lost is fenced by what that
// takeover wrote, its token and the lock_version it set: when it did not
// commit because another takeover won the race (the same lock_version, its
// own token), or when a later holder took the key since, the release finds
// no lease of its own and ends none. Only the takeover that committed is
// released by its own error.
func TestLostTakeoverReleaseEndsOnlyItsOwnLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	then := testdb.Pool(t, b.url, t0)
	later := testdb.Pool(t, b.url, t0.Add(b.store.Lease()+time.Second))
	_, _, err := claim(ctx, then, b.store, b.tenant, "k", b.req)
	require.NoError(t, err)
	seen, err := b.store.Lookup(ctx, later, b.tenant, "k")
	require.NoError(t, err)

	// Two takeovers of the same record: one lost its answer without
	// committing, the other won, with the lock_version the first would
	// have set.
	loser := idempotency.LostTakeoverForTest(b.store, seen)
	winner, err := b.store.TakeOver(ctx, later, seen)
	require.NoError(t, err)
	require.Equal(t, seen.LockVersion+1, winner.Record.LockVersion)
	require.ErrorIs(t, loser.Release(ctx, later), idempotency.ErrLeaseLost)
	now, err := b.store.Lookup(ctx, later, b.tenant, "k")
	require.NoError(t, err)
	require.True(t, now.Leased, "the loser released the winner's lease")
	require.EqualValues(t, 2, now.LockVersion)
}

// The release of a lost batch takeover finds the batch's keys by their
// token among the keys due within a lease, a range of the partial index
// idempotency_keys_due: after a database blip it must not read every key
// kept, nor every key waiting for a later attempt.
func TestLostBatchReleaseReadsOnlyKeysInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	seedFinishedKeys(t, b, 50_000)
	_, err := b.pool.Exec(ctx, `
INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body, recovery_point, next_attempt_at)
SELECT $1, 'waiting-' || i, $2, 'POST', '/v1/things', '{}', 'start', phasepay_now() + interval '1 hour'
  FROM generate_series(1, 2000) i`, b.tenant, b.req.Fingerprint[:])
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE idempotency_keys`)
	require.NoError(t, err)
	var part string
	require.NoError(t, b.pool.QueryRow(ctx,
		`SELECT 'idempotency_keys_p' || to_char(phasepay_now() AT TIME ZONE 'UTC', 'YYYYMMDD')`).Scan(&part))
	plan := explain(t, b, idempotency.UnlockBatchSQLForTest, "00000000-0000-4000-8000-000000000001", nil, time.Minute.Microseconds())
	require.Regexp(t, `Index Scan using `+part+`_greatest_idx on `+part, plan)
	require.NotContains(t, plan, "Seq Scan on "+part, "no sequential scan of the full partition:\n%s", plan)
}
