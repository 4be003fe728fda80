package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

type testBundle struct {
	url    string
	pool   *pgxpool.Pool
	store  *idempotency.Store
	tenant int64
	req    idempotency.Canonical
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url := testdb.NewURL(t)
	pool := testdb.Pool(t, url, time.Time{})
	store, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute})
	require.NoError(t, err)
	req, err := idempotency.Canonicalize("POST", "/v1/things", []byte(`{"n":1}`))
	require.NoError(t, err)
	var tenant int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`INSERT INTO tenants (name) VALUES ($1) RETURNING id`, t.Name()).Scan(&tenant))
	return &testBundle{url: url, pool: pool, store: store, tenant: tenant, req: req}
}

// claim runs a claim in its own committed transaction, as callers must.
func claim(ctx context.Context, pool *pgxpool.Pool, store *idempotency.Store, tenant int64, key string, req idempotency.Canonical) (rec idempotency.Record, created bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rec, created, err = store.Claim(ctx, tx, idempotency.ClaimParams{TenantID: tenant, Key: key, Request: req})
		return err
	})
	return rec, created, err
}

// countTrue counts the workers that saw true.
func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func countRows(t *testing.T, pool *pgxpool.Pool, tenant int64, key string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`, tenant, key).Scan(&n))
	return n
}

func TestConcurrentDuplicatesClaimOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	const workers = 50
	var (
		wg      sync.WaitGroup
		created [workers]bool
		errs    [workers]error
	)
	for i := range workers {
		wg.Go(func() { _, created[i], errs[i] = claim(ctx, b.pool, b.store, b.tenant, "dup", b.req) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
	require.Equal(t, 1, countTrue(created[:]))
	require.Equal(t, 1, countRows(t, b.pool, b.tenant, "dup"))
}

// The primary key includes created_at, so nothing but the claim's advisory
// lock stops a second row for the same key in the next day's partition. Two
// workers whose clocks stand either side of midnight race for each key.
func TestClaimUniqueAcrossPartitionBoundary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour) // partitions exist up to +3 days
	before := testdb.Pool(t, b.url, midnight.Add(-time.Millisecond))
	after := testdb.Pool(t, b.url, midnight.Add(time.Millisecond))

	for i := range 30 {
		key := fmt.Sprintf("boundary-%d", i)
		var (
			wg      sync.WaitGroup
			results [2]bool
			errs    [2]error
		)
		for j, pool := range []*pgxpool.Pool{before, after} {
			wg.Go(func() { _, results[j], errs[j] = claim(ctx, pool, b.store, b.tenant, key, b.req) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs[:]...))
		require.NotEqual(t, results[0], results[1], "key %s: exactly one claim must create it, got %v", key, results)
		require.Equal(t, 1, countRows(t, b.pool, b.tenant, key))
	}

	// And sequentially, the later day finds the earlier day's key.
	_, created, err := claim(ctx, before, b.store, b.tenant, "seq", b.req)
	require.NoError(t, err)
	require.True(t, created)
	rec, created, err := claim(ctx, after, b.store, b.tenant, "seq", b.req)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, midnight.Add(-time.Millisecond), rec.CreatedAt.UTC())
}

// A claim inside REPEATABLE READ would read from a snapshot taken before it
// waited for the lock and could insert a duplicate; it is refused.
func TestClaimRefusesSnapshotIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	err := pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		_, _, err := b.store.Claim(ctx, tx, idempotency.ClaimParams{TenantID: b.tenant, Key: "rr", Request: b.req})
		return err
	})
	require.ErrorContains(t, err, "READ COMMITTED")
	require.Equal(t, 0, countRows(t, b.pool, b.tenant, "rr"))
}

func TestClaimDecisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	rec, created, err := claim(ctx, b.pool, b.store, b.tenant, "k", b.req)
	require.NoError(t, err)
	require.True(t, created)
	require.True(t, rec.Leased)
	require.Equal(t, idempotency.PointStart, rec.Point)
	require.EqualValues(t, 1, rec.LockVersion)
	require.Equal(t, b.req.Body, rec.Request.Body)

	again, created, err := claim(ctx, b.pool, b.store, b.tenant, "k", b.req)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, idempotency.InProgress, idempotency.Decide(again, b.req.Fingerprint))

	other, err := idempotency.Canonicalize("POST", "/v1/things", []byte(`{"n":2}`))
	require.NoError(t, err)
	again, _, err = claim(ctx, b.pool, b.store, b.tenant, "k", other)
	require.NoError(t, err)
	require.Equal(t, idempotency.Mismatch, idempotency.Decide(again, other.Fingerprint))

	// Finish stores the response; the next claim replays it byte for byte.
	lease := b.store.LeaseOf(rec)
	resp := idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"id": 1}` + "\n")}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return lease.Finish(ctx, tx, resp) }))
	again, _, err = claim(ctx, b.pool, b.store, b.tenant, "k", b.req)
	require.NoError(t, err)
	require.Equal(t, idempotency.Replay, idempotency.Decide(again, b.req.Fingerprint))
	require.Equal(t, &resp, again.Response)

	// Keys are scoped per tenant.
	var tenant2 int64
	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('other') RETURNING id`).Scan(&tenant2))
	_, created, err = claim(ctx, b.pool, b.store, tenant2, "k", other)
	require.NoError(t, err)
	require.True(t, created)
}

// A worker paused past its lease (GC pause, SIGSTOP, network stall) wakes
// after another worker took the key over: none of its writes may land.
func TestStaleWorkerCannotCommitAfterTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	t0 := time.Now().UTC().Truncate(time.Second)
	then := testdb.Pool(t, b.url, t0)
	later := testdb.Pool(t, b.url, t0.Add(b.store.Lease()+time.Second))

	rec, created, err := claim(ctx, then, b.store, b.tenant, "stale", b.req)
	require.NoError(t, err)
	require.True(t, created)
	stale := b.store.LeaseOf(rec)

	// Later, the lease has run out: the next worker decides to take over.
	seen, err := b.store.Lookup(ctx, later, b.tenant, "stale")
	require.NoError(t, err)
	require.Equal(t, idempotency.TakeOver, idempotency.Decide(seen, b.req.Fingerprint))
	fresh, err := b.store.TakeOver(ctx, later, seen)
	require.NoError(t, err)
	require.EqualValues(t, 2, fresh.Record.LockVersion)

	// The stale worker wakes up: every write it tries fails and changes nothing.
	err = pgx.BeginFunc(ctx, then, func(tx pgx.Tx) error { return stale.Advance(ctx, tx, "charge_created") })
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	err = pgx.BeginFunc(ctx, then, func(tx pgx.Tx) error {
		return stale.Finish(ctx, tx, idempotency.Response{Status: 500, ContentType: "text/plain", Body: []byte("stale")})
	})
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	require.ErrorIs(t, stale.Extend(ctx, then), idempotency.ErrLeaseLost)
	_, err = stale.Release(ctx, then, nil, 0)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)

	// The new holder is unaffected.
	require.NoError(t, pgx.BeginFunc(ctx, later, func(tx pgx.Tx) error { return fresh.Advance(ctx, tx, "charge_created") }))
	now, err := b.store.Lookup(ctx, later, b.tenant, "stale")
	require.NoError(t, err)
	require.Equal(t, idempotency.RecoveryPoint("charge_created"), now.Point)
	require.EqualValues(t, 2, now.LockVersion)
	require.Equal(t, idempotency.StateStarted, now.State)
}

// A phase that began under a valid lease holds the key's row lock: a takeover
// waits for it, then finds the lock_version it expected gone only if the
// phase committed a finish. Here it commits an advance, and the takeover
// (decided on the stale record) resolves to no winner rather than two.
func TestConcurrentTakeoversOneWinner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	t0 := time.Now().UTC().Truncate(time.Second)
	then := testdb.Pool(t, b.url, t0)
	later := testdb.Pool(t, b.url, t0.Add(b.store.Lease()+time.Second))
	_, _, err := claim(ctx, then, b.store, b.tenant, "race", b.req)
	require.NoError(t, err)
	seen, err := b.store.Lookup(ctx, later, b.tenant, "race")
	require.NoError(t, err)

	var (
		wg   sync.WaitGroup
		errs [10]error
	)
	for i := range errs {
		wg.Go(func() { _, errs[i] = b.store.TakeOver(ctx, later, seen) })
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
			continue
		}
		require.ErrorIs(t, err, idempotency.ErrInProgress)
	}
	require.Equal(t, 1, wins)
}

// After a failed attempt the worker releases its lease and the key gets its
// next attempt on the retry schedule: until then a client's retry is told
// how long to wait (NotDue, RetryAfter) and cannot take the key over; once
// due, it takes over at once without waiting out a lease.
func TestReleasedKeyWaitsForItsScheduledAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	t0 := time.Now().UTC().Truncate(time.Second)
	then := testdb.Pool(t, b.url, t0)
	rec, _, err := claim(ctx, then, b.store, b.tenant, "rel", b.req)
	require.NoError(t, err)
	rel, err := b.store.LeaseOf(rec).Release(ctx, then, withWords("psp unavailable", "status 503"), 0)
	require.NoError(t, err)
	require.False(t, rel.NeedsAttention)
	// The first retry is due RetryBase (1s) ±25% later.
	require.WithinRange(t, rel.NextAttemptAt, t0.Add(750*time.Millisecond), t0.Add(1250*time.Millisecond))
	require.Contains(t, []int{1, 2}, rel.RetryAfter, "whole seconds, rounded up")

	seen, _, err := claim(ctx, then, b.store, b.tenant, "rel", b.req)
	require.NoError(t, err)
	require.Equal(t, idempotency.NotDue, idempotency.Decide(seen, b.req.Fingerprint))
	require.Equal(t, 1, seen.Attempts)
	require.Equal(t, rel.RetryAfter, seen.RetryAfter)
	require.Equal(t, "psp unavailable", seen.LastError)
	_, err = b.store.TakeOver(ctx, then, seen)
	require.ErrorIs(t, err, idempotency.ErrInProgress, "a stale decision cannot take over a key that is not due")

	due := testdb.Pool(t, b.url, t0.Add(2*time.Second))
	seen, _, err = claim(ctx, due, b.store, b.tenant, "rel", b.req)
	require.NoError(t, err)
	require.Equal(t, idempotency.TakeOver, idempotency.Decide(seen, b.req.Fingerprint))
	_, err = b.store.TakeOver(ctx, due, seen)
	require.NoError(t, err)
}

// The schedule doubles with each failed attempt, jittered, and never waits
// more than RetryMax; a PSP's Retry-After (notBefore) pushes it later.
func TestRetryScheduleDoublesAndIsCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	store, err := idempotency.NewStore(idempotency.Config{RetryBase: time.Second, RetryMax: 10 * time.Second})
	require.NoError(t, err)

	t0 := time.Now().UTC().Truncate(time.Second)
	clock := t0
	rec, _, err := claim(ctx, testdb.Pool(t, b.url, clock), store, b.tenant, "sched", b.req)
	require.NoError(t, err)
	lease := store.LeaseOf(rec)
	var waits []time.Duration
	for n := range 6 {
		pool := testdb.Pool(t, b.url, clock)
		notBefore := time.Duration(0)
		if n == 5 {
			notBefore = 30 * time.Second // a busy PSP's Retry-After beats the schedule
		}
		rel, err := lease.Release(ctx, pool, fmt.Errorf("attempt %d", n), notBefore)
		require.NoError(t, err)
		waits = append(waits, rel.NextAttemptAt.Sub(clock))
		clock = rel.NextAttemptAt.Add(time.Millisecond)
		seen, err := store.Lookup(ctx, testdb.Pool(t, b.url, clock), b.tenant, "sched")
		require.NoError(t, err)
		lease, err = store.TakeOver(ctx, testdb.Pool(t, b.url, clock), seen)
		require.NoError(t, err)
	}
	for n, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		require.InDelta(t, float64(want), float64(waits[n]), float64(want)/4+float64(time.Millisecond), "wait after attempt %d", n)
	}
	require.LessOrEqual(t, waits[4], 10*time.Second+time.Millisecond, "never more than RetryMax")
	require.GreaterOrEqual(t, waits[5], 30*time.Second-time.Millisecond, "the PSP's Retry-After")
}

// TestGiveUpMovesToNeedsAttention: a request still unfinished GiveUpAfter
// after its claim is given up at its next failed attempt: needs_attention,
// no next attempt, not taken over by anyone; a client's retry is told it is
// unresolved. An operator's retry makes one more attempt due at once.
func TestGiveUpMovesToNeedsAttention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	store, err := idempotency.NewStore(idempotency.Config{GiveUpAfter: time.Hour})
	require.NoError(t, err)

	t0 := time.Now().UTC().Truncate(time.Second)
	rec, _, err := claim(ctx, testdb.Pool(t, b.url, t0), store, b.tenant, "gu", b.req)
	require.NoError(t, err)
	rel, err := store.LeaseOf(rec).Release(ctx, testdb.Pool(t, b.url, t0.Add(time.Hour)), withWords("psp down", "dial"), 0)
	require.NoError(t, err)
	require.True(t, rel.NeedsAttention)

	later := testdb.Pool(t, b.url, t0.Add(2*time.Hour))
	seen, _, err := claim(ctx, later, store, b.tenant, "gu", b.req)
	require.NoError(t, err)
	require.Equal(t, idempotency.StateNeedsAttention, seen.State)
	require.Equal(t, "psp down", seen.LastError)
	require.Equal(t, idempotency.Unresolved, idempotency.Decide(seen, b.req.Fingerprint))
	_, err = store.TakeOver(ctx, later, seen)
	require.ErrorIs(t, err, idempotency.ErrInProgress)
	leases, err := store.TakeOverExpired(ctx, later, 10)
	require.NoError(t, err)
	require.Empty(t, leases, "the reaper never picks a key that needs attention")

	require.NoError(t, store.RetryNow(ctx, later, b.tenant, "gu", "ops"))
	leases, err = store.TakeOverExpired(ctx, later, 10)
	require.NoError(t, err)
	require.Len(t, leases, 1, "an operator's retry makes the next attempt due now")
	// It fails again: back to needs_attention at once, the give-up horizon
	// having passed long ago.
	rel, err = leases[0].Release(ctx, later, fmt.Errorf("psp still down"), 0)
	require.NoError(t, err)
	require.True(t, rel.NeedsAttention)
}

// A live worker waiting on a slow call keeps its lease by heartbeat; once it
// stops (it died), the lease runs out.
func TestHeartbeatKeepsLeaseAlive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	store, err := idempotency.NewStore(idempotency.Config{Lease: time.Second})
	require.NoError(t, err)

	rec, _, err := claim(ctx, b.pool, store, b.tenant, "hb", b.req)
	require.NoError(t, err)
	lease := store.LeaseOf(rec)
	hbCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lease.Heartbeat(hbCtx, b.pool, func(err error) { t.Errorf("lease lost: %v", err) })
	}()

	// sleep: 2.5 leases by the real clock, which runs both the lease and the heartbeat.
	time.Sleep(2500 * time.Millisecond)
	seen, err := store.Lookup(ctx, b.pool, b.tenant, "hb")
	require.NoError(t, err)
	require.True(t, seen.Leased, "heartbeat should have kept the lease")

	stop()
	<-done
	require.Eventually(t, func() bool {
		seen, err := store.Lookup(ctx, b.pool, b.tenant, "hb")
		return err == nil && !seen.Leased
	}, 3*time.Second, 50*time.Millisecond)
}
