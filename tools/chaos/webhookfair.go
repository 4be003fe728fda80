package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/webhooks"
	"github.com/phasepay/phasepay/tools/procs"
)

// Fair delivery under chaos. A second tenant, the hanging tenant, has the
// most endpoints a tenant may have (16), every one of which hangs past
// the delivery timeout (the sink's /hang/{n}, on the same host as the
// chaos tenant's endpoint), and a steady stream of events for the whole
// run, so that it always has every delivery slot the deliverers give it
// and a backlog besides. The chaos tenant's events must still have their
// first attempt start within the contract's bound of their commit
// (fairBound), at the 99th percentile: delivery capacity is shared
// fairly between tenants and hosts.
//
// The hanging tenant's events are written straight into the outbox
// (events.Write, as an operation's transaction does) rather than by
// charges of its own: the run's ledger checks read every charge, and it
// is the deliverers, not the charges, that are under test here.

// hangingTenantName is the hanging tenant's name (bin/api keys create).
const hangingTenantName = "hanging"

// hangingEventEvery is how often the hanging tenant writes an event: each
// is 16 more deliveries that hang.
const hangingEventEvery = 250 * time.Millisecond

// fairBound is the contract's bound on a first attempt: 2 s plus one
// REAPER_INTERVAL (the reapers', see stack.go).
const fairBound = 2*time.Second + reaperInterval

// commitPollEvery is how often the commit watcher reads the chaos tenant's
// new events, and commitPollWindow how far back (by created_at, the
// transaction's start) it looks: longer than any transaction of the run
// stays open (a frozen worker's, a lease and a half).
const (
	commitPollEvery  = 100 * time.Millisecond
	commitPollWindow = 15 * time.Second
)

// HangingStats is what the hanging tenant did.
type HangingStats struct {
	// Endpoints is how many endpoints it registered (16), Refused the
	// problem code its 17th got (endpoint_limit_reached).
	Endpoints int    `json:"endpoints"`
	Refused   string `json:"seventeenth_refused_with"`
	// Events it wrote, and deliveries of them the sink received (each
	// hung until the deliverer gave up).
	Events     int64 `json:"events"`
	Deliveries int   `json:"deliveries_hung"`
}

// hangingTenant is the hanging tenant while the run goes on.
type hangingTenant struct {
	id     int64
	stats  HangingStats
	events atomic.Int64
	// violations found while setting it up (the 17th endpoint accepted).
	violations []string
}

// startHangingTenant creates the hanging tenant and its endpoints, and
// writes its events until ctx ends.
func startHangingTenant(ctx context.Context, st *stack, sink *webhookSink, rt http.RoundTripper) (*hangingTenant, error) {
	key, err := procs.RunOnce(ctx, st.bin("api"), map[string]string{"DATABASE_URL": st.dbURL}, "keys", "create", "--tenant", hangingTenantName)
	if err != nil {
		return nil, err
	}
	h := &hangingTenant{}
	if err := st.pool.QueryRow(ctx, `SELECT id FROM tenants WHERE name = $1`, hangingTenantName).Scan(&h.id); err != nil {
		return nil, fmt.Errorf("hanging tenant: %w", err)
	}
	for n := range webhooks.MaxEndpoints + 1 {
		status, code, err := createEndpoint(ctx, rt, key, fmt.Sprintf("%s/hang/%d", sink.base, n))
		switch {
		case err != nil:
			return nil, fmt.Errorf("hanging tenant: endpoint %d: %w", n, err)
		case n < webhooks.MaxEndpoints && status != http.StatusCreated:
			return nil, fmt.Errorf("hanging tenant: endpoint %d: %d %s", n, status, code)
		case n < webhooks.MaxEndpoints:
			h.stats.Endpoints++
		default:
			h.stats.Refused = code
			if status != http.StatusBadRequest || code != "endpoint_limit_reached" {
				h.violations = append(h.violations, fmt.Sprintf("webhooks: the hanging tenant's endpoint %d got %d %s, want 400 endpoint_limit_reached",
					n+1, status, code))
			}
		}
	}
	go h.write(ctx, st.pool)
	return h, nil
}

// write writes an event of the hanging tenant every hangingEventEvery
// until ctx ends; a write that fails (the database restarting) is skipped.
func (h *hangingTenant) write(ctx context.Context, pool *pgxpool.Pool) {
	t := time.NewTicker(hangingEventEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := h.events.Load()
		obj := fmt.Sprintf(`{"id":"ch_hanging_%d","object":"charge","status":"authorized"}`, n)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := events.Write(wctx, pool, h.id, events.ChargeAuthorized, []byte(obj)); err == nil {
			h.events.Add(1)
		}
		cancel()
	}
}

// createEndpoint posts one endpoint for every event type through the
// workers, retrying while no worker answers; it returns the status and,
// for a problem, its code.
func createEndpoint(ctx context.Context, rt http.RoundTripper, apiKey, url string) (int, string, error) {
	body, _ := json.Marshal(map[string]any{"url": url, "events": []string{"*"}})
	hc := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	var last error
	for range 20 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://workers/v1/webhook_endpoints", bytes.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 500 {
				var p struct{ Code string }
				_ = json.Unmarshal(b, &p)
				return resp.StatusCode, p.Code, nil
			}
			last = fmt.Errorf("%d %s", resp.StatusCode, b)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return 0, "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return 0, "", errors.Join(errors.New("no worker answered"), last)
}

// watchCommits records, for each of the tenant's events, the earliest time
// it can have committed: it reads the tenant's recent events every
// commitPollEvery, and an event first seen by a read was not visible to
// the read before, which started earlier (nor could it commit before its
// transaction started, its created_at). The latency of a first attempt is
// measured from there, so it is never under-reported, and over-reported by
// at most a poll (an event that committed just before the read that saw
// it). The event's created_at alone would count against the deliverers
// the time a transaction stayed open after writing it (a worker frozen
// mid-transaction, for seconds).
func (s *webhookSink) watchCommits(ctx context.Context, pool *pgxpool.Pool, tenantID int64) {
	var prev time.Time // the start of the last read that succeeded
	for ctx.Err() == nil {
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rows, err := pool.Query(rctx, `SELECT id, created_at FROM events WHERE tenant_id = $1 AND created_at > $2`,
			tenantID, start.Add(-commitPollWindow))
		if err == nil {
			var (
				id string
				at time.Time
			)
			s.mu.Lock()
			for rows.Next() {
				if rows.Scan(&id, &at) != nil {
					break
				}
				if _, seen := s.committed[id]; !seen {
					if at.Before(prev) {
						at = prev
					}
					s.committed[id] = at
				}
			}
			s.mu.Unlock()
			rows.Close()
			if rows.Err() == nil {
				prev = start
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(commitPollEvery):
		}
	}
}

// downWindow is a stretch during which first attempts cannot be held to
// the bound: the database stopped and its processes recovering.
type downWindow struct{ from, to time.Time }

// firstAttemptLatencies returns, for each of the chaos tenant's events the
// sink received, the time from its commit (watchCommits) to its first
// attempt, leaving out events committed within fairBound before a
// database restart or before every process recovered from it; and how
// many it left out.
func firstAttemptLatencies(sink *webhookSink, evs []dbEvent, down []downWindow) (lat []time.Duration, excluded int) {
	for _, e := range evs {
		s := sink.events[e.ID]
		committed, ok := sink.committed[e.ID]
		if s == nil || !ok {
			continue // never received (a violation of its own), or not seen by the watcher
		}
		skip := false
		for _, w := range down {
			if !committed.Before(w.from.Add(-fairBound)) && !committed.After(w.to) {
				skip = true
			}
		}
		if skip {
			excluded++
			continue
		}
		lat = append(lat, max(0, s.firstReceived.Sub(committed)))
	}
	return lat, excluded
}

// checkFairness measures the chaos tenant's first attempts (evs, as the
// sink received them; sink.mu held) and reports a p99 over fairBound, and
// what the hanging tenant did, which must have hung some deliveries.
func checkFairness(sink *webhookSink, hanging *hangingTenant, evs []dbEvent, down []downWindow, st *WebhookStats, violate func(string, ...any)) {
	first, excluded := firstAttemptLatencies(sink, evs, down)
	p50, p99, pmax := latencyPercentiles(first)
	st.FirstAttemptP50, st.FirstAttemptP99, st.FirstAttemptMax = p50.String(), p99.String(), pmax.String()
	st.FirstAttemptBound, st.FirstAttemptExcluded = fairBound.String(), excluded
	if p99 > fairBound {
		violate("webhooks: the chaos tenant's first attempts started %s (p99) after their commits, over the bound of %s, beside a tenant whose endpoints all hang",
			p99, fairBound)
	}
	if len(first) == 0 && len(evs) > excluded {
		violate("webhooks: no first attempt measured of %d events", len(evs))
	}
	if hanging == nil {
		return
	}
	st.Hanging = hanging.stats
	st.Hanging.Events = hanging.events.Load()
	st.Hanging.Deliveries = sink.hung
	for _, v := range hanging.violations {
		violate("%s", v)
	}
	if st.Hanging.Deliveries == 0 {
		violate("webhooks: the hanging tenant's endpoints received no delivery: nothing hung")
	}
}
