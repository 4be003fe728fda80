package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/harness/testdb"
	"github.com/phasepay/phasepay/internal/idempotency"
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
	require.EqualValues(t, seen.LockVersion+1, winner.Record.LockVersion)
	require.ErrorIs(t, loser.Release(ctx, later), idempotency.ErrLeaseLost)
	now, err := b.store.Lookup(ctx, later, b.tenant, "k")
	require.NoError(t, err)
	require.True(t, now.Leased, "the loser released the winner's lease")
	require.EqualValues(t, 2, now.LockVersion)
}
