package idempotency_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// seedBacklogSQL: a PSP outage's backlog of tenant $1, keys 1..$2 claimed
// in the last hour, every other one overdue (its next attempt an hour
// ago), the others waiting for theirs; and as many finished ones, the day's
// normal traffic.
const seedBacklogSQL = `
INSERT INTO idempotency_keys (tenant_id, key, created_at, fingerprint, request_method, request_path, request_body,
                              state, recovery_point, attempts, next_attempt_at,
                              response_status, response_content_type, response_body, finished_at)
SELECT $1, s.state || '-' || g, phasepay_now() - (g % 3600) * interval '1 second', sha256(int8send(g)),
       'POST', '/v1/things', '{}', s.state, s.state, 3,
       CASE WHEN s.state = 'done' THEN NULL
            ELSE phasepay_now() + CASE WHEN g % 2 = 0 THEN interval '-1 hour' ELSE interval '1 hour' END END,
       CASE WHEN s.state = 'done' THEN 201 END, CASE WHEN s.state = 'done' THEN 'application/json' END,
       CASE WHEN s.state = 'done' THEN '{}'::bytea END, CASE WHEN s.state = 'done' THEN phasepay_now() END
  FROM generate_series(1, $2::int) g, (VALUES ('started'), ('done')) s (state)`

// pitfall Q8 "A LIMIT the plan cannot see": beside a backlog of 20,000
// started keys (half due) and 20,000 finished ones, the reaper's takeover
// of 4 keys reads 4 keys, and its census at most CensusLimit of each kind,
// in the one generic plan phasepay's connections make. The takeover's
// batch size was a parameter, LIMIT $1, which a generic plan takes to
// return a tenth of the keys due: it joined 1,000 estimated keys with a
// hash of every key of every day kept, read whole (Seq Scan, 40,002
// rows), at every takeover. The census counted every unfinished key.
func TestReaperPassesReadWhatTheyTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const backlog = 20_000
	_, err := b.pool.Exec(ctx, seedBacklogSQL, b.tenant, backlog)
	require.NoError(t, err)
	// As autovacuum would soon after such a growth (the test server runs
	// without it).
	_, err = b.pool.Exec(ctx, `ANALYZE idempotency_keys`)
	require.NoError(t, err)

	var plans testdb.Plans
	pool := plans.PlansPool(t, b.url)
	for range 2 {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		leases, err := b.store.TakeOverExpired(ctx, tx, 4)
		require.NoError(t, err)
		require.Len(t, leases, 4)
		require.NoError(t, tx.Rollback(ctx))
	}
	c, err := b.store.TakeCensus(ctx, pool, 10*time.Second)
	require.NoError(t, err)
	// Past its limit, a count reads the limit: "at least".
	require.Equal(t, idempotency.Census{Waiting: idempotency.CensusLimit, Overdue: idempotency.CensusLimit, OverdueMaxAttempts: 3}, c)

	read := plans.Of("idempotency_keys")
	require.NotEmpty(t, read)
	var heavy []string
	for _, plan := range read {
		scanned, removed := testdb.Reads(plan)
		// A takeover reads the 4 keys it takes; the census, up to its
		// limit of each kind.
		limit := 4
		if strings.Contains(plan, "WITH recent AS") {
			limit = idempotency.CensusLimit
		}
		if removed > 100 || scanned > limit {
			heavy = append(heavy, fmt.Sprintf("%d rows thrown away, %d read by one scan (at most %d):\n%s", removed, scanned, limit, plan))
		}
	}
	require.Empty(t, heavy, "statements that read the backlog instead of what they take")

	// Below it, a count is exact.
	_, err = b.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE state = 'started' AND key NOT IN ('started-1', 'started-2', 'started-3')`)
	require.NoError(t, err)
	c, err = b.store.TakeCensus(ctx, pool, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, idempotency.Census{Waiting: 2, Overdue: 1, OverdueMaxAttempts: 3}, c)
}
