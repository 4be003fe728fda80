// Package chaos is phasepay's chaos harness: it starts a mock PSP injecting
// faults, several API workers and reapers on one fresh database, drives many
// charge intents through the retrying client from concurrent goroutines
// spread over the workers, and meanwhile SIGKILLs and SIGSTOP/SIGCONTs
// random workers (and, in binaries built with the chaos tag, crashes them at
// every phase boundary) and, on a PostgreSQL cluster of its own, stops the
// database immediately and starts it again. At the end it checks, from the
// database and the PSP's own ledger, that every intent was done exactly
// once, and that no api or reaper exited except when the harness killed it.
//
// It is honest (a deliberately broken build makes it report violations:
// see TestHarnessCatchesFreshPSPKeyDefect), repeatable (every random choice
// is drawn from Config.Seed; timing is not) and prints a summary table.
package chaos

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/client"
	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/pgcluster"
)

// Config configures a run. Zero fields take the defaults noted.
type Config struct {
	// Seed draws every random choice: intents, fault rolls, crash points,
	// which worker to kill or pause and when. Default 1.
	Seed uint64
	// Intents is how many charge intents are driven. Default 200.
	Intents int
	// Concurrency is how many intents are in flight at once. Default 16.
	Concurrency int
	// Workers is how many bin/api processes serve. Default 3. Worker 0
	// commits every arrow separately (ONE_COMMIT_PER_PHASE), so that
	// every recovery point is a commit boundary some worker crashes at.
	Workers int
	// Reapers is how many bin/reaper processes run. Default 2.
	Reapers int
	// ChaosInterval is the mean pause between kills or pauses. Default 400ms.
	ChaosInterval time.Duration
	// Lease is LEASE for every process. Default 2s.
	Lease time.Duration
	// ErrorRate, DropRate and LatencyMS are the mock PSP's faults.
	// Defaults 0.05, 0.05, 5.
	ErrorRate, DropRate float64
	LatencyMS           int
	// RejectRate is the mock's rate of final failures (400 without
	// acting), which end a charge as failed. Default 0.03.
	RejectRate float64
	// LookupErrorRate is the mock's rate of failed lookups by reference
	// (503), which leave an unknown outcome for the retry schedule.
	// Default 0.1.
	LookupErrorRate float64
	// KeyTTL is MOCKPSP_KEY_TTL: how long the mock remembers a key. Short,
	// so that a lost answer is often resolved after the PSP forgot the key,
	// where only the lookup before a resend prevents a second
	// authorization. Default 2s.
	KeyTTL time.Duration
	// Outages is how many times the PSP goes down entirely (error_rate 1,
	// lookups too) during the load; each lasts between OutageLength and
	// twice that, and the next starts OutageGap (drawn between half and one
	// and a half times it) after the last one ended. Default 0.
	Outages int
	// OutageLength is the shortest outage. Default twice KeyTTL, so that
	// every outage outlasts the PSP's memory of the keys it interrupts.
	OutageLength time.Duration
	// OutageGap is the mean time between outages. Default 5s.
	OutageGap time.Duration
	// LongOutage, if set, adds one outage this long among the others:
	// longer than GiveUpAfter, it makes the requests it catches
	// needs_attention (503 payment_unresolved, a reason in last_error).
	LongOutage time.Duration
	// RetryBase, RetryMax and GiveUpAfter are every process's retry
	// schedule (RETRY_BASE, RETRY_MAX, GIVE_UP_AFTER). Defaults 100ms, 2s,
	// 30s.
	RetryBase, RetryMax, GiveUpAfter time.Duration
	// CrashProbability is the chance a worker crashes at each crash point
	// it passes (chaos builds only). Default 0.02.
	CrashProbability float64
	// BinDir holds api, reaper and mockpsp built by Build.
	BinDir string
	// AdminURL is a PostgreSQL connection string on which the run creates
	// (and afterwards drops) a fresh database. Unused when DBRestarts > 0.
	AdminURL string
	// DBRestarts is how many times PostgreSQL is stopped immediately (as a
	// crash would) and started again during the load. 0: none, and the run
	// uses a database on AdminURL. Otherwise the run creates a throw-away
	// cluster of its own (internal/pgcluster, binaries in PGBinDir) and
	// removes it at the end: a server other processes use is never
	// restarted.
	DBRestarts int
	// DBDown is the mean time the database stays down per restart (drawn
	// between half and one and a half times it). Default 3s.
	DBDown time.Duration
	// RecoverWithin bounds how long after the database is back every api
	// must answer /readyz 200 and every reaper be connected again, without
	// being restarted. Default 20s.
	RecoverWithin time.Duration
	// PGBinDir holds initdb and postgres for the throw-away cluster.
	// Default: pgcluster's ($PGCLUSTER_BIN, else PostgreSQL 15's on Debian).
	PGBinDir string
	// MaxElapsed bounds each intent's retries. Default 2m.
	MaxElapsed time.Duration
	// Progress, if set, receives a progress line every ProgressEvery.
	Progress      io.Writer
	ProgressEvery time.Duration
	// WebhookFaults are the webhook sink's own faults (webhooksink.go).
	WebhookFaults SinkFaults
	// WebhookDrainWithin bounds how long after the load every event must
	// have been delivered to the sink. Default 2m.
	WebhookDrainWithin time.Duration
	// KeepDatabase leaves the run's database on AdminURL for inspection.
	// A throw-away cluster (DBRestarts > 0) is always removed.
	KeepDatabase bool
	// PSPs, above 1, routes between that many mock PSPs (routing.go), one
	// of them down, refusing or dropping answers for stretches. Default 1.
	PSPs int
}

func (c *Config) defaults() {
	c.Seed = cmp.Or(c.Seed, 1)
	c.Intents = cmp.Or(c.Intents, 200)
	c.Concurrency = cmp.Or(c.Concurrency, 16)
	c.Workers = cmp.Or(c.Workers, 3)
	c.Reapers = cmp.Or(c.Reapers, 2)
	c.ChaosInterval = cmp.Or(c.ChaosInterval, 400*time.Millisecond)
	c.Lease = cmp.Or(c.Lease, 2*time.Second)
	c.ErrorRate = cmp.Or(c.ErrorRate, 0.05)
	c.DropRate = cmp.Or(c.DropRate, 0.05)
	c.LatencyMS = cmp.Or(c.LatencyMS, 5)
	c.RejectRate = cmp.Or(c.RejectRate, 0.03)
	c.LookupErrorRate = cmp.Or(c.LookupErrorRate, 0.1)
	c.KeyTTL = cmp.Or(c.KeyTTL, 2*time.Second)
	c.OutageLength = cmp.Or(c.OutageLength, 2*c.KeyTTL)
	c.OutageGap = cmp.Or(c.OutageGap, 5*time.Second)
	c.RetryBase = cmp.Or(c.RetryBase, 100*time.Millisecond)
	c.RetryMax = cmp.Or(c.RetryMax, 2*time.Second)
	c.GiveUpAfter = cmp.Or(c.GiveUpAfter, 30*time.Second)
	c.CrashProbability = cmp.Or(c.CrashProbability, 0.02)
	c.MaxElapsed = cmp.Or(c.MaxElapsed, 2*time.Minute)
	c.ProgressEvery = cmp.Or(c.ProgressEvery, 5*time.Second)
	c.DBDown = cmp.Or(c.DBDown, 3*time.Second)
	c.RecoverWithin = cmp.Or(c.RecoverWithin, 20*time.Second)
	c.WebhookFaults.defaults()
	c.WebhookDrainWithin = cmp.Or(c.WebhookDrainWithin, 2*time.Minute)
}

// Summary is what a run did and found.
type Summary struct {
	Seed           uint64         `json:"seed"`
	Intents        int            `json:"intents"`
	Authorized     int            `json:"authorized"`
	Declined       int            `json:"declined"`
	Failed         int            `json:"failed"`
	NeedsAttention int            `json:"needs_attention"`
	Unfinished     int            `json:"unfinished"`
	Attempts       int64          `json:"client_attempts"`
	Kills          int            `json:"kills"`
	Pauses         int            `json:"pauses"`
	Restarts       int            `json:"restarts"`
	DBRestarts     int            `json:"db_restarts"`
	DBDown         string         `json:"db_down_total"`
	DBMaxRecovery  string         `json:"db_max_recovery"`
	UnplannedExits int            `json:"unplanned_exits"`
	FailedAttempts map[string]int `json:"client_failed_attempts"`
	CrashPoints    map[string]int `json:"crash_points"`
	Takeovers      int64          `json:"takeovers"`
	PSPErrors      int            `json:"psp_errors_injected"`
	PSPDrops       int            `json:"psp_drops_injected"`
	PSPRejects     int            `json:"psp_rejects_injected"`
	PSPLookupFails int            `json:"psp_lookup_errors_injected"`
	Outages        int            `json:"psp_outages"`
	OutageTotal    string         `json:"psp_outage_total"`
	Authorizations int            `json:"psp_authorizations"`
	// From the mock's request log: every request it received.
	PSPRequests   int      `json:"psp_requests"`
	Sends         int      `json:"psp_sends"`          // POST /v1/authorizations
	Resends       int      `json:"psp_resends"`        // sends of a key after its first
	Lookups       int      `json:"psp_lookups"`        // GET /v1/authorizations?reference=
	LookupsFailed int      `json:"psp_lookups_failed"` // answered other than 200
	AttemptsMax   int      `json:"psp_attempts_per_key_max"`
	AttemptsP99   int      `json:"psp_attempts_per_key_p99"`
	Replays       int      `json:"replays_checked"`
	Duration      string   `json:"duration"`
	Violations    []string `json:"violations"`

	// ReaperProbe is how long the reapers took to finish a request
	// abandoned after the last database restart (see probeReapers),
	// "FAILED", or empty when the run had no database restarts.
	ReaperProbe string `json:"reaper_probe,omitempty"`

	// Lives: the captures, voids and refunds of the authorized intents,
	// and the PSP's books (lives.go, books.go). Webhooks: what the
	// webhook sink received (webhooksink.go, webhookcheck.go).
	Lives    LifeStats    `json:"lives"`
	Webhooks WebhookStats `json:"webhooks"`
	// Routing: failovers, breakers and stretches with several PSPs
	// (routing.go); nil with one.
	Routing *RoutingStats `json:"routing,omitempty"`
}

// intent is one user intent and the first final answer it got.
type intent struct {
	in     client.Intent
	status int    // final status (201, 402, or 503 payment_unresolved), 0 if none
	code   string // the problem code of a 402 or 503
	body   []byte // the final answer's body
	err    error  // why there is no final answer
	life   *life  // what follows an authorization (lives.go)
}

// Run runs the harness and returns its summary. Violations are in the
// summary; an error means the run itself could not be carried out.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	cfg.defaults()
	start := time.Now()
	rnd := rand.New(rand.NewPCG(cfg.Seed, 0x70706179))
	sum := &Summary{Seed: cfg.Seed, Intents: cfg.Intents, CrashPoints: map[string]int{}}

	var (
		dbURL   string
		cluster *pgcluster.Cluster
	)
	if cfg.DBRestarts > 0 {
		// Closed last (deferred first): every process is stopped before
		// its database goes, also when Run fails or ctx is cancelled.
		var err error
		if cluster, err = pgcluster.New(ctx, pgcluster.Config{BinDir: cfg.PGBinDir}); err != nil {
			return nil, err
		}
		defer cluster.Close() //nolint:errcheck // the directory goes either way
		if dbURL, err = cluster.CreateDatabase(ctx, "phasepay_chaos"); err != nil {
			return nil, err
		}
	} else {
		var (
			dropDB func()
			err    error
		)
		if dbURL, dropDB, err = createDatabase(ctx, cfg); err != nil {
			return nil, err
		}
		if !cfg.KeepDatabase {
			defer dropDB()
		}
	}
	bin := func(name string) string { return filepath.Join(cfg.BinDir, name) }
	if _, err := runOnce(ctx, bin("api"), map[string]string{"DATABASE_URL": dbURL}, "migrate"); err != nil {
		return nil, err
	}
	apiKey, err := runOnce(ctx, bin("api"), map[string]string{"DATABASE_URL": dbURL}, "keys", "create", "--tenant", "chaos")
	if err != nil {
		return nil, err
	}

	// The mock PSP, with faults.
	pspAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	mock := newProcess("mockpsp", bin("mockpsp"), map[string]string{
		"MOCKPSP_ADDR":       pspAddr,
		"MOCKPSP_ERROR_RATE": fmt.Sprint(cfg.ErrorRate),
		"MOCKPSP_DROP_RATE":  fmt.Sprint(cfg.DropRate),
		"MOCKPSP_LATENCY":    fmt.Sprint(cfg.LatencyMS),
		// Final failures, lookups that fail, and a PSP that forgets keys
		// soon: a lost answer resolved after the TTL is safe only through
		// the lookup before the resend.
		"MOCKPSP_REJECT_RATE":       fmt.Sprint(cfg.RejectRate),
		"MOCKPSP_LOOKUP_ERROR_RATE": fmt.Sprint(cfg.LookupErrorRate),
		"MOCKPSP_KEY_TTL":           cfg.KeyTTL.String(),
	})
	if err := mock.start(); err != nil {
		return nil, err
	}
	defer mock.stop(5 * time.Second)
	pspURL := "http://" + pspAddr
	if err := waitUp(ctx, pspURL+"/_admin/authorizations"); err != nil {
		return nil, fmt.Errorf("mock psp: %w\n%s", err, mock.logText())
	}
	// Several PSPs (routing.go): the mock above is the primary, and the
	// checks read all of them through one admin view.
	psps, err := startPSPs(ctx, &cfg, bin("mockpsp"), pspURL)
	if err != nil {
		return nil, err
	}
	defer psps.stop()
	pspURL = psps.viewOr(pspURL)

	// The workers, each restarted whenever it dies, and the reapers. Each
	// process's connections carry its name (application_name), so the
	// harness can see in pg_stat_activity who reconnected after a restart.
	common := map[string]string{"PSP_URL": pspURL, "LEASE": cfg.Lease.String(), "WEBHOOK_ALLOW_PRIVATE": "1",
		"RETRY_BASE": cfg.RetryBase.String(), "RETRY_MAX": cfg.RetryMax.String(), "GIVE_UP_AFTER": cfg.GiveUpAfter.String()}
	psps.wire(common)
	crash := fmt.Sprintf("after_claim=%[1]v,after_charge_created=%[1]v,after_psp_call=%[1]v,after_psp_authorized=%[1]v,"+
		"after_capture_started=%[1]v,after_psp_captured=%[1]v,after_void_started=%[1]v,after_psp_voided=%[1]v,"+
		"after_refund_created=%[1]v,after_psp_refunded=%[1]v", cfg.CrashProbability)
	workers := make([]*process, cfg.Workers)
	bases := make([]string, cfg.Workers)
	for i := range workers {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		env := map[string]string{
			"API_ADDR":             addr,
			"PHASEPAY_CHAOS_CRASH": crash,
			"PHASEPAY_CHAOS_SEED":  fmt.Sprint(cfg.Seed*100 + uint64(i)),
			"ONE_COMMIT_PER_PHASE": fmt.Sprint(i == 0),
			"DATABASE_URL":         withApplicationName(dbURL, fmt.Sprintf("api-%d", i)),
		}
		for k, v := range common {
			env[k] = v
		}
		workers[i] = newProcess(fmt.Sprintf("api-%d", i), bin("api"), env, "serve")
		if err := workers[i].start(); err != nil {
			return nil, err
		}
		bases[i] = "http://" + addr
		go workers[i].supervise(150 * time.Millisecond)
	}
	defer func() {
		for _, w := range workers {
			w.stop(10 * time.Second)
		}
	}()
	for _, b := range bases {
		if err := waitUp(ctx, b+"/healthz"); err != nil {
			return nil, fmt.Errorf("worker %s: %w", b, err)
		}
	}
	reapers := make([]*process, cfg.Reapers)
	reaperNames := make([]string, cfg.Reapers)
	for i := range reapers {
		reaperNames[i] = fmt.Sprintf("reaper-%d", i)
		env := map[string]string{"REAPER_INTERVAL": "200ms", "DATABASE_URL": withApplicationName(dbURL, reaperNames[i])}
		for k, v := range common {
			env[k] = v
		}
		reapers[i] = newProcess(reaperNames[i], bin("reaper"), env)
		if err := reapers[i].start(); err != nil {
			return nil, err
		}
		go reapers[i].supervise(200 * time.Millisecond)
	}
	defer func() {
		for _, r := range reapers {
			r.stop(10 * time.Second)
		}
	}()

	pool, err := pgxpool.New(ctx, withApplicationName(dbURL, "chaos-harness"))
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	// lock_version must only grow: sample it while the chaos runs.
	var (
		monoMu     sync.Mutex
		monoFaults []string
	)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		seen := map[string]int64{}
		for sampleCtx.Err() == nil {
			for k, v := range sampleLockVersions(sampleCtx, pool) {
				if prev, ok := seen[k]; ok && v < prev {
					monoMu.Lock()
					monoFaults = append(monoFaults, fmt.Sprintf("key %s: lock_version went from %d to %d", k, prev, v))
					monoMu.Unlock()
				}
				seen[k] = max(seen[k], v)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	// The intents, each with its key made once, before its first attempt.
	intents := make([]*intent, cfg.Intents)
	for i := range intents {
		pm := "pm_card_visa"
		if rnd.IntN(10) == 0 {
			pm = "pm_card_chargeDeclined"
		}
		intents[i] = &intent{in: client.Intent{
			Key:    fmt.Sprintf("chaos-%d-%05d", cfg.Seed, i),
			Params: client.ChargeParams{Amount: 100 + rnd.Int64N(100000), Currency: "usd", PaymentMethod: pm},
		}}
	}
	planLives(cfg.Seed, intents)
	var (
		attempts  atomic.Int64
		answersMu sync.Mutex
		answers   = map[string]int{} // failed attempts by status and problem code
	)
	transport := &rotatingTransport{bases: bases, next: &atomic.Uint64{}, rt: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer transport.rt.CloseIdleConnections()
	cl, err := client.New(client.Config{
		BaseURL:        bases[0],
		APIKey:         apiKey,
		HTTPClient:     &http.Client{Transport: transport, Timeout: 5 * time.Second},
		Journal:        client.NewMemoryJournal(),
		MaxElapsed:     cfg.MaxElapsed,
		InitialBackoff: 50 * time.Millisecond,
		MaxBackoff:     time.Second,
		Rand:           rand.NewPCG(cfg.Seed, 1),
		OnAttempt: func(_ client.Intent, _ int, status int, err error) {
			attempts.Add(1)
			if status >= 500 || status == 0 {
				answersMu.Lock()
				answers[answerClass(status, err)]++
				answersMu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, err
	}

	// The webhook sink, subscribed to every event before the first one,
	// and the backlog sampled while the run goes on.
	sink, err := startSink(&cfg)
	if err != nil {
		return nil, err
	}
	defer sink.close()
	if sum.Webhooks.Endpoint, err = sink.register(ctx, transport, apiKey); err != nil {
		return nil, err
	}
	backlog := &backlogSampler{}
	go backlog.run(sampleCtx, pool)
	ops := newOpDriver(transport, apiKey, &cfg)

	var finished atomic.Int64
	clientsDone := make(chan struct{})
	go func() {
		defer close(clientsDone)
		work := make(chan *intent)
		var wg sync.WaitGroup
		for range cfg.Concurrency {
			wg.Go(func() {
				for it := range work {
					drive(ctx, cl, it)
					ops.goLive(ctx, it, func() { finished.Add(1) })
				}
			})
		}
		for _, it := range intents {
			work <- it
		}
		close(work)
		wg.Wait()
		ops.wait()
	}()

	// The database's restarts, on a schedule of their own.
	db := &dbChaos{cluster: cluster, cfg: &cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x64627273)),
		dbURL: dbURL, bases: bases, reapers: reaperNames}
	dbDone := make(chan error, 1)
	if cluster != nil {
		go func() { dbDone <- db.run(ctx, &finished, clientsDone, cfg.Progress) }()
	} else {
		dbDone <- nil
	}

	// The PSP's outages, on a schedule of their own.
	outages := &pspOutages{cfg: &cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x6f757467)), pspURL: pspURL}
	outagesDone := make(chan error, 1)
	go func() { outagesDone <- outages.run(ctx, clientsDone, cfg.Progress) }()
	psps.startStretches(ctx, clientsDone, cfg.Progress, transport, apiKey)

	// The chaos controller.
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		var pauses sync.WaitGroup
		defer pauses.Wait()
		progress := time.NewTicker(cfg.ProgressEvery)
		defer progress.Stop()
		for {
			wait := time.Duration(float64(cfg.ChaosInterval) * (0.5 + rnd.Float64()))
			select {
			case <-clientsDone:
				return
			case <-progress.C:
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "progress: %d/%d intents final, %d kills, %d pauses, %d database restarts, %s\n",
						finished.Load(), cfg.Intents, sum.Kills, sum.Pauses, db.restarts.Load(), time.Since(start).Truncate(time.Second))
				}
				continue
			case <-time.After(wait):
			}
			if db.recovering.Load() {
				continue // see dbChaos.recovering
			}
			w := workers[rnd.IntN(len(workers))]
			if rnd.IntN(10) < 6 {
				w.signal(syscall.SIGKILL)
				sum.Kills++
				continue
			}
			w.mu.Lock()
			paused := w.paused
			w.mu.Unlock()
			if paused {
				continue
			}
			w.signal(syscall.SIGSTOP)
			sum.Pauses++
			// Frozen past its lease, so another worker or a reaper takes
			// its keys over and the thawed worker meets the fence.
			thaw := cfg.Lease + 500*time.Millisecond
			pauses.Go(func() {
				time.Sleep(thaw)
				w.signal(syscall.SIGCONT)
			})
		}
	}()

	<-clientsDone
	<-chaosDone
	if err := <-dbDone; err != nil {
		return nil, err
	}
	if err := <-outagesDone; err != nil {
		return nil, err
	}
	sum.Outages, sum.OutageTotal = outages.count, outages.total.Truncate(time.Millisecond).String()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	// Connections idle in the pool died with each restart.
	pool.Reset()
	// Let the reapers finish what the last kills abandoned.
	settle := time.Now().Add(3*cfg.Lease + 10*time.Second)
	for time.Now().Before(settle) {
		var started int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state = 'started'`).Scan(&started); err == nil && started == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopSampling()
	<-sampled
	if cluster != nil {
		took, v, err := probeReapers(ctx, &cfg, bin("api"), common, dbURL, apiKey, pool, transport)
		if err != nil {
			return nil, err
		}
		sum.ReaperProbe = took.Truncate(time.Millisecond).String()
		if len(v) > 0 {
			sum.ReaperProbe = "FAILED"
		}
		sum.Violations = append(sum.Violations, v...)
	}

	// Every event delivered to the sink, after the probe's too.
	drained, v := drainWebhooks(ctx, pool, backlog, cfg.WebhookDrainWithin)
	sum.Webhooks.Drained = drained.Truncate(time.Millisecond).String()
	if v != "" {
		sum.Violations = append(sum.Violations, v)
	}
	backlog.mu.Lock()
	sum.Webhooks.MaxBacklog = backlog.max
	sum.Webhooks.MaxDueDelay = time.Duration(backlog.maxDelay * float64(time.Second)).Truncate(time.Millisecond).String()
	backlog.mu.Unlock()

	sum.Attempts = attempts.Load()
	answersMu.Lock()
	sum.FailedAttempts = answers
	answersMu.Unlock()
	for _, w := range workers {
		w.mu.Lock()
		sum.Restarts += w.restarts
		w.mu.Unlock()
		countCrashPoints(w.logText(), sum.CrashPoints)
	}
	sum.Violations = append(sum.Violations, monoFaults...)
	sum.DBRestarts = int(db.restarts.Load())
	db.mu.Lock()
	sum.DBDown, sum.DBMaxRecovery = db.down.Truncate(time.Millisecond).String(), db.maxRecovery.Truncate(time.Millisecond).String()
	sum.Violations = append(sum.Violations, db.violations...)
	db.mu.Unlock()

	if err := verify(ctx, pool, pspURL, transport, apiKey, intents, sum, func() (string, error) {
		return runOnce(ctx, bin("api"), map[string]string{"DATABASE_URL": dbURL}, "requests", "list", "--state", "needs_attention", "--json")
	}); err != nil {
		return nil, err
	}
	violate := func(format string, args ...any) {
		sum.Violations = append(sum.Violations, fmt.Sprintf(format, args...))
	}
	if err := verifyWebhooks(ctx, pool, sink, &sum.Webhooks, violate); err != nil {
		return nil, err
	}
	sum.Lives.Attempts = ops.attempts.Load()
	if err := verifyLives(ctx, pool, pspURL, transport, apiKey, intents, &sum.Lives, violate); err != nil {
		return nil, err
	}
	if err := psps.verify(ctx, pool, append(slices.Clone(workers), reapers...), sum, violate); err != nil {
		return nil, err
	}
	// After the replays, so a process that dies by itself at any point
	// before the harness stops it is counted; the stop itself is planned.
	for _, p := range append(slices.Clone(workers), reapers...) {
		for _, e := range p.unplannedExits() {
			sum.UnplannedExits++
			sum.Violations = append(sum.Violations, "unplanned exit: "+e)
		}
	}
	sum.Duration = time.Since(start).Truncate(time.Millisecond).String()
	return sum, nil
}

// drive runs one intent to its first final answer.
func drive(ctx context.Context, cl *client.Client, it *intent) {
	ch, err := cl.Execute(ctx, it.in)
	var apiErr *client.Error
	switch {
	case err == nil:
		it.status, it.body = http.StatusCreated, ch.RawBody
	case (errors.Is(err, client.ErrDeclined) || errors.Is(err, client.ErrPaymentFailed)) && errors.As(err, &apiErr):
		it.status, it.code, it.body = apiErr.Status, apiErr.Problem.Code, apiErr.RawBody
	case errors.Is(err, client.ErrUnresolved) && errors.As(err, &apiErr):
		// Given up by the server: an end, if verify finds the key
		// needs_attention with a reason. Not a stored answer: no replay
		// of its body is expected.
		it.status, it.code, it.body = apiErr.Status, apiErr.Problem.Code, apiErr.RawBody
	default:
		it.err = err
	}
}

// rotatingTransport sends each attempt to the next worker, so that a retry
// after a dead or frozen worker lands elsewhere and takes the key over.
type rotatingTransport struct {
	bases []string
	next  *atomic.Uint64
	rt    *http.Transport
}

func (t *rotatingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.bases[t.next.Add(1)%uint64(len(t.bases))]
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.URL.Host = u.Host
	r.Host = u.Host
	return t.rt.RoundTrip(r)
}

func countCrashPoints(logs string, into map[string]int) {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"msg":"chaos crash"`) {
			continue
		}
		var rec struct{ Point string }
		if json.Unmarshal([]byte(line), &rec) == nil {
			into[rec.Point]++
		}
	}
}

func sampleLockVersions(ctx context.Context, pool *pgxpool.Pool) map[string]int64 {
	rows, err := pool.Query(ctx, `SELECT key, lock_version FROM idempotency_keys`)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for rows.Next() {
		var (
			k string
			v int64
		)
		if rows.Scan(&k, &v) == nil {
			out[k] = v
		}
	}
	rows.Close()
	return out
}

func waitUp(ctx context.Context, u string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func createDatabase(ctx context.Context, cfg Config) (string, func(), error) {
	admin, err := pgx.Connect(ctx, cfg.AdminURL)
	if err != nil {
		return "", nil, fmt.Errorf("admin database: %w", err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("phasepay_chaos_%d_%d", cfg.Seed, time.Now().UnixNano()%1_000_000_000)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(cfg.AdminURL)
	if err != nil {
		return "", nil, fmt.Errorf("admin URL: %w", err)
	}
	u.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, cfg.AdminURL); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	}
	return u.String(), drop, nil
}

// Table renders the summary as a table.
func (s *Summary) Table() string {
	var b bytes.Buffer
	row := func(k string, v any) { fmt.Fprintf(&b, "| %-32s | %12v |\n", k, v) }
	fmt.Fprintf(&b, "| %-32s | %12s |\n|%s|%s|\n", "chaos run", "value", strings.Repeat("-", 34), strings.Repeat("-", 14))
	row("seed", s.Seed)
	row("intents", s.Intents)
	row("  final: authorized", s.Authorized)
	row("  final: declined", s.Declined)
	row("  final: failed (PSP refused)", s.Failed)
	row("  needs_attention (with reason)", s.NeedsAttention)
	row("  without an end", s.Unfinished)
	row("client attempts", s.Attempts)
	for _, c := range slices.Sorted(maps.Keys(s.FailedAttempts)) {
		row("  "+c, s.FailedAttempts[c])
	}
	row("workers killed (SIGKILL)", s.Kills)
	row("workers paused (SIGSTOP)", s.Pauses)
	row("worker restarts", s.Restarts)
	row("database restarts (immediate)", s.DBRestarts)
	row("  database down in total", s.DBDown)
	row("  slowest recovery of all procs", s.DBMaxRecovery)
	row("unplanned exits (api, reaper)", s.UnplannedExits)
	row("reaper probe: key finished in", cmp.Or(s.ReaperProbe, "not run"))
	for _, p := range []string{string(charges.CrashAfterClaim), string(charges.CrashAfterChargeCreated), string(charges.CrashAfterPSPCall), string(charges.CrashAfterPSPAuthorized),
		"after_capture_started", "after_psp_captured", "after_void_started", "after_psp_voided", "after_refund_created", "after_psp_refunded"} {
		row("crash point "+p, s.CrashPoints[p])
	}
	row("takeovers (lock_version bumps)", s.Takeovers)
	row("PSP outages (error_rate 1)", s.Outages)
	row("  PSP down in total", cmp.Or(s.OutageTotal, "0s"))
	row("PSP 503s injected", s.PSPErrors)
	row("PSP responses dropped", s.PSPDrops)
	row("PSP final failures (400)", s.PSPRejects)
	row("PSP lookups failed (injected)", s.PSPLookupFails)
	row("PSP requests received", s.PSPRequests)
	row("  authorization sends", s.Sends)
	row("  resends (same key again)", s.Resends)
	row("  lookups by reference", s.Lookups)
	row("  lookups answered non-200", s.LookupsFailed)
	row("  sends per PSP key: max", s.AttemptsMax)
	row("  sends per PSP key: p99", s.AttemptsP99)
	row("PSP authorizations", s.Authorizations)
	row("replays checked byte for byte", s.Replays)
	s.livesAndWebhooksRows(row)
	s.routingRows(row)
	row("duration", s.Duration)
	row("violations", len(s.Violations))
	for _, v := range s.Violations {
		fmt.Fprintf(&b, "VIOLATION: %s\n", v)
	}
	return b.String()
}

// Line is the summary in one line: the verdict and the numbers that make it.
func (s *Summary) Line() string {
	verdict := "PASS"
	if len(s.Violations) > 0 {
		verdict = "FAIL"
	}
	return fmt.Sprintf("chaos %s: seed %d, %d/%d intents ended (%d authorized, %d declined, %d failed, %d needs_attention), "+
		"%d PSP authorizations, %d lookups, %d resends, sends per key max %d p99 %d, %d PSP outages, "+
		"%d kills, %d pauses, %d database restarts, %d unplanned exits, %d replays checked, "+
		"%d lives (%d captured, %d voided, %d refunds), %d webhook events (%d deliveries, latency p50 %s p99 %s, max backlog %d), %d violations, %s",
		verdict, s.Seed, s.Authorized+s.Declined+s.Failed+s.NeedsAttention, s.Intents, s.Authorized, s.Declined, s.Failed, s.NeedsAttention,
		s.Authorizations, s.Lookups, s.Resends, s.AttemptsMax, s.AttemptsP99, s.Outages,
		s.Kills, s.Pauses, s.DBRestarts, s.UnplannedExits, s.Replays,
		s.Lives.Lives, s.Lives.Captures, s.Lives.Voids, s.Lives.Refunds, s.Webhooks.Events, s.Webhooks.Deliveries,
		s.Webhooks.LatencyP50, s.Webhooks.LatencyP99, s.Webhooks.MaxBacklog, len(s.Violations), s.Duration)
}

// answerClass names a failed attempt's answer for the summary: the status
// and problem code ("503 database_unavailable"), or "no answer" (a killed,
// frozen or unreachable worker).
func answerClass(status int, err error) string {
	if status == 0 {
		return "no answer"
	}
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Problem.Code != "" {
		return fmt.Sprintf("%d %s", status, apiErr.Problem.Code)
	}
	return fmt.Sprint(status)
}
