package chaos

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/tools/procs"
)

// stack is what a run drives and breaks: a fresh database (on a cluster of
// the run's own when the database restarts), the mock PSPs, the api
// workers and the reapers, and the harness's own pool on the database.
type stack struct {
	cfg *Config

	dbURL   string
	cluster *pgcluster.Cluster // nil without database restarts
	pooler  *pgbouncer.Bouncer // nil unless Config.Pooler
	apiKey  string

	mock   *procs.Process // the primary mock PSP
	psps   *pspSet        // the PSPs after the primary (routing.go); nil with one
	pspURL string         // where the run's checks read the PSP: the primary, or the view over all
	// pspByName is every PSP's own URL by the name phasepay knows it by
	// ("default" with one), for the history's check of the books.
	pspByName map[string]string

	// common is every api's and reaper's environment but its own address
	// and database name.
	common      map[string]string
	workers     []*procs.Process
	bases       []string // the workers' base URLs, by worker index
	reapers     []*procs.Process
	reaperNames []string

	pool *pgxpool.Pool // the harness's own, for sampling and the checks

	closers []func()
}

// onClose adds a cleanup for close, as a defer in Run would.
func (s *stack) onClose(f func()) { s.closers = append(s.closers, f) }

// close undoes what start did, in reverse as defers would: every process
// is stopped before its database goes, also when start or Run fails or ctx
// is cancelled. Each cleanup is deferred here, so one that panics does not
// keep the next from running.
func (s *stack) close() {
	for _, f := range s.closers {
		defer f()
	}
}

func (s *stack) bin(name string) string { return filepath.Join(s.cfg.BinDir, name) }

// start brings the stack up, step by step; whatever is up when a step
// fails is left for close.
func (s *stack) start(ctx context.Context) error {
	if err := s.openDatabase(ctx); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if err := s.startPSPs(ctx); err != nil {
		return err
	}
	if err := s.startWorkers(ctx); err != nil {
		return err
	}
	if err := s.startReapers(); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, procs.WithApplicationName(s.dbURL, "chaos-harness"))
	if err != nil {
		return err
	}
	s.pool = pool
	s.onClose(pool.Close)
	return nil
}

// openDatabase creates the run's database: on a throw-away cluster when
// the database restarts, else on AdminURL.
func (s *stack) openDatabase(ctx context.Context) error {
	cfg := s.cfg
	if cfg.Formation != nil {
		// The formation's database, fresh, on whichever node is the
		// primary: the formation goes with whoever made it.
		s.dbURL = cfg.Formation.URL()
		return nil
	}
	if cfg.DBRestarts > 0 {
		// Closed last (the first cleanup): every process is stopped before
		// its database goes, also when Run fails or ctx is cancelled.
		var err error
		if s.cluster, err = pgcluster.New(ctx, pgcluster.Config{BinDir: cfg.PGBinDir}); err != nil {
			return err
		}
		s.onClose(func() { _ = s.cluster.Close() }) // the directory goes either way
		if s.dbURL, err = s.cluster.CreateDatabase(ctx, "phasepay_chaos"); err != nil {
			return err
		}
		return s.startPooler(ctx)
	}
	dbURL, dropDB, err := createDatabase(ctx, *cfg)
	if err != nil {
		return err
	}
	s.dbURL = dbURL
	if !cfg.KeepDatabase {
		s.onClose(dropDB)
	}
	return s.startPooler(ctx)
}

// poolerSize is the pooler's server connections: far fewer than the
// processes' pools (32 each), as in a deployment behind a pooler, and
// few enough for the shared test server's 100 connections.
const poolerSize = 10

// startPooler puts the pooler in front of the run's database, if asked
// to; closed before the database goes (cleanups run in reverse).
func (s *stack) startPooler(ctx context.Context) error {
	if !s.cfg.Pooler {
		return nil
	}
	var err error
	if s.pooler, err = pgbouncer.Start(ctx, pgbouncer.Config{Server: s.dbURL, PoolSize: poolerSize}); err != nil {
		return err
	}
	s.onClose(func() { _ = s.pooler.Close() })
	return nil
}

// dbEnv is the database environment of process name (the i-th of its
// kind): its own application_name; behind the pooler, the pooler's URL,
// and a direct URL for LISTEN for every other process.
func (s *stack) dbEnv(name string, i int) map[string]string {
	if s.pooler == nil {
		return map[string]string{"DATABASE_URL": procs.WithApplicationName(s.dbURL, name)}
	}
	env := map[string]string{
		"DATABASE_URL":    procs.WithApplicationName(s.pooler.URL(s.dbURL), name),
		"DATABASE_POOLER": "transaction",
	}
	if i%2 == 0 {
		env["DATABASE_DIRECT_URL"] = procs.WithApplicationName(s.dbURL, name)
	}
	return env
}

// migrate migrates the run's database and creates the API key the run's
// clients use (through the pooler, if there is one: migrate itself goes to
// the database directly, and makes the settings its defaults).
func (s *stack) migrate(ctx context.Context) error {
	env := s.dbEnv("migrate", 0)
	if _, err := procs.RunOnce(ctx, s.bin("api"), env, "migrate"); err != nil {
		return err
	}
	apiKey, err := procs.RunOnce(ctx, s.bin("api"), s.dbEnv("keys", 1), "keys", "create", "--tenant", "chaos")
	if err != nil {
		return err
	}
	s.apiKey = apiKey
	return nil
}

// startPSPs starts the mock PSP, with faults, and any further PSPs.
func (s *stack) startPSPs(ctx context.Context) error {
	cfg := s.cfg
	if cfg.Stripe != nil {
		return s.startStripe(ctx) // stripe.go
	}
	pspAddr, err := procs.FreeAddr()
	if err != nil {
		return err
	}
	s.mock = procs.New("mockpsp", s.bin("mockpsp"), map[string]string{
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
	if err := s.mock.Start(); err != nil {
		return err
	}
	s.onClose(func() { s.mock.Stop(5 * time.Second) })
	pspURL := "http://" + pspAddr
	if err := procs.WaitUp(ctx, pspURL+"/_admin/authorizations"); err != nil {
		return fmt.Errorf("mock psp: %w\n%s", err, s.mock.LogText())
	}
	// Several PSPs (routing.go): the mock above is the primary, and the
	// checks read all of them through one admin view.
	if s.psps, err = startPSPs(ctx, cfg, s.bin("mockpsp"), pspURL); err != nil {
		return err
	}
	s.onClose(s.psps.stop)
	s.pspURL = s.psps.viewOr(pspURL)
	s.pspByName = map[string]string{"default": pspURL}
	if s.psps != nil {
		s.pspByName = map[string]string{}
		for i, name := range s.psps.names {
			s.pspByName[name] = s.psps.urls[i]
		}
	}
	return nil
}

// startWorkers starts the api workers, each restarted whenever it dies,
// and waits until each answers. Each process's connections carry its name
// (application_name), so the harness can see in pg_stat_activity who
// reconnected after a restart.
func (s *stack) startWorkers(ctx context.Context) error {
	cfg := s.cfg
	s.common = map[string]string{"PSP_URL": s.pspURL, "LEASE": cfg.Lease.String(), "WEBHOOK_ALLOW_PRIVATE": "1",
		"RETRY_BASE": cfg.RetryBase.String(), "RETRY_MAX": cfg.RetryMax.String(), "GIVE_UP_AFTER": cfg.GiveUpAfter.String()}
	s.psps.wire(s.common)
	cfg.Stripe.wire(s.common)
	if cfg.Defect != "" {
		s.common["PHASEPAY_CHAOS_DEFECT"] = cfg.Defect
	}
	var points []string
	for _, p := range charges.CrashPoints() {
		points = append(points, fmt.Sprintf("%s=%v", p, cfg.CrashProbability))
	}
	crash := strings.Join(points, ",")
	s.workers = make([]*procs.Process, cfg.Workers)
	s.bases = make([]string, cfg.Workers)
	for i := range s.workers {
		addr, err := procs.FreeAddr()
		if err != nil {
			return err
		}
		env := map[string]string{
			"API_ADDR":             addr,
			"PHASEPAY_CHAOS_CRASH": crash,
			"PHASEPAY_CHAOS_SEED":  fmt.Sprint(cfg.Seed*100 + uint64(i)),
			"ONE_COMMIT_PER_PHASE": fmt.Sprint(i == 0),
		}
		maps.Copy(env, s.dbEnv(fmt.Sprintf("api-%d", i), i))
		maps.Copy(env, s.common)
		s.workers[i] = procs.New(fmt.Sprintf("api-%d", i), s.bin("api"), env, "serve")
		if err := s.workers[i].Start(); err != nil {
			return err
		}
		s.bases[i] = "http://" + addr
		go s.workers[i].Supervise(150 * time.Millisecond)
	}
	s.onClose(func() {
		for _, w := range s.workers {
			w.Stop(10 * time.Second)
		}
	})
	for _, b := range s.bases {
		if err := procs.WaitUp(ctx, b+"/healthz"); err != nil {
			return fmt.Errorf("worker %s: %w", b, err)
		}
	}
	return nil
}

// reaperInterval is every reaper's REAPER_INTERVAL.
const reaperInterval = 200 * time.Millisecond

// startReapers starts the reapers, each restarted whenever it dies.
func (s *stack) startReapers() error {
	s.reapers = make([]*procs.Process, s.cfg.Reapers)
	s.reaperNames = make([]string, s.cfg.Reapers)
	for i := range s.reapers {
		s.reaperNames[i] = fmt.Sprintf("reaper-%d", i)
		env := map[string]string{"REAPER_INTERVAL": reaperInterval.String()}
		maps.Copy(env, s.dbEnv(s.reaperNames[i], i))
		maps.Copy(env, s.common)
		s.reapers[i] = procs.New(s.reaperNames[i], s.bin("reaper"), env)
		if err := s.reapers[i].Start(); err != nil {
			return err
		}
		go s.reapers[i].Supervise(200 * time.Millisecond)
	}
	s.onClose(func() {
		for _, r := range s.reapers {
			r.Stop(10 * time.Second)
		}
	})
	return nil
}

// processes is every api worker and reaper, for the checks over all of them.
func (s *stack) processes() []*procs.Process {
	return append(slices.Clone(s.workers), s.reapers...)
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
