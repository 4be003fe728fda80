package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"gonum.org/v1/plot/plotter"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/timeline"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// The growth step: every background pass timed against a backlog of 10³
// to 10⁶ rows that it must not read, built directly with SQL in a
// database of the step's own. A pass that costs what it picks stays flat
// (pitfall 90 "A backlog every pass reads again"); one that reads its
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

// hangingListener accepts requests and answers none until release.
func hangingListener() (addr string, release func()) {
	released := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-released:
		case <-r.Context().Done():
		}
	}))
	var once sync.Once
	return srv.Listener.Addr().String(), func() {
		once.Do(func() { close(released) })
		srv.Close()
	}
}

// dialTo is an HTTP client that connects to addrs[host] for the hosts it
// names, as a resolver would make it.
func dialTo(addrs map[string]string) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, target string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(target)
			if a, ok := addrs[host]; ok {
				target = a
			}
			return d.DialContext(ctx, network, target)
		},
		MaxIdleConnsPerHost: 8,
	}}
}

// passesPool opens a pool on url as phasepay's processes open theirs
// (dbpool.ConfigurePool: timeouts, one generic plan per statement), whose
// statements rec records.
func passesPool(ctx context.Context, url string, rec *statementRecorder) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	dbpool.ConfigurePool(cfg, url)
	cfg.ConnConfig.Tracer = rec
	cfg.MaxConns = 8
	return pgxpool.NewWithConfig(ctx, cfg)
}

// databaseURL is the admin URL with another database.
func databaseURL(admin, name string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// statementRecorder records the statements a pool runs while on: the
// plans of a pass are those of what it ran.
type statementRecorder struct {
	mu    sync.Mutex
	on    bool
	pass  string
	stmts []recorded
}

type recorded struct {
	pass, sql string
	args      []any
	// noJIT: the statement followed set_config('jit', 'off', true) in its
	// batch, and was planned so.
	noJIT bool
}

func (r *statementRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.stmts = append(r.stmts, recorded{pass: r.pass, sql: d.SQL, args: d.Args})
	}
	return ctx
}

func (r *statementRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The statements of a batch are recorded too: the deliverer sends its walks
// in one (webhooks.collectWithoutJIT).

func (r *statementRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *statementRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		n := len(r.stmts)
		noJIT := n > 0 && strings.Contains(r.stmts[n-1].sql, "set_config('jit', 'off', true)")
		r.stmts = append(r.stmts, recorded{pass: r.pass, sql: d.SQL, args: d.Args, noJIT: noJIT})
	}
}

func (r *statementRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (r *statementRecorder) record(pass string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.pass = pass != "", pass
}

// ignoredStatements are what a pass runs that reads no table a backlog
// grows: transaction control and session settings.
func ignoredStatement(sql string) bool {
	s := strings.ToUpper(strings.TrimSpace(sql))
	for _, p := range []string{"BEGIN", "COMMIT", "ROLLBACK", "SELECT SET_CONFIG", "SAVEPOINT", "RELEASE", "DROP TABLE", "ALTER TABLE"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return !strings.Contains(sql, "webhook_deliveries") && !strings.Contains(sql, "idempotency_keys") &&
		!strings.Contains(sql, "events") && !strings.Contains(sql, "_p2")
}

// plans runs each pass once with its statements recorded, and explains
// each statement it ran (EXPLAIN ANALYZE, in a transaction rolled back)
// in the generic plan phasepay's connections make.
func (w *passesWorld) plans(ctx context.Context) ([]PassPlan, error) {
	for _, name := range passNames {
		run, err := w.pass(name)
		if err != nil {
			return nil, err
		}
		w.recorder.record(name)
		_, err = run(ctx)
		w.recorder.record("")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	conn, err := pgx.Connect(ctx, w.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		return nil, err
	}
	var out []PassPlan
	seen := map[string]bool{}
	w.recorder.mu.Lock()
	stmts := w.recorder.stmts
	w.recorder.mu.Unlock()
	for i, s := range stmts {
		if ignoredStatement(s.sql) || seen[s.pass+s.sql] {
			continue
		}
		seen[s.pass+s.sql] = true
		jit := "on"
		if s.noJIT {
			jit = "off"
		}
		if _, err := conn.Exec(ctx, "SET jit = "+jit); err != nil {
			return nil, err
		}
		plan, err := explain(ctx, conn, fmt.Sprintf("s%d", i), s.sql, s.args)
		if err != nil {
			return nil, fmt.Errorf("%s: explain %q: %w", s.pass, firstLine(s.sql), err)
		}
		out = append(out, PassPlan{Pass: s.pass, Plan: trimPlan(plan)})
	}
	return out, nil
}

func firstLine(sql string) string {
	sql = strings.TrimSpace(sql)
	if i := strings.IndexByte(sql, '\n'); i > 0 {
		return sql[:i]
	}
	return sql
}

// explain explains sql's execution with args, in a transaction rolled
// back, as phasepay runs it: the statement's text, then its plan. A
// statement sent with its values (the simple protocol) is explained with
// them; any other is prepared as name and explained in its generic plan,
// the arguments sent as literals of its parameter types (EXECUTE takes no
// parameters of its own).
func explain(ctx context.Context, conn *pgx.Conn, name, sql string, args []any) (string, error) {
	var (
		values []any
		simple bool
	)
	for _, a := range args {
		if m, ok := a.(pgx.QueryExecMode); ok {
			simple = m == pgx.QueryExecModeSimpleProtocol
			continue
		}
		values = append(values, a)
	}
	if simple {
		return explainWith(ctx, conn, sql, "EXPLAIN (ANALYZE, BUFFERS) "+sql, append([]any{pgx.QueryExecModeSimpleProtocol}, values...))
	}
	sd, err := conn.Prepare(ctx, name, sql)
	if err != nil {
		return "", err
	}
	if len(sd.ParamOIDs) != len(values) {
		return "", fmt.Errorf("%d parameters, %d arguments", len(sd.ParamOIDs), len(values))
	}
	lits := make([]string, len(values))
	for i, v := range values {
		buf, err := conn.TypeMap().Encode(sd.ParamOIDs[i], pgtype.TextFormatCode, v, nil)
		if err != nil {
			return "", fmt.Errorf("argument %d: %w", i+1, err)
		}
		lits[i] = "NULL"
		if buf != nil {
			lits[i] = "'" + strings.ReplaceAll(string(buf), "'", "''") + "'"
		}
	}
	stmt := "EXPLAIN (ANALYZE, BUFFERS) EXECUTE " + name
	if len(lits) > 0 {
		stmt += "(" + strings.Join(lits, ", ") + ")"
	}
	return explainWith(ctx, conn, sql, stmt, []any{pgx.QueryExecModeSimpleProtocol})
}

// explainWith runs an EXPLAIN of sql in a transaction rolled back.
func explainWith(ctx context.Context, conn *pgx.Conn, sql, stmt string, args []any) (string, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // an explained write is not kept
	rows, err := tx.Query(ctx, stmt, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(sql) + "\n\n" + strings.Join(lines, "\n"), nil
}

// table renders the passes' costs as Markdown: a row per pass, its p50 at
// each size and the ratio of the largest to the smallest.
func (p *Passes) table() string {
	if p == nil || len(p.Sizes) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| background pass, p50 ms, against a backlog of |")
	for _, s := range p.Sizes {
		fmt.Fprintf(&b, " %s |", rowsLabel(s))
	}
	b.WriteString(" largest ÷ smallest |\n|---|")
	for range p.Sizes {
		b.WriteString("---:|")
	}
	b.WriteString("---:|\n")
	for _, name := range passNames {
		fmt.Fprintf(&b, "| %s |", name)
		for _, s := range p.Sizes {
			for _, c := range p.Costs {
				if c.Pass == name && c.Backlog == s {
					fmt.Fprintf(&b, " %.3f |", c.P50)
				}
			}
		}
		ratio, _, _ := p.Ratio(name)
		fmt.Fprintf(&b, " %.2f× |\n", ratio)
	}
	return b.String()
}

// rowsLabel writes a backlog size as a power of ten where it is one.
func rowsLabel(n int) string {
	for e, v := 0, 1; v <= n; e, v = e+1, v*10 {
		if v == n && e >= 3 {
			return "10" + string([]rune("⁰¹²³⁴⁵⁶⁷⁸⁹")[e])
		}
	}
	return fmt.Sprint(n)
}

// chart is the passes plot: each pass's p50 against the backlog, both
// scales logarithmic, so that a flat line is a pass that costs what it
// picks and one that reads its backlog climbs a decade a decade.
func (p *Passes) chart() chart {
	c := chart{file: "passes.svg", title: "Background passes against a backlog they must not read",
		x: "backlog rows", y: "p50 ms", logX: true, logY: true, colors: passesPalette,
		xLabel: func(x float64) string { return rowsLabel(int(x)) }}
	for _, name := range passNames {
		var xys plotter.XYs
		for _, cost := range p.Costs {
			if cost.Pass == name && cost.P50 > 0 {
				xys = append(xys, plotter.XY{X: float64(cost.Backlog), Y: cost.P50})
			}
		}
		c.lines = append(c.lines, series{name: name, points: xys})
	}
	return c
}

// PassesResults is where the growth step's results are kept, beside a
// complete run's (bench/results/latest.json): the step runs alone too.
const PassesResults = "growth.json"

// WritePasses writes the growth step's results (r.Passes alone) to
// dir/growth.json and its plot to plotDir, and returns their paths.
func WritePasses(r *Results, dir, plotDir string) ([]string, error) {
	only := &Results{Machine: r.Machine, Started: r.Started, Passes: r.Passes}
	b, err := json.MarshalIndent(only, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, PassesResults)
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	c := r.Passes.chart()
	svg, err := c.svg(r.Passes.Machine + ", " + r.Passes.Started.UTC().Format("2006-01-02 15:04 UTC"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(plotDir, 0o755); err != nil {
		return nil, err
	}
	plot := filepath.Join(plotDir, c.file)
	if err := os.WriteFile(plot, svg, 0o644); err != nil {
		return nil, err
	}
	return []string{path, plot}, nil
}

// emptyPartitionScan is a plan node scanning a day partition that returned
// nothing: one per day kept, most of every plan's lines.
var emptyPartitionScan = regexp.MustCompile(`^\s*->\s+.*Scan.* on \w+_p\d{8}\b.*(?:actual (?:time=\S+ )?rows=0 loops=\d+\)|\(never executed\))`)

// trimPlan leaves out of a plan the scans of day partitions that returned
// no row, with their details, and says how many it left out.
func trimPlan(plan string) string {
	var (
		out    []string
		skip   = -1 // the indentation of the node being left out
		missed int
	)
	for _, line := range strings.Split(plan, "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if skip >= 0 {
			if indent > skip {
				continue // the node's details and children
			}
			skip = -1
		}
		if emptyPartitionScan.MatchString(line) {
			skip = indent
			missed++
			continue
		}
		out = append(out, line)
	}
	if missed > 0 {
		out = append(out, fmt.Sprintf("(%d scans of day partitions that returned no row left out)", missed))
	}
	return strings.Join(out, "\n")
}
