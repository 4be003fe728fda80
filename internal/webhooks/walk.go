package webhooks

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The deliverers' statements that look at due work (the claim, the backlog
// gauges) reach it the same way: from one tenant with pending deliveries
// to the next, then from one of the tenant's endpoints with pending
// deliveries to the next, along webhook_deliveries_endpoint_due, one index
// probe per step, and read an endpoint's deliveries only from there. What
// they cost grows with the tenants and endpoints that have work, never
// with the deliveries piled up at any of them.

// busySQL is the body of a recursive CTE busy (tenant_id): every tenant
// with pending deliveries, by a skip scan (one probe per tenant, however
// many deliveries each has), ending with a NULL.
const busySQL = `
    (SELECT tenant_id FROM webhook_deliveries WHERE state = 'pending' ORDER BY tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT d.tenant_id FROM webhook_deliveries d
             WHERE d.state = 'pending' AND d.tenant_id > busy.tenant_id
             ORDER BY d.tenant_id LIMIT 1)
      FROM busy
     WHERE busy.tenant_id IS NOT NULL`

// walkSQL is the body of a recursive CTE walk (endpoint_id, n, wrapped)
// inside a lateral on busy: tenant busy.tenant_id's endpoints with pending
// deliveries, stepped through by the same skip scan, at most {{endpoints}}
// of them (the tenant's budget of a pass). It starts at $1 and wraps
// round, so that a tenant with more endpoints than that (deleted ones
// still owed deliveries: nothing else bounds how many) has them visited in
// turn, as $1 moves, rather than every one at every pass. Each step's two
// branches are tried in order (the first that finds a row ends the step):
// the next endpoint after this one, unless the walk has wrapped; then the
// first one after this one (or from the start, once wrapped) below $1.
const walkSQL = `
        (SELECT first.endpoint_id, 1, first.wrapped
           FROM ((SELECT d.endpoint_id, false AS wrapped FROM webhook_deliveries d
                   WHERE d.state = 'pending' AND d.tenant_id = busy.tenant_id AND d.endpoint_id >= $1
                   ORDER BY d.endpoint_id LIMIT 1)
                 UNION ALL
                 (SELECT d.endpoint_id, true FROM webhook_deliveries d
                   WHERE d.state = 'pending' AND d.tenant_id = busy.tenant_id
                   ORDER BY d.endpoint_id LIMIT 1)) first
          LIMIT 1)
        UNION ALL
        SELECT next.endpoint_id, walk.n + 1, next.wrapped
          FROM walk
         CROSS JOIN LATERAL (
            (SELECT d.endpoint_id, false AS wrapped FROM webhook_deliveries d
              WHERE NOT walk.wrapped
                AND d.state = 'pending' AND d.tenant_id = busy.tenant_id AND d.endpoint_id > walk.endpoint_id
              ORDER BY d.endpoint_id LIMIT 1)
            UNION ALL
            (SELECT d.endpoint_id, true FROM webhook_deliveries d
              WHERE d.state = 'pending' AND d.tenant_id = busy.tenant_id
                AND d.endpoint_id > CASE WHEN walk.wrapped THEN walk.endpoint_id ELSE '' END
                AND d.endpoint_id < $1
              ORDER BY d.endpoint_id LIMIT 1)
            LIMIT 1) next
         WHERE walk.n < {{endpoints}}`

// EndpointsPerPass is how many of a tenant's endpoints with pending
// deliveries one pass visits (walkSQL): twice the live endpoints a tenant
// may have, so that only a tenant with many deleted endpoints still owed
// deliveries has them visited in turn.
const EndpointsPerPass = 2 * MaxEndpoints

// CountLimit is where the backlog gauges stop counting (backlogSQL): a
// count reads what it counts, so a larger backlog shows as CountLimit,
// "at least", and costs no more to measure.
const CountLimit = 1000

// walkStart is where a pass starts walking each tenant's endpoints ($1 of
// walkSQL): a point drawn at random among endpoint ids ("we_" and 24 hex
// digits).
func walkStart() string { return "we_" + randomHex(12) }

// withLimits fills a statement's limits: the walk's budget, and for the
// claim the most a pass takes at one endpoint and from one tenant (c). A
// generic plan cannot see a LIMIT $n; it takes it to return a tenth of
// what it limits, and with that estimate the claim's cost passed
// jit_above_cost: every pass would have been compiled first.
func withLimits(sql string, c caps) string {
	return strings.NewReplacer(
		"{{endpoints}}", strconv.Itoa(EndpointsPerPass),
		"{{per_endpoint}}", strconv.Itoa(min(c.perEndpoint, c.parallelism)),
		"{{per_tenant}}", strconv.Itoa(c.parallelism),
		"{{count_limit}}", strconv.Itoa(CountLimit),
	).Replace(sql)
}

// batcher sends statements in one exchange: a pool, a connection or a
// transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// noJITSQL turns JIT compilation off until the end of the transaction.
const noJITSQL = `SELECT set_config('jit', 'off', true)`

// collectWithoutJIT runs sql, planned with JIT compilation off, and
// collects its rows with scan. A statement that walks every tenant with
// pending deliveries has a generic plan whose estimated cost grows with
// the day partitions kept (its walks probe each), and past
// jit_above_cost every execution of a cached generic plan compiles it
// first, tens of milliseconds for a statement that runs in one or two: the
// claim's cost passes it at about 100 days kept, the gauges' at about 50.
// The plan's JIT decision is made when it is planned, so the setting goes
// in the same exchange, its own implicit transaction (set_config is_local),
// before each execution: a plan made again (new statistics) is made with
// it too. The same holds behind a transaction pooler.
func collectWithoutJIT[T any](ctx context.Context, q batcher, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	var b pgx.Batch
	b.Queue(noJITSQL)
	b.Queue(sql, args...)
	br := q.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, err
	}
	return out, br.Close()
}
