package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Release ends a lease without bumping lock_version, so the fence alone let
// a heartbeat tick that ran just after its holder's Release lease the key
// again: the client's next retry got 409 for a whole lease. A heartbeat
// now extends only a lease that is still held, and stops by itself when it
// finds it released.
func TestHeartbeatCannotReviveReleasedLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	store, err := idempotency.NewStore(idempotency.Config{Lease: time.Second})
	require.NoError(t, err)
	rec, created, err := claim(ctx, b.pool, store, b.tenant, "released", b.req)
	require.NoError(t, err)
	require.True(t, created)
	lease := store.LeaseOf(rec)

	// A heartbeat still running when the holder releases.
	lost := make(chan error, 1)
	hbCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		lease.Heartbeat(hbCtx, b.pool, func(err error) { lost <- err })
	}()
	_, err = lease.Release(ctx, b.pool, errors.New("psp unavailable"), 0)
	require.NoError(t, err)

	// The next tick (a third of a lease) finds the lease released and stops.
	select {
	case err := <-lost:
		require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	case <-time.After(3 * time.Second):
		t.Fatal("the heartbeat kept running after its lease was released")
	}
	<-done
	seen, err := store.Lookup(ctx, b.pool, b.tenant, "released")
	require.NoError(t, err)
	require.False(t, seen.Leased, "a released key must not be leased again by its own heartbeat")

	// And a tick racing the release directly.
	require.ErrorIs(t, lease.Extend(ctx, b.pool), idempotency.ErrLeaseLost)
	seen, err = store.Lookup(ctx, b.pool, b.tenant, "released")
	require.NoError(t, err)
	require.False(t, seen.Leased)
}
