// Package bench is `make bench`: phasepay measured against what PostgreSQL
// itself does on the same machine, in the same run, at the same
// concurrency levels. See Run for the steps, and docs/benchmarks.md for the
// latest tables and the plots they draw (plot.go).
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// Config configures a run.
type Config struct {
	// AdminURL is a connection string to the server's maintenance database;
	// the run creates (and drops) a database of its own.
	AdminURL string
	// BinDir holds api and mockpsp (make build).
	BinDir string
	// BareCmd is the command (program and arguments) that serves the bare
	// baselines as a process of their own, given BARE_ADDR, DATABASE_URL
	// and PSP_URL in its environment (ServeBare): tools/cmd/bench passes its own
	// executable and "bare". Required by the steps that use the baselines.
	BareCmd []string
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
	// median only over several. Default 2. The on/off steps run at least
	// four pairs, each arm in slices taking turns (arms.go).
	Reps int
	// Partitions are the daily-partition counts of the claim measurement.
	// Default 1, 7, 30.
	Partitions []int
	// RowsPerDay are the keys stored in each day of that measurement.
	// Default 20,000.
	RowsPerDay int
	// PassSizes are the backlog sizes the background passes are timed
	// against (passes.go). Default 10³, 10⁴, 10⁵, 10⁶.
	PassSizes []int
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
	// Statistics says whether the server kept the planner's statistics
	// or the run did (analyze.go).
	Statistics Statistics `json:"statistics"`
	// Pooler is new charges and replays through PgBouncer against direct,
	// per level (pooler.go).
	Pooler []PoolerCost `json:"pooler,omitempty"`
	// TimelineCost is new charges with the request timeline on against
	// TIMELINE=off (timeline.go).
	TimelineCost []TimelineCost `json:"timeline_cost"`
	// Batching is new charges with batching on against BATCH=false, per
	// level (batching.go).
	Batching []BatchingGain `json:"batching"`
	// BatchLanes is two lanes per kind ("on") against one ("off"), at the
	// highest level.
	BatchLanes *BatchingGain `json:"batch_lanes,omitempty"`
	// Passes is every background pass timed against backlogs it must not
	// read (passes.go).
	Passes *Passes `json:"background_passes,omitempty"`
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
	res.Statistics = Statistics{Autovacuum: !e.analyzer.emulate, Emulated: e.analyzer.emulate}
	if e.analyzer.emulate {
		e.log("the server runs without autovacuum: the steps that load phasepay analyze tables as autovacuum would (analyze.go)")
	}

	steps := []struct {
		name string
		run  func(context.Context, *Results) error
	}{
		{"baselines (pgbench)", e.baselines},
		{"commits per new charge", e.withStatistics(e.commits)},
		{"round trips per new charge and replay", e.withStatistics(e.roundTrips)},
		{"new charges, replays, 409s (alternating with bare baselines)", e.withStatistics(e.loads)},
		{"captures and refunds", e.withStatistics(e.operations)},
		{"new charges with the primary PSP refusing or down", e.withStatistics(e.primaryDown)},
		{"pooler: new charges and replays through PgBouncer (alternating with direct)", e.withStatistics(e.pooler)},
		// The on/off steps run each arm on a database of their own, analyzed
		// before it is measured (arms.go): the analyzer has nothing to do.
		{"instrumentation overhead (alternating on/off pairs)", e.instrumentation},
		{"timeline cost (alternating on/off pairs)", e.timelineCost},
		{"batching (alternating on/off pairs)", e.batching},
		{"tenant foreign keys (alternating with/without)", e.withStatistics(e.tenantFKs)},
		{"claim by partition count", e.claimByPartitions},
		{"cost growth with stored keys", e.growth},
		{"growth: background passes against backlogs of 10³ to 10⁶ rows", e.passes},
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
