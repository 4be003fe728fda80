package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/tools/procs"
)

// The on/off steps (instrumentation, timeline) compare two configurations
// of the same api whose costs differ by a few percent. Measured one arm
// after the other on the run's database, one arm could cost a fifth more
// than its neighbour for reasons of state, not of the setting: the tables
// and indexes the earlier steps grew (with no VACUUM on a server without
// autovacuum), an ANALYZE or a checkpoint's full-page images landing
// inside one arm, the same arm always running first, and whatever else
// the machine did in that arm's seconds.
//
// So each pair runs both arms on databases of their own, cloned from the
// freshly migrated one, warmed, vacuumed, analyzed and checkpointed alike;
// the two stacks then take turns in short slices (A B B A …); and a step
// reports the median of its pairs' costs beside each pair's.

// onOffPairs is the fewest pairs an on/off step runs: a median of four
// pairs survives one disturbed pair.
const onOffPairs = 4

// armWarmup is the unmeasured load before each arm: it plans every
// statement on the api's connections and writes the rows the ANALYZE
// after it gives the planner.
const armWarmup = 2 * time.Second

// armDB is an arm's own database, cloned from the run's template.
type armDB struct {
	name string
	url  string
	pool *pgxpool.Pool
}

// newArmDB clones the run's template (env.setup) into a fresh database.
// Autovacuum is disabled on every table of the template, so that no
// autovacuum starts inside an arm on a server that runs it.
func (e *env) newArmDB(ctx context.Context, n int) (*armDB, error) {
	name := fmt.Sprintf("%s_arm%d", e.dbName, n)
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return nil, err
	}
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+e.armTemplate()); err != nil {
		return nil, fmt.Errorf("arm database: %w", err)
	}
	a := &armDB{name: name, url: e.urlOf(name)}
	// Two connections do the settling and the CPU snapshots: on a shared
	// server, the two stacks' pools already hold up to 64.
	var err error
	sep := "?"
	if strings.Contains(a.url, "?") {
		sep = "&"
	}
	if a.pool, err = pgxpool.New(ctx, a.url+sep+"pool_max_conns=2"); err != nil {
		a.drop(ctx, e)
		return nil, err
	}
	return a, nil
}

// settle brings an arm's database to the state every arm starts from:
// dead rows vacuumed, statistics of what the warm-up wrote (which makes
// every connection plan its statements again), and a checkpoint, so that
// each arm pays the same full-page images after it.
func (a *armDB) settle(ctx context.Context) error {
	for _, stmt := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
		if _, err := a.pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

func (a *armDB) drop(ctx context.Context, e *env) {
	if a.pool != nil {
		a.pool.Close()
	}
	_, _ = e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+a.name+" WITH (FORCE)")
}

// stackArm is an arm running the api (and a mock PSP) with extra in its
// environment.
func (e *env) stackArm(name string, extra map[string]string) arm {
	return arm{name: name, start: func(ctx context.Context, dbURL string) (string, int, func(), error) {
		base, api, stop, err := e.startStackProc(ctx, dbURL, extra)
		if err != nil {
			return "", 0, nil, err
		}
		return base, api.cmd.Process.Pid, stop, nil
	}}
}

// arm is one measured side of an on/off pair. start starts the stack under
// test on dbURL and returns its base URL, the pid of its api and its stop.
// check, if set, inspects the arm's database after the load (that the
// setting did what it says).
type arm struct {
	name  string
	start func(ctx context.Context, dbURL string) (base string, apiPid int, stop func(), err error)
	check func(ctx context.Context, pool *pgxpool.Pool) error
}

// armRun is one measured arm: its load, and its api's CPU per request.
type armRun struct {
	LoadResult
	apiCPU float64
}

// armStack is an arm's stack, running on a database of its own.
type armStack struct {
	arm
	db   *armDB
	base string
	pid  int
	stop func()
	// slices are its measured slices, summed by run.
	slices []armRun
}

// close stops the stack and drops its database.
func (s *armStack) close(ctx context.Context, e *env) {
	if s.stop != nil {
		s.stop()
	}
	s.db.drop(context.WithoutCancel(ctx), e)
}

// startArm starts a's stack on a fresh database and warms it at c clients.
func (e *env) startArm(ctx context.Context, a arm, c, n int) (*armStack, error) {
	db, err := e.newArmDB(ctx, n)
	if err != nil {
		return nil, err
	}
	st := &armStack{arm: a, db: db}
	if st.base, st.pid, st.stop, err = a.start(ctx, db.url); err != nil {
		st.close(ctx, e)
		return nil, fmt.Errorf("%s: %w", a.name, err)
	}
	w := load(ctx, e.hc, st.base, e.apiKey, c, min(armWarmup, e.cfg.Duration), http.StatusCreated, func(w, i int) request {
		return request{keyf("warm-%s-%d-%d", a.name, w, i), []byte(visa)}
	}, nil)
	if w.Requests == 0 {
		st.close(ctx, e)
		return nil, fmt.Errorf("%s: the warm-up answered no charge (%v, %d errors)", a.name, w.Statuses, w.Errors)
	}
	return st, nil
}

// slice measures one slice of st's arm at c clients for d.
func (e *env) slice(ctx context.Context, st *armStack, c, n int, d time.Duration) {
	before := processTicks(st.pid)
	r := e.costedOn(ctx, st.db.pool, func() LoadResult {
		return load(ctx, e.hc, st.base, e.apiKey, c, d, http.StatusCreated, func(w, i int) request {
			return request{keyf("%s-%d-%d-%d-%d", st.name, c, n, w, i), []byte(visa)}
		}, nil)
	})
	st.slices = append(st.slices, armRun{LoadResult: r, apiCPU: procs.TicksToMillis(processTicks(st.pid) - before)})
}

// run sums st's slices into one arm: throughput over the time they ran,
// CPU per request over their requests, the median of their latencies.
func (st *armStack) run() armRun {
	out := armRun{LoadResult: LoadResult{Statuses: map[int]int{}}}
	var secs, dbMillis float64
	var lats []LoadResult
	for _, s := range st.slices {
		out.Clients = s.Clients
		out.Requests += s.Requests
		out.Errors += s.Errors
		for k, v := range s.Statuses {
			out.Statuses[k] += v
		}
		if s.Requests > 0 {
			secs += float64(s.Requests) / s.PerSec
			lats = append(lats, s.LoadResult)
		}
		if s.CPU != nil {
			dbMillis += s.CPU.Database * float64(s.Requests)
		}
		out.apiCPU += s.apiCPU // milliseconds, per request below
	}
	if out.Requests > 0 {
		out.PerSec = float64(out.Requests) / secs
		out.apiCPU /= float64(out.Requests)
		out.CPU = &CPUCost{Database: dbMillis / float64(out.Requests)}
		out.Latency = median(lats).Latency
	}
	return out
}

// onOffSlices is how many slices each arm of a pair is measured in. The
// two stacks run side by side and take turns (A B B A A B …), so that what
// else the machine does in those seconds falls on both alike.
const onOffSlices = 10

// onOffPair measures one pair: both arms on fresh databases, warmed and
// settled alike, then measured in turns for e.cfg.Duration each.
func (e *env) onOffPair(ctx context.Context, on, off arm, c, i int) (o, f armRun, err error) {
	first, second := on, off
	if i%2 == 1 {
		first, second = off, on
	}
	sa, err := e.startArm(ctx, first, c, 2*i)
	if err != nil {
		return o, f, err
	}
	defer sa.close(ctx, e)
	sb, err := e.startArm(ctx, second, c, 2*i+1)
	if err != nil {
		return o, f, err
	}
	defer sb.close(ctx, e)
	for _, st := range []*armStack{sa, sb} {
		if err := st.db.settle(ctx); err != nil {
			return o, f, err
		}
	}
	d := e.cfg.Duration / onOffSlices
	for k := range onOffSlices {
		order := []*armStack{sa, sb}
		if k%2 == 1 {
			order = []*armStack{sb, sa}
		}
		for _, st := range order {
			e.slice(ctx, st, c, k, d)
		}
	}
	for _, st := range []*armStack{sa, sb} {
		if st.check != nil {
			if err := st.check(ctx, st.db.pool); err != nil {
				return o, f, fmt.Errorf("%s: %w", st.name, err)
			}
		}
	}
	o, f = sa.run(), sb.run()
	if first.name != on.name {
		o, f = f, o
	}
	return o, f, nil
}

// Pairs is an on/off step's per-pair figures at one level.
type Pairs struct {
	// Costs are each pair's 1 − on ÷ off throughput, in the order run.
	Costs []float64 `json:"costs"`
	// CPUCosts are each pair's 1 − off ÷ on CPU per charge (api and
	// database).
	CPUCosts []float64 `json:"cpu_costs"`
	// Min and Max are the range of Costs: how far one pair can be trusted.
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// onOff runs pairs pairs of the on and off arms at c clients and returns
// every arm and the pairs' costs.
func (e *env) onOff(ctx context.Context, on, off arm, c, pairs int) (ons, offs []armRun, p Pairs, err error) {
	for i := range pairs {
		o, f, err := e.onOffPair(ctx, on, off, c, i)
		for retry := 0; tooManyClients(err) && retry < 2; retry++ {
			e.log("    pair %d: %v; again in 10 s", i+1, err)
			time.Sleep(10 * time.Second)
			o, f, err = e.onOffPair(ctx, on, off, c, i)
		}
		if err != nil {
			return nil, nil, Pairs{}, err
		}
		ons, offs = append(ons, o), append(offs, f)
		p.Costs = append(p.Costs, 1-ratio(o.PerSec, f.PerSec))
		p.CPUCosts = append(p.CPUCosts, 1-ratio(armCPU(f).total(), armCPU(o).total()))
		e.log("    pair %d: on %.0f/s, off %.0f/s: %.1f%%; CPU per charge %.3f against %.3f ms: %.1f%%", i+1,
			o.PerSec, f.PerSec, 100*p.Costs[i], armCPU(o).total(), armCPU(f).total(), 100*p.CPUCosts[i])
	}
	p.Min, p.Max = slices.Min(p.Costs), slices.Max(p.Costs)
	return ons, offs, p, nil
}

// medianFloat is the median of xs (0 for none).
func medianFloat(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// loads returns the load results of runs.
func loads(runs []armRun) []LoadResult {
	out := make([]LoadResult, len(runs))
	for i, r := range runs {
		out[i] = r.LoadResult
	}
	return out
}

// tooManyClients reports whether err is the server refusing a connection
// at max_connections: other work on a shared server, which a pair run
// again a little later may not meet.
func tooManyClients(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "53300" // too_many_connections
}
