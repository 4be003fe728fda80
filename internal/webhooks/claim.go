package webhooks

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// A claim takes due deliveries in two statements, with the choice between
// them made here (see fair.go): candidatesSQL finds what is due, tenant by
// tenant, leaving out what this deliverer's caps exclude; pick chooses; and
// claimSQL leases what was chosen, skipping whatever another deliverer took
// in between. The lease and its fencing token are what make it safe
// (several deliverers at once, one that dies loses nothing), as before.

// dueAtExpr is when a pending delivery may be taken: its next attempt due
// and no live lease. Spelled as the index webhook_deliveries_tenant_due.
const dueAtExpr = `greatest(next_attempt_at, coalesce(locked_until, '-infinity'::timestamptz))`

// candidatesSQL lists up to $1 due deliveries of every tenant that has
// pending ones, each tenant's oldest due first.
//
// busy walks webhook_deliveries_tenant_due from one tenant with pending
// deliveries to the next (a skip scan: one index probe per tenant, however
// many deliveries each has), and the lateral reads each tenant's due
// deliveries in due order from the same index, stopping at $1. The tenants
// ($5), endpoints ($2), hosts ($3) and tenants at a host ($4, spelled
// "<tenant id>/<host>") this deliverer has at their cap are left out, so
// that a tenant whose endpoints all hang, with thousands of deliveries
// due, costs one probe, and its backlog is never read while it has its
// share. A tenant whose every live endpoint is left out (at its cap, or
// its host) is not read either: its due deliveries could only be passed
// over, one by one (a tenant whose endpoints all hang on one host holds
// its share of that host long before its share of the slots). One with no
// live endpoint left is read, for the deliveries its deleted endpoints
// are still owed. A claim's cost grows with the tenants that have pending
// deliveries, not with the deliveries.
const candidatesSQL = `
WITH RECURSIVE busy (tenant_id) AS (
    (SELECT tenant_id FROM webhook_deliveries WHERE state = 'pending' ORDER BY tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT d.tenant_id FROM webhook_deliveries d
             WHERE d.state = 'pending' AND d.tenant_id > busy.tenant_id
             ORDER BY d.tenant_id LIMIT 1)
      FROM busy
     WHERE busy.tenant_id IS NOT NULL
)
SELECT c.tenant_id, c.event_id, c.event_created_at, c.endpoint_id, c.host, c.due
  FROM busy
 CROSS JOIN LATERAL (
    SELECT d.tenant_id, d.event_id, d.event_created_at, d.endpoint_id, w.host, ` + dueAtExpr + ` AS due
      FROM webhook_deliveries d
      JOIN webhook_endpoints w ON w.tenant_id = d.tenant_id AND w.id = d.endpoint_id
     WHERE d.tenant_id = busy.tenant_id
       AND d.state = 'pending'
       AND ` + dueAtExpr + ` <= phasepay_now()
       AND d.endpoint_id <> ALL ($2::text[])
       AND w.host <> ALL ($3::text[])
       AND d.tenant_id::text || '/' || w.host <> ALL ($4::text[])
     ORDER BY ` + dueAtExpr + `
     LIMIT $1
 ) c
 WHERE busy.tenant_id IS NOT NULL
   AND busy.tenant_id <> ALL ($5::bigint[])
   AND NOT (EXISTS (SELECT FROM webhook_endpoints w
                     WHERE w.tenant_id = busy.tenant_id AND w.deleted_at IS NULL)
            AND NOT EXISTS (SELECT FROM webhook_endpoints w
                             WHERE w.tenant_id = busy.tenant_id AND w.deleted_at IS NULL
                               AND w.id <> ALL ($2::text[])
                               AND w.host <> ALL ($3::text[])
                               AND w.tenant_id::text || '/' || w.host <> ALL ($4::text[])))`

// tenantHostKey spells a tenant at a host as candidatesSQL compares it.
func tenantHostKey(tenant int64, host string) string {
	return strconv.FormatInt(tenant, 10) + "/" + host
}

// claimSQL leases the picked deliverires ($1…$4, one array per key
// column), skipping rows another deliverer holds (SKIP LOCKED, and the due
// time re-checked against the row's latest version: a row another
// deliverer claimed since it was picked is no longer due). lock_version + 1
// is the new holder's fencing token; the lease ($5 µs) covers one attempt
// and its record.
const claimSQL = `
WITH picked AS (
    SELECT d.tenant_id, d.event_id, d.endpoint_id, d.event_created_at
      FROM webhook_deliveries d
      JOIN unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[])
           AS p (tenant_id, event_id, endpoint_id, event_created_at)
        ON d.tenant_id = p.tenant_id AND d.event_id = p.event_id AND d.endpoint_id = p.endpoint_id
       AND d.event_created_at = p.event_created_at
     WHERE d.state = 'pending'
       AND ` + dueAtExpr + ` <= phasepay_now()
       FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries d
   SET lock_version = d.lock_version + 1,
       locked_until = phasepay_now() + $5 * interval '1 microsecond'
  FROM picked, events e, webhook_endpoints w
 WHERE d.tenant_id = picked.tenant_id AND d.event_id = picked.event_id AND d.endpoint_id = picked.endpoint_id
   AND d.event_created_at = picked.event_created_at
   AND e.tenant_id = d.tenant_id AND e.id = d.event_id AND e.created_at = d.event_created_at
   AND w.tenant_id = d.tenant_id AND w.id = d.endpoint_id
RETURNING d.tenant_id, d.event_id, d.event_created_at, d.endpoint_id, d.lock_version, d.attempts,
          e.body, w.url, w.host, w.secret`

type delivery struct {
	TenantID       int64
	EventID        string
	EventCreatedAt time.Time
	EndpointID     string
	LockVersion    int64
	Attempts       int
	Body           []byte
	URL, Host      string
	Secret         string
}

func (dl delivery) slot() slot {
	return slot{tenant: dl.TenantID, host: dl.Host, endpoint: dl.EndpointID}
}

// RunOnce takes as many due deliveries as there are free slots and its
// caps allow (fair.go), and starts their attempts (in wg); it returns how
// many it started. Each attempt signals wake when it ends, so a freed slot
// is filled at once.
func (d *Deliverer) RunOnce(ctx context.Context, wg *sync.WaitGroup, wake chan<- struct{}) (int, error) {
	started := 0
	for {
		d.mu.Lock()
		free := d.cfg.Parallelism - d.load.running
		ex := d.load.exclusions(d.caps)
		d.mu.Unlock()
		if free <= 0 {
			return started, nil
		}
		rows, err := d.pool.Query(ctx, candidatesSQL, free, ex.endpoints, ex.hosts, ex.tenantHosts, ex.tenants)
		if err != nil {
			return started, fmt.Errorf("claim deliveries: %w", err)
		}
		cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[candidate])
		if err != nil {
			return started, fmt.Errorf("claim deliveries: %w", err)
		}
		d.mu.Lock()
		picked := d.load.pick(d.caps, cands)
		d.mu.Unlock()
		if len(picked) == 0 {
			return started, nil
		}
		claimed, err := d.claim(ctx, picked)
		if err != nil {
			return started, err
		}
		for _, dl := range claimed {
			// Counted before the attempt starts, and only here: the counts
			// pick saw can only have gone down since (attempts ending), so
			// what it admitted still fits.
			d.mu.Lock()
			d.load.add(dl.slot(), 1)
			d.mu.Unlock()
			started++
			wg.Go(func() {
				defer func() {
					d.mu.Lock()
					d.load.add(dl.slot(), -1)
					d.mu.Unlock()
					select {
					case wake <- struct{}{}:
					default:
					}
				}()
				// An attempt under way finishes and is recorded even at
				// shutdown: it is bounded by Timeout.
				d.attempt(context.WithoutCancel(ctx), dl)
			})
		}
		// Claim again only when this round took something and may have
		// left due work behind: candidates passed over (a cap filled
		// within the round; the next round's exclusions leave that out
		// and reach what was behind it), or a tenant with as many
		// candidates as were asked for (it may have more).
		if len(claimed) == 0 || (len(picked) == len(cands) && !anyTenantHas(cands, free)) {
			return started, nil
		}
	}
}

// anyTenantHas reports whether some tenant has n candidates in cands.
func anyTenantHas(cands []candidate, n int) bool {
	per := map[int64]int{}
	for _, c := range cands {
		if per[c.TenantID]++; per[c.TenantID] >= n {
			return true
		}
	}
	return false
}

// claim leases the picked deliveries; it returns those it got.
func (d *Deliverer) claim(ctx context.Context, picked []candidate) ([]delivery, error) {
	tenants := make([]int64, len(picked))
	eventIDs := make([]string, len(picked))
	endpoints := make([]string, len(picked))
	createdAt := make([]time.Time, len(picked))
	for i, p := range picked {
		tenants[i], eventIDs[i], endpoints[i], createdAt[i] = p.TenantID, p.EventID, p.EndpointID, p.EventCreatedAt
	}
	rows, err := d.pool.Query(ctx, claimSQL, tenants, eventIDs, endpoints, createdAt, d.cfg.Lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[delivery])
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return claimed, nil
}
