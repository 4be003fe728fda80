package idempotency_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
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
	// 50,000 finished keys and a few unfinished ones, with fresh statistics.
	_, err := b.pool.Exec(ctx, `
INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body,
                              state, recovery_point, response_status, response_content_type, response_body, finished_at)
SELECT $1, 'done-' || i, $2, 'POST', '/v1/things', '{}', 'done', 'done', 201, 'application/json', '{}', phasepay_now()
  FROM generate_series(1, 50000) i`, b.tenant, b.req.Fingerprint[:])
	require.NoError(t, err)
	for _, k := range []string{"u1", "u2", "u3"} {
		rec, _, err := claim(ctx, b.pool, b.store, b.tenant, k, b.req)
		require.NoError(t, err)
		_, err = b.store.LeaseOf(rec).Release(ctx, b.pool, nil, 0)
		require.NoError(t, err)
	}
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
