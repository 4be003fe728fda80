package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/timeline"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// The growth step: every background pass timed against a backlog of 10³
// to 10⁶ rows that it must not read, built directly with SQL in a
// database of the step's own. A pass that costs what it picks stays flat
// (pitfall Q9 "A backlog every pass reads again"); one that reads its
// backlog grows a thousandfold.
//
// The backlogs, grown together to each size:
//
//   - deliveries: due deliveries of tenant "hoarder" at an endpoint that
//     hangs, held at its cap of attempts in flight by the step's own
//     deliverer, beside an idle endpoint of the tenant's;
//   - keys: started keys of tenant "hoarder", half overdue, half waiting
//     for their next attempt;
//   - expired key day: finished keys in a day partition past RETENTION,
//     kept by one key finished late;
//   - expired event day: delivered deliveries in a day partition past
//     EVENTS_RETENTION, kept by one still pending.
//
// The passes, each timed PassRuns times at each size, in rounds of one run
// of each (median):
//
//   - webhook claim: tenant "bystander" writes an event; the deliverer's
//     pass (RunOnce) that claims it and starts its attempt;
//   - webhook gauges: webhooks.Backlog, every REAPER_INTERVAL;
//   - reaper takeover: TakeOverExpired of 4 keys, rolled back;
//   - reaper census: TakeCensus, every reaper pass;
//   - key retention and event retention: DropExpiredPartitions, which
//     checks the expired day and keeps it;
//   - console overview and console webhooks: the pages' reads;
//   - timeline read: a key's timeline, with the events its transactions
//     wrote (timeline.Read).

// PassRuns is how many times each pass is timed at each size.
const PassRuns = 51

// PassCost is one pass's cost against one backlog size.
type PassCost struct {
	Pass    string  `json:"pass"`
	Backlog int     `json:"backlog_rows"`
	P50     float64 `json:"p50_ms"`
	P90     float64 `json:"p90_ms"`
}

// PassPlan is the plan of one statement a pass ran, EXPLAIN (ANALYZE,
// BUFFERS) in the generic plan phasepay's connections use, at the largest
// backlog.
type PassPlan struct {
	Pass string `json:"pass"`
	Plan string `json:"plan"`
}

// Passes is the growth step's results.
type Passes struct {
	Machine string     `json:"machine"`
	Started time.Time  `json:"started"`
	Sizes   []int      `json:"sizes"`
	Costs   []PassCost `json:"costs"`
	Plans   []PassPlan `json:"plans,omitempty"`
}

// passNames are the passes, in the order of the tables and the plot.
var passNames = []string{
	"webhook claim", "webhook gauges", "reaper takeover", "reaper census",
	"key retention", "event retention", "console overview", "console webhooks", "timeline read",
}

// Ratio is a pass's p50 at the largest size over its p50 at the smallest.
func (p *Passes) Ratio(pass string) (ratio, first, last float64) {
	var costs []PassCost
	for _, c := range p.Costs {
		if c.Pass == pass {
			costs = append(costs, c)
		}
	}
	if len(costs) < 2 || costs[0].P50 <= 0 {
		return 0, 0, 0
	}
	first, last = costs[0].P50, costs[len(costs)-1].P50
	return last / first, first, last
}

// passesWorld is what the step runs in: its database, the backlogs'
// tenants and endpoints, and the processes' parts it times.
type passesWorld struct {
	url      string
	seed     *pgxpool.Pool // plain: seeding runs for minutes
	pool     *pgxpool.Pool // as phasepay's processes open theirs (dbpool)
	recorder *statementRecorder
	keys     *idempotency.Store

	hoarder, bystander int64
	hangID             string
	deliverer          *webhooks.Deliverer
	attemptDone        chan string
	release            func()
	wg                 sync.WaitGroup

	console     *consoleClient
	timelineKey string

	seeded map[string]int
	filled bool // the hoarder's endpoint is at its cap
}

// passesDB names the step's database.
func (e *env) passesDB() string { return e.dbName + "_passes" }

func (e *env) passes(ctx context.Context, res *Results) error {
	sizes := e.cfg.PassSizes
	if len(sizes) == 0 {
		sizes = []int{1_000, 10_000, 100_000, 1_000_000}
	}
	w, stop, err := e.passesSetup(ctx)
	if err != nil {
		return err
	}
	defer stop()
	out := &Passes{Machine: res.Machine, Started: time.Now().UTC(), Sizes: sizes}
	for i, size := range sizes {
		t0 := time.Now()
		if err := w.grow(ctx, size); err != nil {
			return fmt.Errorf("grow the backlogs to %d: %w", size, err)
		}
		e.log("  backlogs of %d rows built in %.0fs", size, time.Since(t0).Seconds())
		lats, err := w.time(ctx)
		if err != nil {
			return fmt.Errorf("at %d: %w", size, err)
		}
		for _, name := range passNames {
			lat := lats[name]
			out.Costs = append(out.Costs, PassCost{Pass: name, Backlog: size, P50: lat.P50, P90: lat.at(0.9)})
			e.log("  %-17s %8d rows: p50 %7.3f ms", name, size, lat.P50)
		}
		if i == len(sizes)-1 {
			if out.Plans, err = w.plans(ctx); err != nil {
				return fmt.Errorf("plans: %w", err)
			}
		}
	}
	res.Passes = out
	return nil
}

// timed is the runs of one pass, sorted.
type timed struct {
	P50  float64
	runs []time.Duration
}

func (t timed) at(q float64) float64 {
	if len(t.runs) == 0 {
		return 0
	}
	return float64(t.runs[int(float64(len(t.runs)-1)*q)].Microseconds()) / 1000
}

// time runs every pass once unmeasured, then PassRuns rounds of each pass
// once, and returns each pass's runs. The rounds interleave the passes, so
// that a burst of another load on the machine falls on a few runs of each,
// not on every run of one.
func (w *passesWorld) time(ctx context.Context) (map[string]timed, error) {
	runs := map[string]func(context.Context) (time.Duration, error){}
	for _, name := range passNames {
		run, err := w.pass(name)
		if err != nil {
			return nil, err
		}
		if _, err := run(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		runs[name] = run
	}
	samples := map[string][]time.Duration{}
	for range PassRuns {
		for _, name := range passNames {
			d, err := runs[name](ctx)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			samples[name] = append(samples[name], d)
		}
	}
	out := map[string]timed{}
	for name, ds := range samples {
		lat := summarize(ds) // sorts ds
		out[name] = timed{P50: lat.P50, runs: ds}
	}
	return out, nil
}

// pass returns the function that runs one pass once and says how long
// the pass itself took (without what prepares it, as the bystander's
// event).
func (w *passesWorld) pass(name string) (func(context.Context) (time.Duration, error), error) {
	since := func(f func() error) (time.Duration, error) {
		t := time.Now()
		err := f()
		return time.Since(t), err
	}
	switch name {
	case "webhook claim":
		return w.claimPass, nil
	case "webhook gauges":
		return func(ctx context.Context) (time.Duration, error) {
			return since(func() error { _, err := webhooks.Backlog(ctx, w.pool); return err })
		}, nil
	case "reaper takeover":
		return func(ctx context.Context) (time.Duration, error) {
			return since(func() error {
				tx, err := w.pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx) //nolint:errcheck // nothing taken over is kept
				leases, err := w.keys.TakeOverExpired(ctx, tx, 4)
				if err == nil && len(leases) != 4 {
					err = fmt.Errorf("took over %d keys, not 4", len(leases))
				}
				return err
			})
		}, nil
	case "reaper census":
		return func(ctx context.Context) (time.Duration, error) {
			return since(func() error { _, err := w.keys.TakeCensus(ctx, w.pool, 10*time.Second); return err })
		}, nil
	case "key retention":
		return func(ctx context.Context) (time.Duration, error) {
			return since(func() error {
				r, err := idempotency.DropExpiredPartitions(ctx, w.pool, 24*time.Hour)
				if err == nil && len(r.Kept) != 1 {
					err = fmt.Errorf("kept %v, not the expired day alone", r.Kept)
				}
				return err
			})
		}, nil
	case "event retention":
		return func(ctx context.Context) (time.Duration, error) {
			return since(func() error {
				r, err := events.DropExpiredPartitions(ctx, w.pool, events.RetentionDefault)
				if err == nil && len(r.Kept) != 1 {
					err = fmt.Errorf("kept %v, not the expired day alone", r.Kept)
				}
				return err
			})
		}, nil
	case "console overview":
		return func(ctx context.Context) (time.Duration, error) {
			return since(func() error { return w.console.get(ctx, "/") })
		}, nil
	case "console webhooks":
		return func(ctx context.Context) (time.Duration, error) {
			return since(func() error { return w.console.get(ctx, "/webhooks") })
		}, nil
	case "timeline read":
		return func(ctx context.Context) (time.Duration, error) {
			return since(func() error {
				tl, err := timeline.Read(ctx, w.pool, w.hoarder, w.timelineKey)
				if err == nil && len(tl.Entries) < 2 {
					err = errors.New("the key's timeline lost its event")
				}
				return err
			})
		}, nil
	}
	return nil, fmt.Errorf("no pass %q", name)
}

// claimPass writes one event of the bystander and times the deliverer's
// pass that claims it and starts its attempt; it returns once the attempt
// is recorded, so that every pass finds the bystander's endpoint free.
func (w *passesWorld) claimPass(ctx context.Context) (time.Duration, error) {
	if _, err := events.Write(ctx, w.seed, w.bystander, events.ChargeAuthorized, []byte(`{"id":"ch_bystander","object":"charge"}`)); err != nil {
		return 0, err
	}
	t := time.Now()
	n, err := w.deliverer.RunOnce(ctx, &w.wg, make(chan struct{}, 1))
	took := time.Since(t)
	if err != nil {
		return 0, err
	}
	if n != 1 {
		return 0, fmt.Errorf("the pass started %d attempts, not the bystander's one", n)
	}
	select {
	case <-w.attemptDone:
	case <-time.After(10 * time.Second):
		return 0, errors.New("the bystander's attempt was not recorded within 10 s")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return took, nil
}
