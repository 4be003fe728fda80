package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/webhooks"
)

// SinkFaults are the webhook sink's faults, each a share of deliveries
// (see webhookSink). Zero fields take the defaults noted.
type SinkFaults struct {
	ErrorRate   float64 `json:"error_rate"`   // 500 or 503. Default 0.05.
	DropRate    float64 `json:"drop_rate"`    // connection closed, no answer. Default 0.03.
	HangRate    float64 `json:"hang_rate"`    // 200 after 0.5–3 s. Default 0.01.
	TimeoutRate float64 `json:"timeout_rate"` // 200 after 11–12 s, past the timeout. Default 0.002.
}

func (f *SinkFaults) defaults() {
	if *f == (SinkFaults{}) {
		*f = SinkFaults{ErrorRate: 0.05, DropRate: 0.03, HangRate: 0.01, TimeoutRate: 0.002}
	}
}

// WebhookStats is what the webhook sink saw, and the backlog phasepay had.
type WebhookStats struct {
	Endpoint string `json:"endpoint"`
	// Events is how many events the database holds at the end; each must
	// have been accepted by the sink at least once.
	Events int `json:"events"`
	// Deliveries is every POST the sink received, Accepted those it
	// answered 2xx in time. Duplicates counts the deliveries of an event
	// the sink had received before (at least once: after a failed
	// attempt, or a success phasepay could not record);
	// DuplicatesAccepted those of an event it had already accepted.
	Deliveries         int `json:"deliveries"`
	Accepted           int `json:"accepted"`
	Duplicates         int `json:"duplicates"`
	DuplicatesAccepted int `json:"duplicates_accepted"`
	// Faults counts the sink's injected faults by kind.
	Faults map[string]int `json:"faults"`
	// FailedAttempts is the attempts phasepay recorded as failed
	// (webhook_attempts with an error); GivenUp the deliveries it gave up
	// (state failed: never, within a run's minutes).
	FailedAttempts int64 `json:"failed_attempts"`
	GivenUp        int64 `json:"deliveries_given_up"`
	// LatencyP50 and LatencyP99: from an event's created_at (its
	// transaction's start) to its first accepted delivery.
	LatencyP50 string `json:"latency_p50"`
	LatencyP99 string `json:"latency_p99"`
	LatencyMax string `json:"latency_max"`
	// FirstAttemptP50, P99 and Max: from an event's commit (at the
	// earliest: see watchCommits) to the sink receiving its first attempt,
	// whatever the answer, while the hanging tenant's endpoints all hang
	// (webhookfair.go). P99 above FirstAttemptBound (the contract's 2 s
	// plus one REAPER_INTERVAL) is a violation. Events committed around a
	// database restart are left out (FirstAttemptExcluded).
	FirstAttemptP50      string `json:"first_attempt_p50"`
	FirstAttemptP99      string `json:"first_attempt_p99"`
	FirstAttemptMax      string `json:"first_attempt_max"`
	FirstAttemptBound    string `json:"first_attempt_bound"`
	FirstAttemptExcluded int    `json:"first_attempt_excluded"`
	// Hanging is the tenant whose 16 endpoints all hang.
	Hanging HangingStats `json:"hanging_tenant"`
	// MaxBacklog is the most deliveries pending at once, sampled from the
	// database during the run (webhooks.TenantBacklog of the chaos
	// tenant); MaxDueDelay the longest a due delivery waited for a
	// deliverer.
	MaxBacklog  int64  `json:"max_backlog"`
	MaxDueDelay string `json:"max_due_delay"`
	// Drained is how long the backlog took to empty after the load.
	Drained string `json:"drained_in"`
}

// backlogSampler records the largest webhook backlog of one tenant (the
// chaos tenant: the hanging tenant's never drains) while the run goes on.
type backlogSampler struct {
	tenantID int64
	rec      *recorder
	mu       sync.Mutex
	max      int64
	maxDelay float64
}

// run samples every 250 ms until ctx ends; samples that fail (the database
// restarting) are skipped.
func (b *backlogSampler) run(ctx context.Context, pool *pgxpool.Pool) {
	for ctx.Err() == nil {
		b.sample(ctx, pool)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (b *backlogSampler) sample(ctx context.Context, pool *pgxpool.Pool) (webhooks.BacklogStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := webhooks.TenantBacklog(ctx, pool, b.tenantID)
	if err != nil {
		return st, err
	}
	b.mu.Lock()
	b.max, b.maxDelay = max(b.max, st.Pending), max(b.maxDelay, st.DueDelay)
	b.mu.Unlock()
	b.rec.Gauge(chartBacklog, "pending", "deliveries", float64(st.Pending))
	return st, nil
}

// drainWebhooks waits until no delivery is pending (every event accepted
// by the sink, or given up), at most within; it returns how long it took,
// or a violation.
func drainWebhooks(ctx context.Context, pool *pgxpool.Pool, b *backlogSampler, within time.Duration) (time.Duration, string) {
	start := time.Now()
	var (
		st  webhooks.BacklogStats
		err error
	)
	for time.Since(start) < within && ctx.Err() == nil {
		if st, err = b.sample(ctx, pool); err == nil && st.Pending == 0 {
			return time.Since(start), ""
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start), fmt.Sprintf("webhooks: backlog not drained %s after the load: %d deliveries pending (oldest event %.0fs old), %v",
		within, st.Pending, st.OldestAge, err)
}

// dbEvent is one event as the database holds it.
type dbEvent struct {
	ID        string
	Type      string
	CreatedAt time.Time
	Body      []byte
}

// eventsSQL reads every event of the chaos tenant ($1): the outbox, which
// the sink must have received in full, byte for byte. (The hanging
// tenant's are never received.)
const eventsSQL = `SELECT id, type, created_at, body FROM events WHERE tenant_id = $1 ORDER BY created_at, id`

// finalStateSQL reads each object's final status, to hold every event
// against what committed: charges and refunds with the amounts an event
// shows, and keys that need attention.
const finalStateSQL = `
SELECT 'charge', id, status, coalesce(psp_reference, ''), amount_captured FROM charges
UNION ALL
SELECT 'refund', id, status, coalesce(psp_reference, ''), amount FROM refunds
UNION ALL
SELECT 'key', key, 'needs_attention', '', 0 FROM idempotency_keys WHERE state = 'needs_attention'`

// eventObject is what the invariants read of an event's object.
type eventObject struct {
	ID             string `json:"id"`
	Key            string `json:"key"`
	Status         string `json:"status"`
	State          string `json:"state"`
	PSPReference   string `json:"psp_reference"`
	AmountCaptured int64  `json:"amount_captured"`
	Amount         int64  `json:"amount"`
}

// finalObject is an object's final state in the database.
type finalObject struct {
	kind, status, pspRef string
	amount               int64 // a charge's amount_captured, a refund's amount
}

// verifyWebhooks checks the sink's deliveries against the database's
// events and final state:
//
//   - every event in the database was accepted by the sink at least once,
//     with the body the database holds, byte for byte (and every
//     delivery of one event id had the same body: checked by the sink);
//   - the sink accepted no event the database does not hold, and each
//     event agrees with its object's final state: no event for a change
//     that did not commit;
//   - every terminal status of every charge and refund, and every key
//     that needs attention, was observed: its event accepted by the sink;
//     and no change has two events.
//
// and that the chaos tenant's first attempts started within fairBound of
// their commits (p99), whatever the hanging tenant did (down: the
// database's restarts, left out).
func verifyWebhooks(ctx context.Context, pool *pgxpool.Pool, sink *webhookSink, hanging *hangingTenant, down []downWindow,
	st *WebhookStats, violate func(string, ...any)) error {
	rows, err := pool.Query(ctx, eventsSQL, sink.tenantID)
	if err != nil {
		return fmt.Errorf("verify webhooks: %w", err)
	}
	var evs []dbEvent
	for rows.Next() {
		var e dbEvent
		if err := rows.Scan(&e.ID, &e.Type, &e.CreatedAt, &e.Body); err != nil {
			rows.Close()
			return fmt.Errorf("verify webhooks: %w", err)
		}
		evs = append(evs, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify webhooks: %w", err)
	}
	final := map[string]finalObject{}
	rows, err = pool.Query(ctx, finalStateSQL)
	if err != nil {
		return fmt.Errorf("verify webhooks: %w", err)
	}
	for rows.Next() {
		var (
			id string
			o  finalObject
		)
		if err := rows.Scan(&o.kind, &id, &o.status, &o.pspRef, &o.amount); err != nil {
			rows.Close()
			return fmt.Errorf("verify webhooks: %w", err)
		}
		final[id] = o
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify webhooks: %w", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE error IS NOT NULL) FROM webhook_attempts WHERE tenant_id = $1`,
		sink.tenantID).Scan(&st.FailedAttempts); err != nil {
		return fmt.Errorf("verify webhooks: %w", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'failed') FROM webhook_deliveries WHERE tenant_id = $1`,
		sink.tenantID).Scan(&st.GivenUp); err != nil {
		return fmt.Errorf("verify webhooks: %w", err)
	}

	sink.mu.Lock()
	defer sink.mu.Unlock()
	st.Events, st.Deliveries, st.Accepted = len(evs), sink.received, sink.accepted
	st.Faults = maps.Clone(sink.injected)
	for _, v := range sink.violations {
		violate("%s", v)
	}
	inDB := map[string]bool{}
	observed := map[string][]string{} // object id + " " + type → accepted event ids
	var latencies []time.Duration
	for _, e := range evs {
		inDB[e.ID] = true
		s := sink.events[e.ID]
		switch {
		case s == nil || s.accepted == 0:
			violate("webhooks: event %s (%s, %s) never accepted by the sink (%d deliveries received)", e.ID, e.Type, e.CreatedAt.Format(time.RFC3339Nano), received(s))
			continue
		case !bytes.Equal(s.body, e.Body):
			violate("webhooks: event %s delivered as %q, stored as %q", e.ID, s.body, e.Body)
		}
		st.Duplicates += s.received - 1
		st.DuplicatesAccepted += s.accepted - 1
		latencies = append(latencies, s.firstAccepted.Sub(e.CreatedAt))
	}
	for id, s := range sink.events {
		if !inDB[id] {
			violate("webhooks: the sink received event %s (%s), which the database does not hold", id, s.typ)
			continue
		}
		if s.accepted == 0 {
			continue
		}
		var obj eventObject
		if err := json.Unmarshal(s.object, &obj); err != nil {
			violate("webhooks: event %s: object %q: %v", id, s.object, err)
			continue
		}
		oid := obj.ID
		if s.typ == "request.needs_attention" {
			oid = obj.Key
		}
		observed[oid+" "+s.typ] = append(observed[oid+" "+s.typ], id)
		if why := disagrees(s.typ, obj, final[oid], final[oid].kind != ""); why != "" {
			violate("webhooks: event %s (%s of %s) for a change that did not commit: %s", id, s.typ, oid, why)
		}
	}
	for key, ids := range observed {
		if len(ids) > 1 {
			violate("webhooks: %d events for one change (%s): %v", len(ids), key, ids)
		}
	}
	for id, o := range final {
		for _, typ := range wantEvents(o) {
			if len(observed[id+" "+typ]) == 0 {
				violate("webhooks: %s %s is %s, but the sink never observed %s", o.kind, id, o.status, typ)
			}
		}
	}
	p50, p99, pmax := latencyPercentiles(latencies)
	st.LatencyP50, st.LatencyP99, st.LatencyMax = p50.String(), p99.String(), pmax.String()
	checkFairness(sink, hanging, evs, down, st, violate)
	return nil
}

// wantEvents lists the events an object's final state implies were
// written: one per status change it went through.
func wantEvents(o finalObject) []string {
	switch o.kind + " " + o.status {
	case "charge authorized", "charge declined", "charge failed":
		return []string{"charge." + o.status}
	case "charge captured", "charge voided":
		return []string{"charge.authorized", "charge." + o.status}
	case "refund succeeded", "refund failed":
		return []string{"refund." + o.status}
	case "key needs_attention":
		return []string{"request.needs_attention"}
	}
	return nil // pending: no change yet
}

// disagrees says why an accepted event contradicts its object's final
// state, "" if it does not.
func disagrees(typ string, obj eventObject, o finalObject, known bool) string {
	if !known {
		return "no such object in the database"
	}
	status := obj.Status
	if typ == "request.needs_attention" {
		status = obj.State
	}
	kind, want, ok := cutType(typ)
	if !ok || status != want || o.kind != kind && !(kind == "request" && o.kind == "key") {
		return fmt.Sprintf("its object says %s %q", obj.ID, status)
	}
	switch typ {
	case "charge.authorized":
		if !slices.Contains([]string{"authorized", "captured", "voided"}, o.status) || obj.PSPReference != o.pspRef {
			return fmt.Sprintf("the charge is %s (psp_reference %q, the event's %q)", o.status, o.pspRef, obj.PSPReference)
		}
		return ""
	case "charge.captured":
		if o.status != "captured" || obj.AmountCaptured != o.amount {
			return fmt.Sprintf("the charge is %s with %d captured, the event says %d", o.status, o.amount, obj.AmountCaptured)
		}
		return ""
	case "refund.succeeded", "refund.failed":
		if o.status != want || obj.Amount != o.amount {
			return fmt.Sprintf("the refund is %s for %d, the event says %s for %d", o.status, o.amount, want, obj.Amount)
		}
		return ""
	}
	if o.status != want {
		return fmt.Sprintf("it is %s in the database", o.status)
	}
	return ""
}

// cutType splits "charge.captured" into its object kind and the status it
// announces.
func cutType(typ string) (kind, status string, ok bool) {
	for i := range typ {
		if typ[i] == '.' {
			return typ[:i], typ[i+1:], true
		}
	}
	return "", "", false
}

func received(s *sinkEvent) int {
	if s == nil {
		return 0
	}
	return s.received
}

// latencyPercentiles returns the 50th and 99th percentiles (nearest rank)
// and the largest of ds, truncated to the millisecond.
func latencyPercentiles(ds []time.Duration) (p50, p99, pmax time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	rank := func(p int) time.Duration { return ds[(p*len(ds)+99)/100-1].Truncate(time.Millisecond) }
	return rank(50), rank(99), ds[len(ds)-1].Truncate(time.Millisecond)
}
