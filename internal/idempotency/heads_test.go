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

// dayPartitionsLocked counts the days whose partition (or one of its
// indexes) this transaction's backend holds a lock on: the relations its
// statements opened.
func dayPartitionsLocked(t *testing.T, tx pgx.Tx) int {
	t.Helper()
	var n int
	require.NoError(t, tx.QueryRow(context.Background(), `
		SELECT count(DISTINCT substring(c.relname from '^idempotency_keys_p([0-9]{8})')) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		 WHERE l.pid = pg_backend_pid() AND c.relname ~ '^idempotency_keys_p[0-9]{8}'`).Scan(&n))
	return n
}

// dayPartitionsScanned counts the days whose partition f made this
// backend read (an index or sequential scan), which is less than it may
// have locked: a generic plan locks every partition when it starts
// (PostgreSQL 15), then prunes to the ones the values select, and reads
// only those. (The backend's counters, read before and after: they may
// hold counts of earlier transactions not yet reported.)
func dayPartitionsScanned(t *testing.T, tx pgx.Tx, f func()) int {
	t.Helper()
	scans := func() map[string]int64 {
		rows, err := tx.Query(context.Background(), `
			SELECT relname, coalesce(idx_scan, 0) + seq_scan FROM pg_stat_xact_user_tables
			 WHERE relname ~ '^idempotency_keys_p[0-9]{8}$'`)
		require.NoError(t, err)
		m := map[string]int64{}
		var (
			name string
			n    int64
		)
		_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { m[name] = n; return nil })
		require.NoError(t, err)
		return m
	}
	before := scans()
	f()
	scanned := 0
	for name, n := range scans() {
		if n > before[name] {
			scanned++
		}
	}
	return scanned
}

// A claim and a lookup whose cost grew with the days kept: each probed every
// daily partition, and a new key is a miss in all of them. Through the
// heads (migrations/00008), with 30 days kept, a lookup of a missing key
// opens no day partition, a lookup of an existing key reads only its own
// day, and a claim of a new key opens only today's.
func TestClaimCostIndependentOfPartitionCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.pool.Exec(ctx, `SELECT idempotency_keys_ensure_partitions((phasepay_now() AT TIME ZONE 'UTC')::date - 29, 30)`)
	require.NoError(t, err)
	var parts int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'idempotency_keys'::regclass`).Scan(&parts))
	require.GreaterOrEqual(t, parts, 30)
	finishedKey(t, b, day(-10).Add(time.Hour), "old", true)

	// Several times each, so that cached generic plans are in use too.
	for range 8 {
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.store.Lookup(ctx, tx, b.tenant, "missing")
			require.ErrorIs(t, err, idempotency.ErrNotFound)
			require.Zero(t, dayPartitionsLocked(t, tx), "a missing key's lookup opened day partitions")
			return nil
		}))
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			// Its row is read by a static query whose plan, once generic,
			// locks every day (migrations/00014), but reads only its own.
			require.Equal(t, 1, dayPartitionsScanned(t, tx, func() {
				rec, err := b.store.Lookup(ctx, tx, b.tenant, "old")
				require.NoError(t, err)
				require.Equal(t, "old", rec.Key)
			}), "an existing key's lookup read other days")
			return nil
		}))
		require.ErrorIs(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, created, err := b.store.Claim(ctx, tx, idempotency.ClaimParams{TenantID: b.tenant, Key: "new", Request: b.req})
			require.NoError(t, err)
			require.True(t, created)
			require.Equal(t, 1, dayPartitionsLocked(t, tx), "a new key's claim opened other days")
			return errRollback
		}), errRollback)
	}
}

var errRollback = errors.New("rolled back on purpose")

// A key row written without a claim (a fixture, an operator's INSERT) must
// not be invisible to claims: the trigger gives it its head, so a claim of
// the same key finds it instead of creating a second row.
func TestKeyInsertedDirectlyIsFoundByClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body)
		VALUES ($1, 'direct', $2, 'POST', '/v1/things', '{}')`, b.tenant, b.req.Fingerprint[:])
	require.NoError(t, err)
	_, created, err := claim(ctx, b.pool, b.store, b.tenant, "direct", b.req)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 1, countRows(t, b.pool, b.tenant, "direct"))
}

// Retention drops a month of heads only with the last day of that month or
// before: a head outlives its key's day at most by a month, and no head of a
// key still stored is ever dropped. A head whose day is gone is a miss, and
// the key can be claimed again.
func TestHeadMonthDroppedWithItsLastDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// Two days of a month a year back, one day of the next month.
	m := time.Date(time.Now().UTC().Year()-1, time.March, 1, 0, 0, 0, 0, time.UTC)
	first, second, next := m.AddDate(0, 0, 9), m.AddDate(0, 0, 19), m.AddDate(0, 1, 4)
	finishedKey(t, b, first.Add(time.Hour), "a", true)
	finishedKey(t, b, second.Add(time.Hour), "b", true)
	finishedKey(t, b, next.Add(time.Hour), "c", true)
	month := "idempotency_key_heads_p" + m.Format("200601")

	// The first day goes; its month stays for the second's key.
	report, err := idempotency.DropExpiredPartitions(ctx, testdb.Pool(t, b.url, first.Add(72*time.Hour)), 24*time.Hour)
	require.NoError(t, err)
	require.Contains(t, report.Dropped, partitionName(first))
	require.Empty(t, report.DroppedHeads)
	require.True(t, partitionExists(t, b.pool, month))
	_, err = b.store.Lookup(ctx, b.pool, b.tenant, "a")
	require.ErrorIs(t, err, idempotency.ErrNotFound, "a head whose day was dropped is a miss")
	rec, err := b.store.Lookup(ctx, b.pool, b.tenant, "b")
	require.NoError(t, err)
	require.Equal(t, "b", rec.Key)
	finishedKey(t, b, second.Add(2*time.Hour), "a", true) // a forgotten key is a new request
	rec, err = b.store.Lookup(ctx, b.pool, b.tenant, "a")
	require.NoError(t, err)
	require.Equal(t, second.Add(2*time.Hour), rec.CreatedAt.UTC(), "the newest head wins")

	// Early next month every day of the month has expired and goes: the
	// month of heads has no day left, and goes too; the next month stays
	// with its day.
	report, err = idempotency.DropExpiredPartitions(ctx, testdb.Pool(t, b.url, m.AddDate(0, 1, 2)), 24*time.Hour)
	require.NoError(t, err)
	require.Contains(t, report.Dropped, partitionName(second))
	require.Equal(t, []string{month}, report.DroppedHeads)
	require.False(t, partitionExists(t, b.pool, month))
	rec, err = b.store.Lookup(ctx, b.pool, b.tenant, "c")
	require.NoError(t, err)
	require.Equal(t, "c", rec.Key)
}

// A key in an operator's DEFAULT partition (the runbook's missed day) is
// found through its head like any other, so its month of heads must
// outlive every named day partition of that month: retention counts the
// DEFAULT partition's keys too. Counting only named day partitions, it
// dropped the month's heads, the started key became invisible to claims,
// and a client's retry claimed it anew: a second charge, while the reaper
// still drove the first.
func TestRetentionKeepsTheHeadsOfKeysInTheDefaultPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	m := time.Date(time.Now().UTC().Year()-1, time.March, 1, 0, 0, 0, 0, time.UTC)
	missed, later := m.AddDate(0, 0, 5), m.AddDate(0, 2, 0)
	_, err := b.pool.Exec(ctx, `CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT`)
	require.NoError(t, err)
	// A day nobody partitioned: its key lands in the DEFAULT partition,
	// its head in the month's partition of heads.
	then := testdb.Pool(t, b.url, missed.Add(time.Hour))
	_, err = then.Exec(ctx, `SELECT idempotency_key_heads_ensure_month($1)`, missed)
	require.NoError(t, err)
	_, created, err := claim(ctx, then, b.store, b.tenant, "stuck", b.req)
	require.NoError(t, err)
	require.True(t, created)
	var where string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM idempotency_keys WHERE key = 'stuck'`).Scan(&where))
	require.Equal(t, "idempotency_keys_default", where)
	// Two months on, with day partitions of their own.
	finishedKey(t, b, later.Add(time.Hour), "c", true)

	report, err := idempotency.DropExpiredPartitions(ctx, testdb.Pool(t, b.url, later.Add(2*time.Hour)), 24*time.Hour)
	require.NoError(t, err)
	require.NotContains(t, report.DroppedHeads, "idempotency_key_heads_p"+m.Format("200601"))
	rec, err := b.store.Lookup(ctx, b.pool, b.tenant, "stuck")
	require.NoError(t, err, "the key in the DEFAULT partition is still found")
	require.Equal(t, idempotency.StateStarted, rec.State)
	_, created, err = claim(ctx, testdb.Pool(t, b.url, later.Add(3*time.Hour)), b.store, b.tenant, "stuck", b.req)
	require.NoError(t, err)
	require.False(t, created, "a retry finds the key, never claims it anew")
}
