// Package bench is `make bench`: phasepay measured against what PostgreSQL
// itself does on the same machine, in the same run, at the same
// concurrency levels. See Run for the steps and README.md for the latest
// table.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/dbpool"
)

// Config configures a run.
type Config struct {
	// AdminURL is a connection string to the server's maintenance database;
	// the run creates (and drops) a database of its own.
	AdminURL string
	// BinDir holds api and mockpsp (make build).
	BinDir string
	// ModuleDir is the repository root (for the Go micro-benchmarks).
	ModuleDir string
	// Levels are the concurrency levels. Default 1, 8, 32.
	Levels []int
	// Duration of each measured load. Default 10s.
	Duration time.Duration
	// GrowthSizes are the existing-key counts of the cost-growth
	// measurement. Default 0, 1 M, 10 M.
	GrowthSizes []int
	// RetentionRows is the size of the day partition dropped. Default 1 M.
	RetentionRows int
	// Log receives progress lines.
	Log io.Writer
	// Steps, if set, runs only the steps whose names start with one of
	// these (e.g. "new" for the loads alone, while profiling).
	Steps []string
	// Reps is how many times each of two compared loads runs, alternating
	// (A B A B for 2): this machine's disk-sync speed swings within
	// minutes, so a ratio is only fair between neighbouring runs, and a
	// median only over several. Default 2.
	Reps int
	// Partitions are the daily-partition counts of the claim measurement.
	// Default 1, 7, 30.
	Partitions []int
	// RowsPerDay are the keys stored in each day of that measurement.
	// Default 20,000.
	RowsPerDay int
}

// Results is everything one run measured.
type Results struct {
	Machine    string       `json:"machine"`
	Started    time.Time    `json:"started"`
	Duration   string       `json:"duration"`
	Baseline   Baselines    `json:"baseline"`
	Commits    []Commits    `json:"commits_per_charge"`
	NewCharges []LoadResult `json:"new_charges"`
	// NewChargesOneCommit is the new-charge load at the highest level with
	// ONE_COMMIT_PER_PHASE, for comparison.
	NewChargesOneCommit LoadResult   `json:"new_charges_one_commit_per_phase"`
	Replays             []LoadResult `json:"replays"`
	InProgress          []LoadResult `json:"in_progress_409"`
	Efficiency          []Efficiency `json:"efficiency"`
	Growth              []Growth     `json:"growth"`
	Retention           Retention    `json:"retention"`
	Micro               []string     `json:"go_micro_benchmarks"`
	// Alternations is Config.Reps: every load compared with a baseline is
	// the median of this many runs, alternated with the baseline's.
	Alternations            int              `json:"alternations"`
	RoundTrips              RoundTrips       `json:"round_trips"`
	Bare                    Bare             `json:"bare"`
	ClaimByPartitions       []PartitionClaim `json:"claim_by_partitions"`
	InstrumentationOverhead []Overhead       `json:"instrumentation_overhead"`
	DropImpact              DropImpact       `json:"drop_impact"`
	TenantFKs               TenantFKs        `json:"tenant_foreign_keys"`
	Targets                 []Target         `json:"targets"`
	// Captures and Refunds are the throughput of those operations per
	// level, each request on a charge of its own (see operations).
	Captures []LoadResult `json:"captures"`
	Refunds  []LoadResult `json:"refunds"`
	// PrimaryDown is new charges between two PSPs, the first down (failover.go).
	PrimaryDown PrimaryDown `json:"primary_down"`
}

// Baselines are pgbench's numbers per level.
type Baselines struct {
	Insert []Baseline `json:"insert_commit"`
	Select []Baseline `json:"pk_select_1m"`
}

// Commits counts transactions per new charge, measured, in one mode.
type Commits struct {
	Mode string `json:"mode"`
	// Charges is how many new charges the count is over.
	Charges int `json:"charges"`
	// Xact is pg_stat_database.xact_commit per charge: every committed
	// transaction, read-only ones included.
	Xact float64 `json:"xact_commit"`
	// Durable is WAL COMMIT records per charge (pg_waldump): the commits
	// that write and flush WAL. -1 if pg_waldump could not read the WAL.
	Durable float64 `json:"durable_wal_commits"`
}

// Efficiency compares phasepay with the baselines at one level.
type Efficiency struct {
	Clients int `json:"clients"`
	// NewCharge = charges/s × durable commits per charge ÷ baseline INSERT tps.
	NewCharge float64 `json:"new_charge"`
	// Replay = replays/s ÷ baseline SELECT tps.
	Replay float64 `json:"replay"`
}

// Growth is the cost of a claim and a replay with Keys keys stored.
type Growth struct {
	Keys        int     `json:"existing_keys"`
	ClaimP50    float64 `json:"claim_p50_ms"`
	ClaimP99    float64 `json:"claim_p99_ms"`
	ReplayP50   float64 `json:"replay_p50_ms"`
	SeedSeconds float64 `json:"seed_seconds"`
}

// Retention compares dropping a day partition with deleting its rows.
type Retention struct {
	Rows             int     `json:"rows"`
	DetachMs         float64 `json:"detach_ms"`
	DropMs           float64 `json:"drop_ms"`
	DropWALBytes     int64   `json:"drop_wal_bytes"`
	DropDeadTuples   int64   `json:"drop_dead_tuples"`
	DeleteMs         float64 `json:"delete_ms"`
	DeleteWALBytes   int64   `json:"delete_wal_bytes"`
	DeleteDeadTuples int64   `json:"delete_dead_tuples"`
}

// Target is one goal of the benchmark issue and whether this run met it.
type Target struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Goal  string `json:"goal"`
	Met   bool   `json:"met"`
}

type env struct {
	cfg Config
	// dbName is the run's own database (benchDB), dbURL its URL.
	dbName string
	dbURL  string
	// partsURL is a copy of the freshly migrated database, for the
	// claim-by-partitions step, which drops and creates partitions.
	partsURL string
	admin    *pgx.Conn
	pool     *pgxpool.Pool
	// claims is a pool on dbURL opened like the api's (apiPool), for the
	// claims timed directly (growth, drop impact).
	claims *pgxpool.Pool
	apiKey string
	hc     *http.Client
	log    func(format string, args ...any)
}

// Run runs the whole benchmark.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if len(cfg.Levels) == 0 {
		cfg.Levels = []int{1, 8, 32}
	}
	cfg.Duration = cmp.Or(cfg.Duration, 10*time.Second)
	if cfg.GrowthSizes == nil {
		cfg.GrowthSizes = []int{0, 1_000_000, 10_000_000}
	}
	cfg.RetentionRows = cmp.Or(cfg.RetentionRows, 1_000_000)
	cfg.Reps = cmp.Or(cfg.Reps, 2)
	if len(cfg.Partitions) == 0 {
		cfg.Partitions = []int{1, 7, 30}
	}
	cfg.RowsPerDay = cmp.Or(cfg.RowsPerDay, 20_000)
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	start := time.Now()
	res := &Results{Started: start.UTC(), Machine: machine(), Alternations: cfg.Reps}
	e := &env{cfg: cfg, log: func(f string, a ...any) { fmt.Fprintf(cfg.Log, "bench: "+f+"\n", a...) }}
	e.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}, Timeout: 30 * time.Second}
	defer e.hc.CloseIdleConnections()

	if err := e.setup(ctx); err != nil {
		return nil, err
	}
	defer e.teardown()

	steps := []struct {
		name string
		run  func(context.Context, *Results) error
	}{
		{"baselines (pgbench)", e.baselines},
		{"commits per new charge", e.commits},
		{"round trips per new charge and replay", e.roundTrips},
		{"new charges, replays, 409s (alternating with bare baselines)", e.loads},
		{"captures and refunds", e.operations},
		{"new charges with the primary PSP down (breaker open)", e.primaryDown},
		{"instrumentation overhead (alternating on/off)", e.instrumentation},
		{"tenant foreign keys (alternating with/without)", e.tenantFKs},
		{"claim by partition count", e.claimByPartitions},
		{"cost growth with stored keys", e.growth},
		{"retention: drop vs delete, claims during the drop", e.retention},
		{"Go micro-benchmarks", e.micro},
	}
	for _, s := range steps {
		if !selected(cfg.Steps, s.name) {
			continue
		}
		e.log("%s…", s.name)
		if err := s.run(ctx, res); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	res.Efficiency = efficiency(res)
	res.Targets = targets(res)
	res.Duration = time.Since(start).Truncate(time.Second).String()
	return res, nil
}

func machine() string {
	host, _ := os.Hostname()
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if m := regexp.MustCompile(`model name\s*:\s*(.*)`).FindSubmatch(b); m != nil {
			cpu = string(m[1])
		}
	}
	return fmt.Sprintf("%s, %d cores (%s), %s", host, runtime.NumCPU(), cpu, runtime.Version())
}

func (e *env) setup(ctx context.Context) error {
	var err error
	if e.admin, err = pgx.Connect(ctx, e.cfg.AdminURL); err != nil {
		return fmt.Errorf("admin database: %w", err)
	}
	name := benchDB()
	e.dbName = name
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	u, err := url.Parse(e.cfg.AdminURL)
	if err != nil {
		return err
	}
	u.Path = "/" + name
	e.dbURL = u.String()
	if out, err := e.run(ctx, "api", nil, "migrate"); err != nil {
		return fmt.Errorf("migrate: %w: %s", err, out)
	}
	out, err := e.run(ctx, "api", nil, "keys", "create", "--tenant", "bench")
	if err != nil {
		return fmt.Errorf("keys create: %w: %s", err, out)
	}
	e.apiKey = strings.TrimSpace(out)
	// Nothing is connected to the new database yet: it can be a template.
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.partsDB()+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+e.partsDB()+" TEMPLATE "+name); err != nil {
		return err
	}
	u.Path = "/" + e.partsDB()
	e.partsURL = u.String()
	if e.pool, err = pgxpool.New(ctx, e.dbURL); err != nil {
		return err
	}
	e.claims, err = apiPool(ctx, e.dbURL)
	return err
}

// apiPool opens a pool on url the way the api opens its own
// (dbpool.ConfigurePool: its timeouts and its plan cache mode, which
// decides whether a claim's statements are planned at every execution),
// so that the claims the benchmark times directly cost what the api's do.
// Seeding and other set-up use a plain pool: a 10 M-key seed runs for
// minutes, past the api's statement_timeout.
func apiPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	dbpool.ConfigurePool(cfg, url)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// benchDB names a run's database after its process, so that two runs at
// once (a profile beside a full run, say) do not drop each other's.
func benchDB() string { return fmt.Sprintf("phasepay_bench_%d", os.Getpid()) }

// partsDB is the database of the claim-by-partitions step.
func (e *env) partsDB() string { return e.dbName + "_parts" }

func (e *env) teardown() {
	if e.claims != nil {
		e.claims.Close()
	}
	if e.pool != nil {
		e.pool.Close()
	}
	ctx := context.Background()
	_, _ = e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.dbName+" WITH (FORCE)")
	_, _ = e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.partsDB()+" WITH (FORCE)")
	e.admin.Close(ctx)
}

func (e *env) run(ctx context.Context, bin string, extra map[string]string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.BinDir, bin), args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+e.dbURL)
	for k, v := range extra {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out) + string(ee.Stderr), err
	}
	return string(out), err
}

// startStack starts the mock PSP (no faults, no latency) and one API.
func (e *env) startStack(ctx context.Context, extra map[string]string) (base string, stop func(), err error) {
	return e.startStackOn(ctx, e.dbURL, extra)
}

// startPSP starts a mock PSP process and returns its base URL.
func (e *env) startPSP(ctx context.Context) (string, *server, error) {
	pspAddr, err := freeAddr()
	if err != nil {
		return "", nil, err
	}
	psp, err := startServer(ctx, filepath.Join(e.cfg.BinDir, "mockpsp"), map[string]string{"MOCKPSP_ADDR": pspAddr},
		"http://"+pspAddr+"/_admin/authorizations")
	if err != nil {
		return "", nil, err
	}
	return "http://" + pspAddr, psp, nil
}

// startStackOn is startStack with the API connecting to dbURL (the
// round-trip counter's proxy, say).
func (e *env) startStackOn(ctx context.Context, dbURL string, extra map[string]string) (base string, stop func(), err error) {
	pspURL, psp, err := e.startPSP(ctx)
	if err != nil {
		return "", nil, err
	}
	apiAddr, err := freeAddr()
	if err != nil {
		psp.stop()
		return "", nil, err
	}
	envs := map[string]string{"DATABASE_URL": dbURL, "API_ADDR": apiAddr, "PSP_URL": pspURL}
	for k, v := range extra {
		envs[k] = v
	}
	api, err := startServer(ctx, filepath.Join(e.cfg.BinDir, "api"), envs, "http://"+apiAddr+"/healthz", "serve")
	if err != nil {
		psp.stop()
		return "", nil, err
	}
	return "http://" + apiAddr, func() { api.stop(); psp.stop() }, nil
}

const visa = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

func (e *env) baselines(ctx context.Context, res *Results) error {
	// Tables shaped like idempotency_keys (its columns, defaults, checks
	// and primary key), unpartitioned.
	if _, err := e.pool.Exec(ctx, `CREATE TABLE bench_keys (LIKE idempotency_keys INCLUDING ALL)`); err != nil {
		return err
	}
	if err := e.selectTable(ctx); err != nil {
		return err
	}
	for _, c := range e.cfg.Levels {
		ins, err := runPgbench(ctx, e.dbURL, pgbenchInsert, c, e.cfg.Duration)
		if err != nil {
			return err
		}
		sel, err := runPgbench(ctx, e.dbURL, pgbenchSelect, c, e.cfg.Duration)
		if err != nil {
			return err
		}
		res.Baseline.Insert = append(res.Baseline.Insert, ins)
		res.Baseline.Select = append(res.Baseline.Select, sel)
		e.log("  %2d clients: INSERT %.0f tps (%.2f ms), SELECT %.0f tps (%.3f ms)", c, ins.TPS, ins.LatencyAvg, sel.TPS, sel.LatencyAvg)
	}
	// bench_select stays, for the PK SELECT run beside the replays.
	_, err := e.pool.Exec(ctx, `DROP TABLE bench_keys`)
	return err
}

// selectTable creates and fills bench_select, pgbenchSelect's table of 1 M
// rows shaped like finished idempotency keys (unpartitioned), unless it
// exists.
func (e *env) selectTable(ctx context.Context) error {
	var exists bool
	if err := e.pool.QueryRow(ctx, `SELECT to_regclass('bench_select') IS NOT NULL`).Scan(&exists); err != nil || exists {
		return err
	}
	for _, stmt := range []string{
		`CREATE TABLE bench_select (LIKE idempotency_keys INCLUDING ALL)`,
		`INSERT INTO bench_select (tenant_id, key, fingerprint, request_method, request_path, request_body,
		        state, recovery_point, response_status, response_content_type, response_body)
		 SELECT 1, 'k' || g, sha256(g::text::bytea), 'POST', '/v1/charges', convert_to('` + visa + `', 'UTF8'),
		        'done', 'done', 201, 'application/json', convert_to(repeat('x', 260), 'UTF8')
		   FROM generate_series(1, 1000000) g`,
		`VACUUM ANALYZE bench_select`,
	} {
		if _, err := e.pool.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// commits counts, for n new charges sent one at a time, the transactions
// committed in the benchmark's database (pg_stat_database) and the COMMIT
// records in the WAL (pg_waldump). The API is stopped before the count is
// read, so its backends have flushed their statistics.
func (e *env) commits(ctx context.Context, res *Results) error {
	for _, mode := range []struct {
		name      string
		oneCommit bool
	}{{"folded (default)", false}, {"one commit per phase", true}} {
		const n = 500
		base, stop, err := e.startStack(ctx, map[string]string{"ONE_COMMIT_PER_PHASE": strconv.FormatBool(mode.oneCommit)})
		if err != nil {
			return err
		}
		// Warm up: connections, prepared statements, the auth cache.
		load(ctx, e.hc, base, e.apiKey, 1, 500*time.Millisecond, 201, func(w, i int) request {
			return request{keyf("warm-%v-%d", mode.oneCommit, i), []byte(visa)}
		}, nil)
		time.Sleep(1500 * time.Millisecond) // let the warm-up's statistics flush
		xact0, lsn0, err := e.dbCounters(ctx)
		if err != nil {
			stop()
			return err
		}
		sent := 0
		for i := range n {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/charges", strings.NewReader(visa))
			req.Header.Set("Authorization", "Bearer "+e.apiKey)
			req.Header.Set("Idempotency-Key", keyf("commits-%v-%d", mode.oneCommit, i))
			req.Header.Set("Content-Type", "application/json")
			resp, err := e.hc.Do(req)
			if err != nil {
				stop()
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				sent++
			}
		}
		stop()
		time.Sleep(500 * time.Millisecond)
		xact1, lsn1, err := e.dbCounters(ctx)
		if err != nil {
			return err
		}
		c := Commits{Mode: mode.name, Charges: sent, Xact: float64(xact1-xact0) / float64(sent), Durable: -1}
		if walCommits, err := walCommits(ctx, e.admin, lsn0, lsn1); err == nil {
			c.Durable = float64(walCommits) / float64(sent)
		} else {
			e.log("  pg_waldump: %v", err)
		}
		res.Commits = append(res.Commits, c)
		e.log("  %s: %.2f xact_commit, %.2f WAL commits per charge", c.Mode, c.Xact, c.Durable)
	}
	return nil
}

// dbCounters reads xact_commit of the benchmark's database and the WAL
// position, from the admin connection (whose own transactions are in
// another database).
func (e *env) dbCounters(ctx context.Context) (xact int64, lsn string, err error) {
	if _, err := e.admin.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return 0, "", err
	}
	err = e.admin.QueryRow(ctx, `SELECT xact_commit, pg_current_wal_lsn()::text FROM pg_stat_database WHERE datname = $1`, e.dbName).Scan(&xact, &lsn)
	return xact, lsn, err
}

var walCommitRE = regexp.MustCompile(`Transaction/COMMIT\s+(\d+)`)

func walCommits(ctx context.Context, admin *pgx.Conn, from, to string) (int64, error) {
	var dataDir string
	if err := admin.QueryRow(ctx, `SHOW data_directory`).Scan(&dataDir); err != nil {
		return 0, err
	}
	bin := "pg_waldump"
	if p, err := exec.LookPath(bin); err == nil {
		bin = p
	} else if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_waldump"); len(m) > 0 {
		bin = m[len(m)-1]
	}
	out, err := exec.CommandContext(ctx, bin, "--stats=record", "-p", filepath.Join(dataDir, "pg_wal"), "-s", from, "-e", to).CombinedOutput()
	m := walCommitRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

func efficiency(res *Results) []Efficiency {
	commits := 2.0
	for _, c := range res.Commits {
		if strings.HasPrefix(c.Mode, "folded") && c.Durable > 0 {
			commits = c.Durable
		}
	}
	var out []Efficiency
	for i, n := range res.NewCharges {
		ef := Efficiency{Clients: n.Clients}
		if i < len(res.Baseline.Insert) && res.Baseline.Insert[i].TPS > 0 {
			ef.NewCharge = n.PerSec * commits / res.Baseline.Insert[i].TPS
		}
		if i < len(res.Replays) && i < len(res.Baseline.Select) && res.Baseline.Select[i].TPS > 0 {
			ef.Replay = res.Replays[i].PerSec / res.Baseline.Select[i].TPS
		}
		out = append(out, ef)
	}
	return out
}

func (e *env) micro(ctx context.Context, res *Results) error {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", "200ms", "./internal/idempotency")
	cmd.Dir = e.cfg.ModuleDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "Benchmark") {
			res.Micro = append(res.Micro, strings.Join(strings.Fields(line), " "))
		}
	}
	return nil
}

// WriteJSON writes the results to dir/<timestamp>.json and, for a complete
// run (latest true), to dir/latest.json.
func (r *Results) WriteJSON(dir string, latest bool) (string, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := filepath.Join(dir, r.Started.Format("20060102T150405Z")+".json")
	paths := []string{name}
	if latest {
		paths = append(paths, filepath.Join(dir, "latest.json"))
	}
	for _, p := range paths {
		if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			return "", err
		}
	}
	return name, nil
}

func selected(filter []string, name string) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if strings.HasPrefix(name, f) {
			return true
		}
	}
	return false
}
