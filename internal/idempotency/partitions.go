package idempotency

import (
	"context"
	"fmt"
)

// PartitionsAhead is how many days of partitions, today included, are kept
// created ahead of the clock; one more day behind covers a clock that lags.
const PartitionsAhead = 4

// ensurePartitionsSQL creates the missing daily partitions from yesterday to
// PartitionsAhead days on (UTC), by the database's clock.
const ensurePartitionsSQL = `
SELECT idempotency_keys_ensure_partitions((phasepay_now() AT TIME ZONE 'UTC')::date - 1, $1 + 1)`

// EnsurePartitions creates the partitions that inserts will need soon and
// returns how many it created. The API runs it at start and the reaper on
// every pass, so an insert never fails for want of a partition.
func EnsurePartitions(ctx context.Context, q DBTX) (int, error) {
	var created int
	if err := q.QueryRow(ctx, ensurePartitionsSQL, PartitionsAhead).Scan(&created); err != nil {
		return 0, fmt.Errorf("ensure partitions: %w", err)
	}
	return created, nil
}
