package webhooks

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// A claim visits at most EndpointsPerPass of a tenant's endpoints with
// pending deliveries, from where the pass starts, wrapping round: a tenant
// with more (deleted endpoints still owed deliveries) has them visited in
// turn, each pass costing the same. One due delivery at each of 40
// endpoints, we_00 to we_39: a pass from we_20 takes those of we_20 to
// we_39 and then we_00 to we_11; one from before every id, we_00 to we_31.
func TestClaimWalksATenantsEndpointsInTurn(t *testing.T) {
	t.Parallel()
	require.Equal(t, 32, EndpointsPerPass, "what the walks below expect")
	ctx := context.Background()
	pool := testdb.New(t)
	var tenant int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))
	_, err := pool.Exec(ctx, `
WITH ep AS (
    INSERT INTO webhook_endpoints (tenant_id, id, url, events, secret, deleted_at)
    SELECT $1, 'we_' || lpad(g::text, 2, '0'), 'https://example.com/' || g, '{*}', 'whsec_x', phasepay_now()
      FROM generate_series(0, 39) g
    RETURNING tenant_id, id
), ev AS (
    INSERT INTO events (tenant_id, id, type, created_at, body)
    SELECT tenant_id, 'evt_' || id, 'charge.declined', phasepay_now() - interval '1 minute', '{}' FROM ep
    RETURNING tenant_id, id, created_at
)
INSERT INTO webhook_deliveries (tenant_id, event_id, event_created_at, endpoint_id, next_attempt_at)
SELECT tenant_id, id, created_at, substring(id FROM 5), created_at FROM ev`, tenant)
	require.NoError(t, err)

	// One slot per endpoint, and room for every endpoint walked.
	sql := withLimits(candidatesSQL, caps{parallelism: 64, perHost: 64, perEndpoint: 1})
	endpointsFrom := func(start string, excluded ...string) []string {
		rows, err := pool.Query(ctx, sql, start, append([]string{}, excluded...), []string{}, []string{}, []int64{})
		require.NoError(t, err)
		cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[candidate])
		require.NoError(t, err)
		var eps []string
		for _, c := range cands {
			eps = append(eps, c.EndpointID)
		}
		slices.Sort(eps)
		return eps
	}
	ids := func(from, to int) []string {
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, fmt.Sprintf("we_%02d", i))
		}
		return out
	}
	require.Equal(t, ids(0, 31), endpointsFrom(""))
	require.Equal(t, append(ids(0, 11), ids(20, 39)...), endpointsFrom("we_20"))
	// A start past every id wraps to the first.
	require.Equal(t, ids(0, 31), endpointsFrom("we_zz"))
	// An endpoint left out still costs its step of the walk, and nothing
	// else: its delivery is not read.
	require.Equal(t, append(ids(0, 11), ids(21, 39)...), endpointsFrom("we_20", "we_20"))
}
