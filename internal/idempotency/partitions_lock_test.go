package idempotency_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// claimLockTimeout is the lock_timeout of the claims below, as every
// phasepay connection has one (internal/dbpool).
const claimLockTimeout = 2 * time.Second

// waitForLockWait waits until a session of the named application waits on
// a lock, failing the test after a few seconds.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool, app string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n))
		return n > 0
	}, 10*time.Second, 10*time.Millisecond, "%s never waited on a lock", app)
}

// CREATE TABLE … PARTITION OF takes ACCESS EXCLUSIVE on the parent: queued
// behind one long reader (a report, a pg_dump), it made every claim and
// replay queue behind itself. With a transaction holding ACCESS SHARE on
// the parent open, partition maintenance (new days created, an expired day
// dropped) runs beside it and claims and lookups do not wait.
func TestPartitionMaintenanceDoesNotStallClaimsBehindLongReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	now := day(60).Add(time.Hour)
	finishedKey(t, b, day(55).Add(time.Hour), "old", true) // creates days 54..59

	// The long reader: ACCESS SHARE on the parent and every partition.
	reader, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer reader.Rollback(ctx) //nolint:errcheck // committed below
	var n int
	require.NoError(t, reader.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n))

	// Maintenance: today's clock needs days 59..63, and 54..58 are expired.
	maint := testdb.Pool(t, b.url, now, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = "maintenance"
	})
	type result struct {
		created int
		report  idempotency.PartitionReport
		err     error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		if r.created, r.err = idempotency.EnsurePartitions(ctx, maint); r.err == nil {
			r.report, r.err = idempotency.DropExpiredPartitions(ctx, maint, 24*time.Hour)
		}
		done <- r
	}()
	// The DETACH … CONCURRENTLY waits for the reader to end (the old code's
	// CREATE waited for its lock): maintenance is under way.
	waitForLockWait(t, b.pool, "maintenance")

	clients := testdb.Pool(t, b.url, day(59).Add(time.Hour), func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(claimLockTimeout.Milliseconds())
	})
	var slowest time.Duration
	for i := range 20 {
		start := time.Now()
		key := fmt.Sprintf("k%d", i)
		_, created, err := claim(ctx, clients, b.store, b.tenant, key, b.req)
		require.NoError(t, err, "claim %d", i)
		require.True(t, created)
		_, err = b.store.Lookup(ctx, clients, b.tenant, "old")
		require.NoError(t, err, "lookup %d", i)
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("slowest claim+lookup beside the long reader: %s", slowest)
	require.Less(t, slowest, claimLockTimeout/4)

	require.NoError(t, reader.Commit(ctx))
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("maintenance did not finish after the reader ended")
	}
	require.NoError(t, r.err)
	require.Equal(t, idempotency.PartitionsAhead+1, r.created) // days 59..63
	for n := 59; n < 60+idempotency.PartitionsAhead; n++ {
		require.True(t, partitionExists(t, b.pool, partitionName(day(n))), "day %d", n)
	}
	require.Contains(t, r.report.Dropped, partitionName(day(55)))
	require.False(t, partitionExists(t, b.pool, partitionName(day(55))))
}

// A DEFAULT partition an operator added, holding the rows of a day whose
// own partition was missed, made every later EnsurePartitions fail (the
// day's partition can never be attached over rows the DEFAULT partition
// holds): the reaper's maintenance stopped before retention and the api
// refused to start. The day is now skipped and reported, the days after it
// are created, and retention runs.
func TestDefaultPartitionWithMissedDayBlocksNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(100)
	finishedKey(t, b, d.Add(-72*time.Hour+time.Hour), "expired", true) // creates days d-4..d+0
	// An operator detaches and drops day d (say, by a botched repair) and
	// adds a DEFAULT partition, which then takes day d's keys.
	_, err := b.pool.Exec(ctx, `ALTER TABLE idempotency_keys DETACH PARTITION `+partitionName(d))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `DROP TABLE `+partitionName(d))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT`)
	require.NoError(t, err)
	onDay := testdb.Pool(t, b.url, d.Add(time.Hour))
	_, created, err := claim(ctx, onDay, b.store, b.tenant, "in-default", b.req)
	require.NoError(t, err)
	require.True(t, created)

	// Start of the api and the reaper's maintenance: both ensure partitions.
	created2, err := idempotency.EnsurePartitions(ctx, onDay)
	require.NoError(t, err)
	require.Equal(t, idempotency.PartitionsAhead-1, created2) // d+1 .. d+PartitionsAhead-1; d skipped
	missing, err := idempotency.MissingDays(ctx, onDay)
	require.NoError(t, err)
	require.Equal(t, []time.Time{d}, utc(missing))
	require.False(t, partitionExists(t, b.pool, partitionName(d)))
	for n := 101; n < 100+idempotency.PartitionsAhead; n++ {
		require.True(t, partitionExists(t, b.pool, partitionName(day(n))), "day %d", n)
	}

	// Retention still runs.
	report, err := idempotency.DropExpiredPartitions(ctx, onDay, 24*time.Hour)
	require.NoError(t, err)
	require.Contains(t, report.Dropped, partitionName(d.Add(-72*time.Hour)))

	// The key in the DEFAULT partition is found by lookups and claims.
	rec, created, err := claim(ctx, onDay, b.store, b.tenant, "in-default", b.req)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, "in-default", rec.Key)
}

func utc(ts []time.Time) []time.Time {
	out := make([]time.Time, len(ts))
	for i, t := range ts {
		out[i] = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
	return out
}

// Beside an operator's DEFAULT partition, attaching a day needs ACCESS
// EXCLUSIVE on the DEFAULT partition, which every claim reads: behind a long
// reader that lock cannot be had, and while it is queued for, claims queue
// behind it. Maintenance waits for it at most MaintenanceLockTimeout and
// gives up (a later pass retries), so no claim waits longer than that.
func TestPartitionAttachBesideDefaultPartitionWaitsBriefly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	finishedKey(t, b, day(110).Add(time.Hour), "old", true) // creates days 109..113
	_, err := b.pool.Exec(ctx, `CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT`)
	require.NoError(t, err)

	reader, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer reader.Rollback(ctx) //nolint:errcheck // committed below
	var n int
	require.NoError(t, reader.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n))

	maint := testdb.Pool(t, b.url, day(113).Add(time.Hour)) // needs days 114..116
	clients := testdb.Pool(t, b.url, day(110).Add(2*time.Hour), func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(claimLockTimeout.Milliseconds())
	})
	maintErr := make(chan error, 1)
	go func() {
		_, err := idempotency.EnsurePartitions(ctx, maint)
		maintErr <- err
	}()
	var slowest time.Duration
	deadline := time.Now().Add(2 * idempotency.MaintenanceLockTimeout)
	for i := 0; time.Now().Before(deadline); i++ {
		start := time.Now()
		_, _, err := claim(ctx, clients, b.store, b.tenant, fmt.Sprintf("k%d", i), b.req)
		require.NoError(t, err, "claim %d", i)
		slowest = max(slowest, time.Since(start))
	}
	err = <-maintErr
	require.Error(t, err, "the ATTACH cannot have its lock while the reader runs")
	t.Logf("slowest claim beside the queued ATTACH: %s; maintenance: %v", slowest, err)
	require.Less(t, slowest, idempotency.MaintenanceLockTimeout+claimLockTimeout/4)

	// Once the reader is gone, the next pass creates the days.
	require.NoError(t, reader.Commit(ctx))
	created, err := idempotency.EnsurePartitions(ctx, maint)
	require.NoError(t, err)
	require.Equal(t, 3, created)
}
