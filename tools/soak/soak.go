// Package soak is `make soak`: phasepay under an hour of steady load,
// sampled every minute, and judged on whether anything climbs.
//
// A run starts a throw-away PostgreSQL cluster of its own (stack.go says
// why not the shared server), the mock PSP as its own process, api workers
// and a reaper (built and supervised by tools/procs, as the chaos harness
// runs them) and a webhook receiver with two endpoints. It paces a steady
// mix through the retrying client (load.go): new charges, replays of
// finished keys, captures and refunds, every one answered through the
// workers in turn, with webhook deliveries following every event; and it
// SIGKILLs one worker every KillEvery with new charges under way on it
// (kill.go; restarted at once; the charges are finished by a retry or the
// reaper). Every SampleEvery it samples each
// process's memory, goroutines and open files from its /metrics, the
// database's connections per process, each operation's p50 and p99 over
// the interval, dead tuples and index size per table, the partitions kept,
// WAL per charge and the webhook backlog (sample.go). At the end it fits a
// least-squares line to each series over the last WindowShare of the run
// and holds its slope against a limit (series.go, verdict.go); the run
// passes when every judged series is flat and every operation ended as
// expected.
package soak

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/tools/procs"
)

// Config configures a run. Zero fields take the defaults noted.
type Config struct {
	// Duration is how long the load runs. Default 60m.
	Duration time.Duration
	// SampleEvery is the sampling interval. Default 1m.
	SampleEvery time.Duration
	// KillEvery is how often the last api worker is SIGKILLed (first at
	// half of it). Default 3m.
	KillEvery time.Duration
	// WindowShare is the share of the run, at its end, over which the
	// series are judged: the rest is warm-up. Default 0.75 (the last 45 of
	// 60 minutes).
	WindowShare float64
	// Rate is new charges per second; the rest of the mix follows it
	// (load.go). Default 10.
	Rate float64
	// Workers is how many api processes serve; the last is the one killed.
	// Default 3, at least 2.
	Workers int
	// Lease is every process's LEASE: how soon the killed worker's keys
	// are taken over. Default 60s (the api's).
	Lease time.Duration
	// PSPErrorRate is the mock PSP's share of authorizations answered 503.
	// Default 0.01; negative for none.
	PSPErrorRate float64
	// Seed draws the mix. Default 1.
	Seed uint64
	// BinDir holds api, reaper and mockpsp (make build, or procs.Build).
	BinDir string
	// PGBinDir holds initdb and postgres for the run's cluster. Default:
	// pgcluster's.
	PGBinDir string
	// Progress, if set, receives a line per sample.
	Progress io.Writer
}

func (c *Config) defaults() error {
	c.Duration = cmp.Or(c.Duration, 60*time.Minute)
	c.SampleEvery = cmp.Or(c.SampleEvery, time.Minute)
	c.KillEvery = cmp.Or(c.KillEvery, 3*time.Minute)
	c.WindowShare = cmp.Or(c.WindowShare, 0.75)
	c.Rate = cmp.Or(c.Rate, 10)
	c.Workers = cmp.Or(c.Workers, 3)
	c.Lease = cmp.Or(c.Lease, 60*time.Second)
	c.PSPErrorRate = max(0, cmp.Or(c.PSPErrorRate, 0.01))
	c.Seed = cmp.Or(c.Seed, 1)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	switch {
	case c.BinDir == "":
		return errors.New("soak: BinDir is required")
	case c.Workers < 2:
		return fmt.Errorf("soak: %d workers: at least 2, one of them killed", c.Workers)
	case c.WindowShare <= 0 || c.WindowShare > 1:
		return fmt.Errorf("soak: WindowShare %v: want (0, 1]", c.WindowShare)
	case c.Duration < minWindowSamples*c.SampleEvery:
		return fmt.Errorf("soak: a %s run sampled every %s has too few samples to judge", c.Duration, c.SampleEvery)
	}
	return nil
}

// Settings are what a run was configured with, for its results.
type Settings struct {
	Duration    string  `json:"duration"`
	SampleEvery string  `json:"sample_every"`
	KillEvery   string  `json:"kill_every"`
	WindowShare float64 `json:"window_share"`
	// WindowFrom is when the judged window starts: the first of the
	// last WindowShare of the samples.
	WindowFrom string            `json:"window_from"`
	Rate       float64           `json:"new_charges_per_second"`
	Mix        map[string]string `json:"mix_per_second"`
	Workers    int               `json:"api_workers"`
	Lease      string            `json:"lease"`
	PSP        string            `json:"mock_psp"`
	// PostgreSQL is the run's cluster's settings that decide what the
	// series show (autovacuum's, checkpoints', WAL's).
	PostgreSQL map[string]string `json:"postgresql"`
	Machine    string            `json:"machine"`
}

// Result is a run: every sample, every series with its verdict, and the
// checks that are not series.
type Result struct {
	Started  time.Time          `json:"started"`
	Took     string             `json:"took"`
	Settings Settings           `json:"settings"`
	Ops      map[string]OpStats `json:"operations"`
	Webhooks WebhookStats       `json:"webhooks"`
	Kills    int                `json:"kills"`
	Restarts map[string]int     `json:"restarts"`
	Problems []string           `json:"problems,omitempty"`
	Samples  []Sample           `json:"samples"`
	Series   []Series           `json:"series"`
	// Verdicts is every judged series' verdict in brief.
	Verdicts map[string]Brief `json:"verdicts"`
	// UnfinishedKeys counts the keys not done once the load stopped and
	// a lease and a minute passed: the killed worker's must all be
	// finished by then.
	UnfinishedKeys int `json:"unfinished_keys"`
	// Takeovers counts the keys taken over from a dead holder
	// (lock_version bumps): the kills' abandoned charges, finished by a
	// retry or the reaper.
	Takeovers int64 `json:"takeovers"`
	// Failures says why the run failed: series not flat, operations
	// without the expected end, unplanned exits, keys left unfinished.
	Failures []string `json:"failures"`
	Pass     bool     `json:"pass"`
}

// Brief is a judged series' verdict in brief.
type Brief struct {
	Slope   float64 `json:"slope_per_hour"`
	Allowed float64 `json:"allowed"`
	Mean    float64 `json:"mean"`
	Verdict string  `json:"verdict"`
}

// Run runs the soak. An error means the run could not be carried out; a
// series that climbs is a failure in the result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &Result{Started: time.Now().UTC(), Settings: settings(&cfg), Restarts: map[string]int{}}
	st := &stack{cfg: &cfg}
	defer st.close()
	if err := st.start(ctx); err != nil {
		return nil, err
	}
	if err := pgSettings(ctx, st, &res.Settings); err != nil {
		return nil, err
	}
	rt := procs.NewRotatingTransport(st.bases, &http.Transport{MaxIdleConnsPerHost: maxInFlight})
	defer rt.CloseIdleConnections()
	hooks, err := startReceiver(cfg.Seed)
	if err != nil {
		return nil, err
	}
	defer hooks.close()
	if err := hooks.register(ctx, rt, st.apiKey); err != nil {
		return nil, err
	}
	d, err := newDriver(st.bases[0], st.apiKey, rt, &cfg)
	if err != nil {
		return nil, err
	}
	smp := &sampler{pool: st.pool, hc: &http.Client{Timeout: 10 * time.Second}, watched: st.watched, load: d, hooks: hooks}

	// The load, the kills and the samples, from one start.
	smp.start = time.Now()
	if err := smp.baseline(ctx); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go smp.watchLevels(loadCtx, cfg.SampleEvery)
	paced := make(chan struct{})
	go func() { defer close(paced); d.run(loadCtx, ctx) }()
	kill := &killer{victim: st.victim(), base: st.bases[len(st.bases)-1], apiKey: st.apiKey, d: d,
		hc: &http.Client{Timeout: 10 * time.Second}}
	killed := make(chan int, 1)
	go func() { killed <- kill.run(loadCtx, ctx, smp.start, cfg.KillEvery) }()
	for k := 1; time.Duration(k)*cfg.SampleEvery <= cfg.Duration; k++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(smp.start.Add(time.Duration(k) * cfg.SampleEvery))):
		}
		s := smp.sample(ctx)
		res.Samples = append(res.Samples, s)
		fmt.Fprintln(cfg.Progress, progressLine(&cfg, k, s))
	}
	stopLoad()
	<-paced
	res.Kills = <-killed
	d.wait()
	if res.UnfinishedKeys, err = awaitFinished(ctx, st, cfg.Lease+time.Minute); err != nil {
		return nil, err
	}
	if err := st.pool.QueryRow(ctx, takeoversSQL).Scan(&res.Takeovers); err != nil {
		return nil, fmt.Errorf("takeovers: %w", err)
	}
	res.Ops, res.Problems = d.snapshot()
	res.Webhooks = hooks.snapshot()
	for _, p := range st.processes() {
		res.Restarts[p.Name()] = p.Restarts()
	}
	var at []float64
	for _, s := range res.Samples {
		at = append(at, s.Hours)
	}
	from := windowStart(at, cfg.WindowShare)
	res.Settings.WindowFrom = hours(from).Truncate(time.Second).String()
	res.Series = buildSeries(res.Samples, from, []string{st.victim().Name()}, smp.start)
	var unplanned []string
	for _, p := range st.processes() {
		unplanned = append(unplanned, p.UnplannedExits()...)
	}
	res.judge(unplanned)
	res.Took = time.Since(res.Started).Truncate(time.Second).String()
	return res, nil
}

// judge fills the verdicts and the failures, and passes the run when there
// are none.
func (r *Result) judge(unplannedExits []string) {
	r.Verdicts = map[string]Brief{}
	for _, s := range r.Series {
		if s.Limit == nil {
			continue
		}
		r.Verdicts[s.Name] = Brief{Slope: s.Slope, Allowed: s.Allowed, Mean: s.Mean, Verdict: s.Verdict}
		if !s.Flat() {
			r.Failures = append(r.Failures, fmt.Sprintf("%s not flat: %s", s.Name, s.describe(s.Unit, s.Limit)))
		}
	}
	for _, op := range slices.Sorted(maps.Keys(r.Ops)) {
		s := r.Ops[op]
		if s.Unexpected+s.NoAnswer+s.Skipped > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: %d unexpected answers, %d without a final answer, %d ticks skipped",
				op, s.Unexpected, s.NoAnswer, s.Skipped))
		}
	}
	if r.Webhooks.BadSignatures > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d webhook deliveries with a bad signature", r.Webhooks.BadSignatures))
	}
	for _, e := range unplannedExits {
		r.Failures = append(r.Failures, "unplanned exit: "+e)
	}
	if r.UnfinishedKeys > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d keys unfinished after the load", r.UnfinishedKeys))
	}
	r.Pass = len(r.Failures) == 0
}

// awaitFinished waits until no key is left unfinished, for at most
// within, and returns how many are.
func awaitFinished(ctx context.Context, st *stack, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for {
		var n int
		if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state <> 'done'`).Scan(&n); err != nil {
			return 0, fmt.Errorf("unfinished keys: %w", err)
		}
		if n == 0 || time.Now().After(deadline) {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func settings(cfg *Config) Settings {
	s := Settings{
		Duration: cfg.Duration.String(), SampleEvery: cfg.SampleEvery.String(), KillEvery: cfg.KillEvery.String(),
		WindowShare: cfg.WindowShare,
		Rate:        cfg.Rate, Mix: map[string]string{}, Workers: cfg.Workers, Lease: cfg.Lease.String(),
		PSP:     fmt.Sprintf("bin/mockpsp, 5 ms latency, %.0f%% of authorizations answered 503", cfg.PSPErrorRate*100),
		Machine: fmt.Sprintf("%d cores, %s", runtime.NumCPU(), runtime.Version()),
	}
	for _, m := range mix {
		s.Mix[m.op] = fmt.Sprintf("%.3g", cfg.Rate*m.share)
	}
	return s
}

// takeoversSQL counts takeovers: each bumps the key's lock_version.
const takeoversSQL = `SELECT coalesce(sum(lock_version - 1), 0) FROM idempotency_keys`

// pgSettingsSQL reads the settings that decide what the database's series
// show.
const pgSettingsSQL = `
SELECT name, current_setting(name) FROM pg_settings
 WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_threshold',
                'autovacuum_vacuum_insert_scale_factor', 'autovacuum_analyze_scale_factor', 'checkpoint_timeout',
                'max_wal_size', 'full_page_writes', 'fsync', 'shared_buffers', 'server_version')`

func pgSettings(ctx context.Context, st *stack, into *Settings) error {
	rows, err := st.pool.Query(ctx, pgSettingsSQL)
	if err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	into.PostgreSQL = map[string]string{}
	var name, value string
	_, err = pgx.ForEachRow(rows, []any{&name, &value}, func() error { into.PostgreSQL[name] = value; return nil })
	return err
}

// progressLine is a sample in one line.
func progressLine(cfg *Config, k int, s Sample) string {
	n := int(cfg.Duration / cfg.SampleEvery)
	v := func(name string) string {
		if x, ok := s.Values[name]; ok {
			return fmt.Sprintf("%.4g", x)
		}
		return "-"
	}
	line := fmt.Sprintf("soak %d/%d (%s): charges %s, rss api-0 %s MiB reaper %s MiB, goroutines api-0 %s, "+
		"conns api-0 %s, p99 ms new %s replay %s capture %s refund %s webhook %s, wal/charge %s B, backlog %s",
		k, n, hours(s.Hours).Truncate(time.Second), v(seriesName(famChargesMade, "")),
		v(seriesName(famRSS, "api-0")), v(seriesName(famRSS, "reaper-0")), v(seriesName(famGoroutines, "api-0")),
		v(seriesName(famConnections, "api-0")), v(seriesName(famLatencyP99, opNew)), v(seriesName(famLatencyP99, opReplay)),
		v(seriesName(famLatencyP99, opCapture)), v(seriesName(famLatencyP99, opRefund)), v(seriesName(famLatencyP99, opWebhook)),
		v(seriesName(famWALPerCharge, "")), v(seriesName(famBacklog, "")))
	if len(s.Missing) > 0 {
		line += "; missing: " + strings.Join(s.Missing, "; ")
	}
	return line
}
