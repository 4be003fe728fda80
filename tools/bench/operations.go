package bench

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// Captures and refunds: the throughput of the two operations after an
// authorization, per level, over HTTP against the api and the mock PSP
// like new charges. No target yet; the table shows them next to new
// charges, whose shape (a claim, a PSP call, two commits) they share, plus
// the charge's row lock each takes.

// refundsPerCharge is how many refunds of refundAmount each captured
// charge (of 1000) takes in the refund load.
const (
	refundsPerCharge = 10
	refundAmount     = 100
)

// authorizedSQL lists the charges a capture may take: authorized by this
// level's authorization load ($1, its keys' prefix: the database also holds
// the charges of earlier steps, some of other tenants, which would answer
// 404), with no capture or void claimed.
const authorizedSQL = `SELECT id FROM charges
 WHERE idempotency_key LIKE $1 AND status = 'authorized' AND settlement IS NULL ORDER BY id`

// capturedSQL lists the charges a refund may take: captured by this level's
// load, nothing refunded or being refunded yet.
const capturedSQL = `SELECT id FROM charges
 WHERE idempotency_key LIKE $1 AND status = 'captured' AND amount_refunded = 0 AND amount_refunding = 0 ORDER BY id`

// operations measures, per level: new charges authorized for 1.5 × the
// duration (not measured), then captures of those charges (each its own
// charge, so no two requests wait on one row lock), then refunds of the
// captured charges (refundsPerCharge each, spread so that concurrent
// refunds are of different charges). A load that runs out of charges
// stops early and is measured over the time it ran.
func (e *env) operations(ctx context.Context, res *Results) error {
	base, stop, err := e.startStack(ctx, nil)
	if err != nil {
		return err
	}
	defer stop()
	for _, c := range e.cfg.Levels {
		auth := load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration*3/2, http.StatusCreated, func(w, i int) request {
			return request{keyf("op-auth-%d-%d-%d", c, w, i), []byte(visa)}
		}, nil)
		prefix := fmt.Sprintf("op-auth-%d-%%", c)
		ids, err := e.chargeIDs(ctx, authorizedSQL, prefix)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("%d clients: no charge authorized to capture (statuses %v, %d errors)", c, auth.Statuses, auth.Errors)
		}
		r := e.drain(ctx, base, c, http.StatusOK, len(ids), func(n int) (string, request) {
			return "/v1/charges/" + ids[n] + "/capture", request{keyf("op-cap-%d-%d", c, n), []byte(`{}`)}
		})
		res.Captures = append(res.Captures, r)
		e.log("  captures, %2d clients: %.0f/s, p50 %.2f ms, p99 %.2f ms (%d charges authorized)", c, r.PerSec, r.Latency.P50, r.Latency.P99, len(ids))

		if ids, err = e.chargeIDs(ctx, capturedSQL, prefix); err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("%d clients: no charge captured to refund (statuses %v, %d errors)", c, r.Statuses, r.Errors)
		}
		r = e.drain(ctx, base, c, http.StatusCreated, len(ids)*refundsPerCharge, func(n int) (string, request) {
			body := fmt.Appendf(nil, `{"charge":%q,"amount":%d}`, ids[n%len(ids)], refundAmount)
			return "/v1/refunds", request{keyf("op-ref-%d-%d", c, n), body}
		})
		res.Refunds = append(res.Refunds, r)
		e.log("  refunds,  %2d clients: %.0f/s, p50 %.2f ms, p99 %.2f ms (%d charges captured)", c, r.PerSec, r.Latency.P50, r.Latency.P99, len(ids))
	}
	return nil
}

// drain runs a load of clients workers for the configured duration, the
// n-th request of all (counted across workers) being next(n), or less
// long if total requests were sent before.
func (e *env) drain(ctx context.Context, base string, clients, want, total int, next func(n int) (string, request)) LoadResult {
	var sent atomic.Int64
	start := time.Now()
	r := loadAt(ctx, e.hc, base, "", e.apiKey, clients, e.cfg.Duration, want, func(_, _ int) (string, request, bool) {
		n := int(sent.Add(1)) - 1
		if n >= total {
			return "", request{}, false
		}
		path, req := next(n)
		return path, req, true
	}, nil)
	if el := time.Since(start); el < e.cfg.Duration {
		e.log("  (ran out of charges after %s)", el.Truncate(time.Millisecond))
	}
	return r
}

// chargeIDs runs one of the queries above.
func (e *env) chargeIDs(ctx context.Context, sql, keyPrefix string) ([]string, error) {
	rows, err := e.pool.Query(ctx, sql, keyPrefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
