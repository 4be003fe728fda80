package idempotency_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// TestReaperQueryReadsOnlyDueKeys: the reaper's pick of due keys must stay
// cheap however many keys are kept (10 M finished keys in a day is normal):
// the plan walks the partial index idempotency_keys_due, which holds only
// unfinished keys, in due order, and stops at its LIMIT. A plan that scans
// the table, or the primary key, would read every finished key on every
// pass. docs/operations.md shows the plan.
func TestReaperQueryReadsOnlyDueKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// 50,000 finished keys and 2,000 unfinished ones, due, with fresh
	// statistics. With only a handful unfinished, walking the due index
	// and sorting what idempotency_keys_unfinished holds cost the same,
	// and ANALYZE's sample decided between them (a loaded .ci/run got the
	// other plan); with a backlog, as in a PSP outage, only the walk in
	// due order stops at the LIMIT.
	seedFinishedKeys(t, b, 50_000)
	for _, k := range []string{"u1", "u2", "u3"} {
		rec, _, err := claim(ctx, b.pool, b.store, b.tenant, k, b.req)
		require.NoError(t, err)
		_, err = b.store.LeaseOf(rec).Release(ctx, b.pool, nil, 0)
		require.NoError(t, err)
	}
	_, err := b.pool.Exec(ctx, `
INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body, recovery_point)
SELECT $1, 'waiting-' || i, $2, 'POST', '/v1/things', '{}', 'start'
  FROM generate_series(1, 2000) i`, b.tenant, b.req.Fingerprint[:])
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE idempotency_keys`)
	require.NoError(t, err)

	var part string
	require.NoError(t, b.pool.QueryRow(ctx,
		`SELECT 'idempotency_keys_p' || to_char(phasepay_now() AT TIME ZONE 'UTC', 'YYYYMMDD')`).Scan(&part))
	plan := explain(t, b, idempotency.DueKeysSQLForTest)
	// Each partition's copy of idempotency_keys_due is named after it.
	require.Regexp(t, `Index Scan using `+part+`_greatest_idx on `+part, plan)
	require.NotContains(t, plan, "Seq Scan on "+part, "no sequential scan of the full partition:\n%s", plan)
	t.Logf("plan of the reaper's pick:\n%s", plan)

	// The same in the one generic plan that phasepay's connections reuse
	// (dbpool.PlanCacheModeDefault).
	generic := testdb.Pool(t, b.url, time.Time{}, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	})
	conn, err := generic.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `PREPARE due AS `+idempotency.DueKeysSQLForTest)
	require.NoError(t, err)
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE due`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan = strings.Join(lines, "\n")
	require.Regexp(t, `Index Scan using `+part+`_greatest_idx on `+part, plan)
	require.NotContains(t, plan, "Seq Scan on "+part, "no sequential scan of the full partition:\n%s", plan)
}

func explain(t *testing.T, b *testBundle, sql string, args ...any) string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "EXPLAIN "+sql, args...)
	require.NoError(t, err)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}

// phasepay's connections reuse one generic plan per statement
// (dbpool.PlanCacheModeDefault). A generic plan of the key lists, whose
// filters are optional ("$2 = ” OR …"), would read every key of every day
// kept to find a page; the lists are sent with their values instead, and
// planned for them: a state filter reads the partial index of unfinished
// keys, a cursor is an index range. auto_explain shows the plans the
// lists actually ran with.
func TestListsArePlannedForTheirValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	seedFinishedKeys(t, b, 50_000)
	_, _, err := claim(ctx, b.pool, b.store, b.tenant, "stuck", b.req)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'needs_attention', locked_until = NULL WHERE key = 'stuck'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE idempotency_keys`)
	require.NoError(t, err)

	var (
		mu    sync.Mutex
		plans []string
	)
	generic := testdb.Pool(t, b.url, time.Time{}, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			defer mu.Unlock()
			plans = append(plans, n.Message)
		}
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_level = notice`)
			return err
		}
	})
	// planOf runs list twice (a generic plan would be made for the second)
	// and returns the plan of the second run.
	planOf := func(list func() ([]idempotency.View, error)) ([]idempotency.View, string) {
		_, err := list()
		require.NoError(t, err)
		mu.Lock()
		plans = nil
		mu.Unlock()
		views, err := list()
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, plans)
		return views, plans[len(plans)-1]
	}
	// idempotency_keys_unfinished's copy on each partition, or
	// idempotency_keys_needs_attention's (migrations/00026), whose copies
	// are named alike but for a digit.
	unfinished := `Index Scan (Backward )?using idempotency_keys_p\d{8}_tenant_id_created_at_idx1? `

	views, plan := planOf(func() ([]idempotency.View, error) {
		return idempotency.List(ctx, generic, idempotency.Filter{State: idempotency.RequestNeedsAttention})
	})
	require.Len(t, views, 1)
	require.Regexp(t, unfinished, plan)

	views, plan = planOf(func() ([]idempotency.View, error) {
		return idempotency.ListViews(ctx, generic, b.tenant, idempotency.RequestNeedsAttention, "", 10)
	})
	require.Len(t, views, 1)
	require.Equal(t, "stuck", views[0].Key)
	require.Regexp(t, unfinished, plan)

	views, plan = planOf(func() ([]idempotency.View, error) {
		return idempotency.ListViews(ctx, generic, b.tenant, "", "done-7", 3)
	})
	require.Len(t, views, 3)
	require.Regexp(t, `Index Cond: .*ROW\(created_at, key\) < ROW\(`, plan)
}

// seedFinishedKeys stores n finished keys of b's tenant, done-1 to done-n.
func seedFinishedKeys(t *testing.T, b *testBundle, n int) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `
INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body,
                              state, recovery_point, response_status, response_content_type, response_body, finished_at)
SELECT $1, 'done-' || i, $2, 'POST', '/v1/things', '{}', 'done', 'done', 201, 'application/json', '{}', phasepay_now()
  FROM generate_series(1, $3::int) i`, b.tenant, b.req.Fingerprint[:], n)
	require.NoError(t, err)
}
