package console

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/routing"
)

// A PSP's circuit breaker lives in each api and reaper process (package
// routing), out of the console's sight. What every process's calls to a
// PSP were is in the database, in the requests' timelines: the overview
// replays the last minute of them, in time order, through a
// routing.Breaker of the configured threshold and cool-down, and shows the
// state a process that had made every one of those calls would be in. A
// process that made only some of them may differ (its own state is on its
// /metrics as phasepay_psp_breaker_state).

// pspWindow is how far back the PSP calls are read.
const pspWindow = time.Minute

// pspCallsSQL reads the PSP calls recorded in the last $2 µs: in the
// timelines of each tenant's keys claimed in the last $1 µs (through
// idempotency_keys_tenant_created, as ratesSQL), and of up to 1000 keys
// claimed before and still started that the reapers retry on their
// schedule: those in flight or due within the window, soonest first,
// through idempotency_keys_due. It read every unfinished key claimed
// before: during a PSP outage, millions at each refresh (pitfall Q9 "A
// backlog every pass reads again"); with more, the calls shown of them are
// a sample. Sent with its values, as ratesSQL is, for the same reason.
const pspCallsSQL = `
WITH recent AS (
    SELECT r.timeline
      FROM tenants t
     CROSS JOIN LATERAL (
           SELECT timeline FROM idempotency_keys
            WHERE tenant_id = t.id AND created_at > phasepay_now() - $1 * interval '1 microsecond') r
    UNION ALL
    (SELECT timeline FROM idempotency_keys
      WHERE state = 'started'
        AND greatest(coalesce(locked_until, '-infinity'::timestamptz), coalesce(next_attempt_at, '-infinity'::timestamptz))
            > phasepay_now() - $2 * interval '1 microsecond'
        AND created_at <= phasepay_now() - $1 * interval '1 microsecond'
      ORDER BY greatest(coalesce(locked_until, '-infinity'::timestamptz), coalesce(next_attempt_at, '-infinity'::timestamptz))
      LIMIT 1000)
)
SELECT coalesce(e->>'psp', ''), (e->>'at')::timestamptz AS at, coalesce(e->>'outcome', '')
  FROM recent, jsonb_array_elements(coalesce(recent.timeline, '[]'::jsonb)) e
 WHERE e->>'kind' = 'psp_call' AND (e->>'at')::timestamptz > phasepay_now() - $2 * interval '1 microsecond'
 ORDER BY at`

// pspHealth is one PSP on the overview.
type pspHealth struct {
	Name string
	// Calls counts the calls of the window by outcome class.
	Calls map[string]int
	Total int
	Last  time.Time
	// Breaker is the state of a breaker fed every call of the window.
	Breaker string
}

// classes by the names the timeline records (psp.Class.String).
var classes = func() map[string]psp.Class {
	m := map[string]psp.Class{}
	for _, c := range []psp.Class{psp.ClassSuccess, psp.ClassFinalFailure, psp.ClassBusy, psp.ClassUnknown} {
		m[c.String()] = c
	}
	return m
}()

func (s *Server) pspHealth(ctx context.Context) ([]pspHealth, error) {
	rows, err := s.cfg.Pool.Query(ctx, pspCallsSQL, pgx.QueryExecModeSimpleProtocol, rateScan.Microseconds(), pspWindow.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("psp calls: %w", err)
	}
	type call struct {
		at      time.Time
		outcome string
	}
	calls := map[string][]call{}
	var (
		name, outcome string
		at            time.Time
	)
	single := len(s.cfg.Routing.PSPs) <= 1
	_, err = pgx.ForEachRow(rows, []any{&name, &at, &outcome}, func() error {
		if name == "" && single {
			// A call recorded without its PSP's name, with one PSP
			// configured: that one.
			name = routing.DefaultName
			if len(s.cfg.Routing.PSPs) == 1 {
				name = s.cfg.Routing.PSPs[0].Name
			}
		}
		calls[cmp.Or(name, "(not named)")] = append(calls[cmp.Or(name, "(not named)")], call{at, outcome})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("psp calls: %w", err)
	}
	names := map[string]bool{}
	for _, p := range s.cfg.Routing.PSPs {
		names[p.Name] = true
	}
	for n := range calls {
		names[n] = true
	}
	threshold := cmp.Or(s.cfg.Routing.BreakerThreshold, routing.BreakerThresholdDefault)
	cooldown := cmp.Or(s.cfg.Routing.BreakerCooldown, routing.BreakerCooldownDefault)
	out := make([]pspHealth, 0, len(names))
	for _, n := range slices.Sorted(maps.Keys(names)) {
		h := pspHealth{Name: n, Calls: map[string]int{}}
		var clock time.Time
		b := routing.NewBreaker(threshold, cooldown, func() time.Time { return clock }, nil)
		for _, c := range calls[n] {
			clock = c.at
			h.Calls[c.outcome]++
			h.Total++
			h.Last = c.at
			if class, ok := classes[c.outcome]; ok {
				b.Record(class)
			}
		}
		clock = time.Now()
		h.Breaker = b.State().String()
		out = append(out, h)
	}
	return out, nil
}
