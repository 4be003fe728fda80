package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A plan keeps every node but the scans of day partitions that returned
// and read nothing, and says how many it left out: a scan that threw every
// row away stays.
func TestTrimPlanLeavesOutEmptyPartitions(t *testing.T) {
	t.Parallel()
	plan := `Limit  (cost=0.85..4.62 rows=1 width=8) (actual rows=1 loops=1)
  ->  Merge Append  (cost=0.85..1162.56 rows=308 width=8) (actual rows=1 loops=1)
        Sort Key: webhook_deliveries.tenant_id
        ->  Index Only Scan using webhook_deliveries_p20261206_idx on webhook_deliveries_p20261206 d_1  (cost=0.12..12.15 rows=2 width=8) (actual rows=0 loops=1)
              Heap Fetches: 0
              Buffers: shared hit=1
        ->  Index Only Scan using webhook_deliveries_p20261207_idx on webhook_deliveries_p20261207 d_2  (cost=0.29..1112.79 rows=300 width=8) (actual rows=1 loops=1)
              Buffers: shared hit=3
        ->  Seq Scan on webhook_deliveries_p20261208 d_3  (never executed)
              Filter: (state = 'pending'::text)
        ->  Index Scan using webhook_deliveries_p20261209_idx on webhook_deliveries_p20261209 d_4  (cost=0.42..9.9 rows=1 width=8) (actual rows=0 loops=1)
              Filter: (endpoint_id <> ALL ($2))
              Rows Removed by Filter: 99996
  SubPlan 1
    ->  Result  (cost=0.00..0.01 rows=1 width=4) (actual rows=1 loops=1)
Execution Time: 0.1 ms`
	require.Equal(t, `Limit  (cost=0.85..4.62 rows=1 width=8) (actual rows=1 loops=1)
  ->  Merge Append  (cost=0.85..1162.56 rows=308 width=8) (actual rows=1 loops=1)
        Sort Key: webhook_deliveries.tenant_id
        ->  Index Only Scan using webhook_deliveries_p20261207_idx on webhook_deliveries_p20261207 d_2  (cost=0.29..1112.79 rows=300 width=8) (actual rows=1 loops=1)
              Buffers: shared hit=3
        ->  Index Scan using webhook_deliveries_p20261209_idx on webhook_deliveries_p20261209 d_4  (cost=0.42..9.9 rows=1 width=8) (actual rows=0 loops=1)
              Filter: (endpoint_id <> ALL ($2))
              Rows Removed by Filter: 99996
  SubPlan 1
    ->  Result  (cost=0.00..0.01 rows=1 width=4) (actual rows=1 loops=1)
Execution Time: 0.1 ms
(2 scans of day partitions that returned and read no row left out)`, trimPlan(plan))
	require.Equal(t, "10³", rowsLabel(1000))
	require.Equal(t, "10⁶", rowsLabel(1_000_000))
	require.Equal(t, "2500", rowsLabel(2500))
}
