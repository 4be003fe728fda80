package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// genericPlans is a pool option: one connection, which plans each
// statement once (as dbpool.ConfigurePool sets every process's).
func genericPlans(cfg *pgxpool.Config) {
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
}

// Pitfall R5 "A plan that outlives its partition". The day read's plan,
// kept by the connection, names the partition it pruned to. Retention
// detaches that partition and drops it (or dies between the two, or leaves
// a concurrent detach pending), and the key is claimed anew on another
// day. The connection that planned the read must plan it again: not read
// the old table (another request's answer) nor fail on a table gone (a
// 500), while reads go on around the change.
func TestPlanThatOutlivesItsPartitionIsMadeAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	days := map[string]time.Time{"dropped": day(60), "detached": day(61), "pending": day(62)}
	later := day(65).Add(time.Hour)
	for key, d := range days {
		finishedKey(t, b, d.Add(time.Hour), key, true)
	}
	laterPool := testdb.Pool(t, b.url, later)
	_, err := idempotency.EnsurePartitions(ctx, laterPool)
	require.NoError(t, err)

	q := testdb.Pool(t, b.url, later, genericPlans)
	for key, d := range days {
		for range 2 { // prepared, then run from the plan kept
			rec, err := peekDay(t, b, q, key, d, true)
			require.NoError(t, err, key)
			require.Equal(t, b.req.Fingerprint, rec.Request.Fingerprint, key)
		}
	}

	// Reads of every key go on, on the same connection, while retention
	// acts.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readErrs []error
	wg.Go(func() {
		for {
			for key, d := range days {
				select {
				case <-stop:
					return
				default:
				}
				// Not found, once the key's day is gone, is the answer.
				_, _, err := b.store.PeekDay(ctx, q, b.tenant, key, d)
				if err != nil && !errors.Is(err, idempotency.ErrNotFound) {
					readErrs = append(readErrs, err)
				}
			}
		}
	})

	_, err = b.pool.Exec(ctx, `ALTER TABLE idempotency_keys DETACH PARTITION `+partitionName(days["dropped"])+` CONCURRENTLY`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `DROP TABLE `+partitionName(days["dropped"]))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ALTER TABLE idempotency_keys DETACH PARTITION `+partitionName(days["detached"])+` CONCURRENTLY`)
	require.NoError(t, err)
	leaveDetachPending(t, b, partitionName(days["pending"]))
	close(stop)
	wg.Wait()
	require.Empty(t, readErrs, "reads while the partitions went")

	anew, err := idempotency.Canonicalize("POST", "/v1/things", []byte(`{"n":4}`))
	require.NoError(t, err)
	for key, d := range days {
		_, created, err := claim(ctx, laterPool, b.store, b.tenant, key, anew)
		require.NoError(t, err)
		require.True(t, created, "%s: claimed anew once its day is gone", key)

		rec, err := peekDay(t, b, q, key, d, false)
		require.NoError(t, err, key)
		require.Equal(t, anew.Fingerprint, rec.Request.Fingerprint, "%s: the new row, not the old", key)
		require.Equal(t, later, rec.CreatedAt.UTC(), key)
	}
}

// leaveDetachPending starts DETACH PARTITION … CONCURRENTLY on partition
// while a transaction reads the parent, and cancels it in its wait for
// that reader: the partition stays attached, detach pending, as a
// retention pass that died there leaves it.
func leaveDetachPending(t *testing.T, b *testBundle, partition string) {
	t.Helper()
	ctx := context.Background()
	reader, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, reader.Rollback(ctx)) }()
	_, err = reader.Exec(ctx, `SELECT FROM idempotency_keys LIMIT 0`)
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	detachCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(detachCtx, `ALTER TABLE idempotency_keys DETACH PARTITION `+partition+` CONCURRENTLY`)
		done <- err
	}()
	require.Eventually(t, func() bool {
		var pending bool
		err := b.pool.QueryRow(ctx, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = $1::regclass`, partition).Scan(&pending)
		return err == nil && pending
	}, 10*time.Second, 10*time.Millisecond, "the detach marked pending")
	cancel()
	require.Error(t, <-done, "the detach cancelled in its wait")
	var pending bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = $1::regclass`, partition).Scan(&pending))
	require.True(t, pending, "left pending")
}

// Pitfall Q7 "A day read planned before its day had statistics". A day's
// partition is read by its primary key even while the partition has no
// statistics yet (the first minutes of each day, or a server without
// autovacuum): its plan is made once per connection, and a plan through
// idempotency_keys_tenant_created walks the tenant's every key of the day.
func TestDayReadTakesThePrimaryKeyWithoutStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(70)
	finishedKey(t, b, d.Add(time.Hour), "k", true)
	// The tenant's other keys of the day, never analyzed.
	_, err := b.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (tenant_id, key, created_at, fingerprint, request_method, request_path, request_body,
		                              state, response_status, response_content_type, response_body)
		SELECT $1, 'other-' || g, $2::timestamptz + g * interval '1 second', fingerprint, request_method, request_path,
		       request_body, state, response_status, response_content_type, response_body
		  FROM idempotency_keys, generate_series(1, 3000) g WHERE tenant_id = $1 AND key = 'k'`, b.tenant, d.Add(2*time.Hour))
	require.NoError(t, err)
	var analyzed bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT reltuples >= 0 FROM pg_class WHERE oid = $1::regclass`, partitionName(d)).Scan(&analyzed))
	require.False(t, analyzed, "the day's partition has no statistics")

	conn, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE day_read (bigint, text) AS `+idempotency.PeekDayStatementForTest(d))
	require.NoError(t, err)
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE day_read (0, 'k')`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "Index Scan using "+partitionName(d)+"_pkey", "the generic plan:\n%s", plan)
	require.Contains(t, plan, "Index Cond: ((tenant_id = $1) AND (key >= $2) AND (key <= $2)", "the generic plan:\n%s", plan)
}

// The day read names its own day's bounds, whichever days share its slot
// among the statements kept.
func TestPeekDayStatementNamesItsDay(t *testing.T) {
	t.Parallel()
	d := time.Date(2026, 12, 7, 15, 4, 5, 0, time.FixedZone("UTC-10", -10*3600)) // 2026-12-08 01:04 UTC
	for _, day := range []time.Time{d, d.AddDate(0, 0, 8), d, d.AddDate(0, 0, 1)} {
		sql := idempotency.PeekDayStatementForTest(day)
		from := day.UTC().Format("2006-01-02")
		to := day.UTC().AddDate(0, 0, 1).Format("2006-01-02")
		require.Contains(t, sql, "created_at >= '"+from+"T00:00:00Z' AND created_at < '"+to+"T00:00:00Z'")
	}
}
