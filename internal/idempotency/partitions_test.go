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

// partitionName is idempotency.DayPartition, which so names every partition
// these tests look for, and TestPartitionsCreatedAhead checks it against
// the names the database gives.
func partitionName(day time.Time) string { return idempotency.DayPartition(day) }

func partitionExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists))
	return exists
}

// day returns midnight UTC, n days from today.
func day(n int) time.Time { return time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, n) }

func TestPartitionsCreatedAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	future := testdb.Pool(t, b.url, day(40).Add(13*time.Hour))

	created, err := idempotency.EnsurePartitions(ctx, future)
	require.NoError(t, err)
	require.Equal(t, idempotency.PartitionsAhead+1, created)
	for n := 39; n <= 40+idempotency.PartitionsAhead-1; n++ {
		require.True(t, partitionExists(t, b.pool, partitionName(day(n))), "day %+d", n)
	}
	again, err := idempotency.EnsurePartitions(ctx, future)
	require.NoError(t, err)
	require.Zero(t, again)
}

// finishedKey claims and finishes a key with the database clock at ts, which
// puts it in ts's partition.
func finishedKey(t *testing.T, b *testBundle, ts time.Time, key string, finish bool) {
	t.Helper()
	ctx := context.Background()
	pool := testdb.Pool(t, b.url, ts)
	_, err := idempotency.EnsurePartitions(ctx, pool)
	require.NoError(t, err)
	rec, created, err := claim(ctx, pool, b.store, b.tenant, key, b.req)
	require.NoError(t, err)
	require.True(t, created)
	if finish {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return b.store.LeaseOf(rec).Finish(ctx, tx, idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte("{}")})
		}))
	}
}

// Retention shorter than a client's retry horizon is the pitfall: a key
// forgotten while its client still retries is a second charge. Whatever
// RETENTION says, a partition holding an unfinished key is kept, and says
// why; once the key is done it stays RETENTION longer, then goes.
func TestRetentionNeverDropsUnfinishedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(50)
	finishedKey(t, b, d.Add(time.Hour), "old-done", true)
	finishedKey(t, b, d.Add(24*time.Hour+time.Hour), "old-started", false)
	finishedKey(t, b, d.Add(48*time.Hour+time.Hour), "recent", true)

	// Three days after d, with one day of retention: d and d+1 expired.
	later := testdb.Pool(t, b.url, d.Add(72*time.Hour+time.Minute))
	report, err := idempotency.DropExpiredPartitions(ctx, later, 24*time.Hour)
	require.NoError(t, err)
	require.Contains(t, report.Dropped, partitionName(d))
	require.NotContains(t, report.Dropped, partitionName(d.AddDate(0, 0, 1)))
	require.Equal(t, []idempotency.KeptPartition{{Name: partitionName(d.AddDate(0, 0, 1)), Reason: "holds a started key that is not finished yet"}}, report.Kept)
	require.False(t, partitionExists(t, b.pool, partitionName(d)))
	require.True(t, partitionExists(t, b.pool, partitionName(d.AddDate(0, 0, 2))))

	_, err = b.store.Lookup(ctx, later, b.tenant, "old-done")
	require.ErrorIs(t, err, idempotency.ErrNotFound)
	rec, err := b.store.Lookup(ctx, later, b.tenant, "old-started")
	require.NoError(t, err)

	// The key is finished (its client retried, or the reaper did): now the
	// partition goes.
	lease, err := b.store.TakeOver(ctx, later, rec)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, later, func(tx pgx.Tx) error {
		return lease.Finish(ctx, tx, idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte("{}")})
	}))
	// RETENTION counts from the finish: its client may still retry for a
	// day, and must get a replay.
	report, err = idempotency.DropExpiredPartitions(ctx, later, 24*time.Hour)
	require.NoError(t, err)
	require.NotContains(t, report.Dropped, partitionName(d.AddDate(0, 0, 1)))
	require.Len(t, report.Kept, 1)
	require.Contains(t, report.Kept[0].Reason, "finished less than RETENTION ago")

	dayAfter := testdb.Pool(t, b.url, d.Add(72*time.Hour+25*time.Hour))
	report, err = idempotency.DropExpiredPartitions(ctx, dayAfter, 24*time.Hour)
	require.NoError(t, err)
	require.Contains(t, report.Dropped, partitionName(d.AddDate(0, 0, 1)))
	require.Empty(t, report.Kept)
}

// TestPartitionWithUnfinishedKeyIsKept: a request given up after
// GIVE_UP_AFTER (needs_attention) is not finished either: an operator may
// still retry or resolve it, and its client's retry must still find the
// key. However old, its partition stays.
func TestPartitionWithUnfinishedKeyIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(40)
	store, err := idempotency.NewStore(idempotency.Config{GiveUpAfter: time.Hour})
	require.NoError(t, err)
	then := testdb.Pool(t, b.url, d.Add(time.Hour))
	_, err = idempotency.EnsurePartitions(ctx, then)
	require.NoError(t, err)
	rec, _, err := claim(ctx, then, store, b.tenant, "attention", b.req)
	require.NoError(t, err)
	rel, err := store.LeaseOf(rec).Release(ctx, testdb.Pool(t, b.url, d.Add(3*time.Hour)), fmt.Errorf("psp down"), 0)
	require.NoError(t, err)
	require.True(t, rel.NeedsAttention)

	years := testdb.Pool(t, b.url, d.Add(400*24*time.Hour))
	report, err := idempotency.DropExpiredPartitions(ctx, years, 24*time.Hour)
	require.NoError(t, err)
	require.NotContains(t, report.Dropped, partitionName(d))
	require.Contains(t, report.Kept, idempotency.KeptPartition{Name: partitionName(d), Reason: "holds a started key that is not finished yet"})
	_, err = store.Lookup(ctx, years, b.tenant, "attention")
	require.NoError(t, err)
}

// Dropping is DETACH … CONCURRENTLY then DROP. A detach interrupted half way
// (its session died, or its context ended while it waited for old
// snapshots) leaves the partition "detach pending"; the next pass finishes
// it with FINALIZE.
func TestInterruptedDetachIsFinalized(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(60)
	finishedKey(t, b, d.Add(time.Hour), "k", true)
	later := testdb.Pool(t, b.url, d.Add(72*time.Hour))

	// A transaction that has read the partitioned table makes the second
	// phase of DETACH … CONCURRENTLY wait for it.
	holder, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck
	_, err = holder.Exec(ctx, `SELECT count(*) FROM idempotency_keys`)
	require.NoError(t, err)

	shortCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = idempotency.DropExpiredPartitions(shortCtx, later, 24*time.Hour)
	require.Error(t, err)
	// (By the test clock every partition up to d is expired; the first in
	// name order is the one left pending.)
	var pending string
	require.NoError(t, b.pool.QueryRow(ctx,
		`SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhdetachpending`).Scan(&pending))

	require.NoError(t, holder.Rollback(ctx))
	report, err := idempotency.DropExpiredPartitions(ctx, later, 24*time.Hour)
	require.NoError(t, err)
	require.Contains(t, report.Dropped, pending)
	require.Contains(t, report.Dropped, partitionName(d))
	require.False(t, partitionExists(t, b.pool, pending))
}

// An interrupted DETACH … CONCURRENTLY can still complete by itself after
// a pass listed it as pending (its cancellation reached the server too
// late): finishing it then finds a table that is no longer a partition,
// which is done, not an error. A partition still attached is not mistaken
// for one: FINALIZE of it fails.
func TestFinalizeOfADetachThatCompletedItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(90)
	finishedKey(t, b, d.Add(time.Hour), "k", true)
	ident := pgx.Identifier{partitionName(d)}.Sanitize()

	require.Error(t, idempotency.FinalizeDetachForTest(ctx, b.pool, "idempotency_keys", ident), "attached, no detach pending")
	_, err := b.pool.Exec(ctx, "ALTER TABLE idempotency_keys DETACH PARTITION "+ident)
	require.NoError(t, err)
	require.NoError(t, idempotency.FinalizeDetachForTest(ctx, b.pool, "idempotency_keys", ident))
	require.True(t, partitionExists(t, b.pool, partitionName(d)), "left for the DROP that follows")
}

// DETACH … CONCURRENTLY refuses to run beside a DEFAULT partition; one that
// an operator added makes retention fall back to a plain DETACH, not fail.
func TestDropWithDefaultPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(70)
	finishedKey(t, b, d.Add(time.Hour), "k", true)
	_, err := b.pool.Exec(ctx, `CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT`)
	require.NoError(t, err)

	report, err := idempotency.DropExpiredPartitions(ctx, testdb.Pool(t, b.url, d.Add(72*time.Hour)), 24*time.Hour)
	require.NoError(t, err)
	require.Contains(t, report.Dropped, partitionName(d))
	require.True(t, partitionExists(t, b.pool, "idempotency_keys_default"))
}

// A table left detached by a pass that died between DETACH and DROP is
// found by its name and dropped.
func TestDetachedLeftoverIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(80)
	finishedKey(t, b, d.Add(time.Hour), "k", true)
	_, err := b.pool.Exec(ctx, `ALTER TABLE idempotency_keys DETACH PARTITION `+partitionName(d))
	require.NoError(t, err)

	report, err := idempotency.DropExpiredPartitions(ctx, testdb.Pool(t, b.url, d.Add(72*time.Hour)), 24*time.Hour)
	require.NoError(t, err)
	require.Contains(t, report.Dropped, partitionName(d))
	require.False(t, partitionExists(t, b.pool, partitionName(d)))
}

// Right after maintenance created and dropped partitions, two claims either
// side of the next midnight still make one key.
func TestClaimUniqueAcrossBoundaryAfterMaintenance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(90)
	finishedKey(t, b, d.Add(-48*time.Hour), "old", true)
	maint := testdb.Pool(t, b.url, d.Add(-time.Hour))
	_, err := idempotency.EnsurePartitions(ctx, maint)
	require.NoError(t, err)
	report, err := idempotency.DropExpiredPartitions(ctx, maint, 24*time.Hour)
	require.NoError(t, err)
	require.NotEmpty(t, report.Dropped)

	before := testdb.Pool(t, b.url, d.Add(-time.Millisecond))
	after := testdb.Pool(t, b.url, d.Add(time.Millisecond))
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		var (
			wg      sync.WaitGroup
			created [2]bool
			errs    [2]error
		)
		for j, pool := range []*pgxpool.Pool{before, after} {
			wg.Go(func() { _, created[j], errs[j] = claim(ctx, pool, b.store, b.tenant, key, b.req) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs[:]...))
		require.NotEqual(t, created[0], created[1], "%s: exactly one claim creates it", key)
		require.Equal(t, 1, countRows(t, b.pool, b.tenant, key))
	}
}
