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
// and no live lease. Spelled as the index webhook_deliveries_endpoint_due.
const dueAtExpr = `greatest(next_attempt_at, coalesce(locked_until, '-infinity'::timestamptz))`

// candidatesSQL lists the due deliveries a claim may take, tenant by
// tenant, endpoint by endpoint (walk.go, from $1), leaving out before
// anything is read what this deliverer's caps exclude: tenants ($5),
// endpoints ($2), hosts ($3) and tenants at a host ($4, spelled
// "<tenant id>/<host>"). An endpoint left out (at its cap, or its host)
// costs its probe of the walk; from each other one, its due deliveries are
// read in due order from webhook_deliveries_endpoint_due, at most
// {{per_endpoint}} (no endpoint may take more at once). A tenant yields its {{per_tenant}} longest due.
// Nothing is read and then thrown away: a pass costs a probe per tenant
// with pending deliveries and per endpoint walked, and the rows it
// returns, never the deliveries piled up at endpoints or hosts held at
// their caps (pitfall Q9 "A backlog every pass reads again").
//
// The limits are constants of the statement, filled in for each Deliverer
// (withLimits).
const candidatesSQL = `
WITH RECURSIVE busy (tenant_id) AS (` + busySQL + `)
SELECT busy.tenant_id, c.event_id, c.event_created_at, c.endpoint_id, c.host, c.due
  FROM busy
 CROSS JOIN LATERAL (
    WITH RECURSIVE walk (endpoint_id, n, wrapped) AS (` + walkSQL + `)
    SELECT walk.endpoint_id, w.host, due.event_id, due.event_created_at, due.due
      FROM walk
      JOIN webhook_endpoints w ON w.tenant_id = busy.tenant_id AND w.id = walk.endpoint_id
     CROSS JOIN LATERAL (
        SELECT d.event_id, d.event_created_at, ` + dueAtExpr + ` AS due
          FROM webhook_deliveries d
         WHERE d.state = 'pending' AND d.tenant_id = busy.tenant_id AND d.endpoint_id = walk.endpoint_id
           AND ` + dueAtExpr + ` <= phasepay_now()
         ORDER BY ` + dueAtExpr + `
         LIMIT {{per_endpoint}}
     ) due
     WHERE walk.endpoint_id <> ALL ($2::text[])
       AND w.host <> ALL ($3::text[])
       AND busy.tenant_id::text || '/' || w.host <> ALL ($4::text[])
     ORDER BY due.due
     LIMIT {{per_tenant}}
 ) c
 WHERE busy.tenant_id IS NOT NULL
   AND busy.tenant_id <> ALL ($5::bigint[])`

// tenantHostKey spells a tenant at a host as candidatesSQL compares it.
func tenantHostKey(tenant int64, host string) string {
	return strconv.FormatInt(tenant, 10) + "/" + host
}

// claimSQL leases the picked deliveries ($1…$4, one array per key
// column), skipping rows another deliverer holds (SKIP LOCKED, and the due
// time re-checked against the row's latest version, which FOR UPDATE
// returns: a row another deliverer claimed since it was picked is no
// longer due). lock_version + 1 is the new holder's fencing token; the
// lease ($5 µs) covers one attempt and its record.
//
// Every row is reached by its whole primary key, whatever the planner
// estimates. The picked row's state and due time are checked only once it
// is locked (OFFSET 0 keeps the planner from moving them into the lookup):
// as conditions of the lookup, they let it reach the row through the
// partial index of pending deliveries instead, reading an endpoint's every
// due delivery to find one. The event and the endpoint are read by a
// subquery per leased row: as joins, they were read through the tenant's
// every event (pitfall Q9 "A backlog every pass reads again"; both plans
// were chosen on tables without statistics).
const claimSQL = `
WITH picked AS (
    SELECT l.tenant_id, l.event_id, l.endpoint_id, l.event_created_at
      FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[])
           AS p (tenant_id, event_id, endpoint_id, event_created_at)
     CROSS JOIN LATERAL (
        SELECT d.tenant_id, d.event_id, d.endpoint_id, d.event_created_at, d.state, d.next_attempt_at, d.locked_until
          FROM webhook_deliveries d
         WHERE d.tenant_id = p.tenant_id AND d.event_id = p.event_id AND d.endpoint_id = p.endpoint_id
           AND d.event_created_at = p.event_created_at
           FOR UPDATE SKIP LOCKED
        OFFSET 0
     ) l
     WHERE l.state = 'pending'
       AND greatest(l.next_attempt_at, coalesce(l.locked_until, '-infinity'::timestamptz)) <= phasepay_now()
), leased AS (
    UPDATE webhook_deliveries d
       SET lock_version = d.lock_version + 1,
           locked_until = phasepay_now() + $5 * interval '1 microsecond'
      FROM picked
     WHERE d.tenant_id = picked.tenant_id AND d.event_id = picked.event_id AND d.endpoint_id = picked.endpoint_id
       AND d.event_created_at = picked.event_created_at
    RETURNING d.tenant_id, d.event_id, d.event_created_at, d.endpoint_id, d.lock_version, d.attempts
)
SELECT l.tenant_id, l.event_id, l.event_created_at, l.endpoint_id, l.lock_version, l.attempts,
       (SELECT e.body FROM events e
         WHERE e.tenant_id = l.tenant_id AND e.id = l.event_id AND e.created_at = l.event_created_at),
       w.url, w.host, w.secret
  FROM leased l
 CROSS JOIN LATERAL (
    SELECT w.url, w.host, w.secret FROM webhook_endpoints w
     WHERE w.tenant_id = l.tenant_id AND w.id = l.endpoint_id
    OFFSET 0
 ) w`

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
		cands, err := collectWithoutJIT(ctx, d.pool, pgx.RowToStructByPos[candidate], d.candidatesSQL,
			walkStart(), ex.endpoints, ex.hosts, ex.tenantHosts, ex.tenants)
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
		// candidates as a claim lists (it may have more).
		if len(claimed) == 0 || (len(picked) == len(cands) && !anyTenantHas(cands, d.caps.parallelism)) {
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
