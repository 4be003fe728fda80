package soak

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/tools/procs"
)

// clusterSettings are the run's PostgreSQL's, over pgcluster's defaults.
// The run has a cluster of its own, not a database on the shared server,
// for three reasons: autovacuum must run (the shared server runs without
// it, where dead tuples only climb and say nothing about phasepay), the
// WAL position is the whole cluster's (on the shared server it would count
// every other test's writes as this run's), and pg_stat_activity holds
// only this run's connections. Autovacuum and checkpoints keep
// PostgreSQL's defaults (a production server's starting point), and full
// page writes are on as in production, since they are much of the WAL a
// charge costs; pgcluster's fsync=off stays (it changes no WAL volume, only
// what a machine crash could lose).
var clusterSettings = map[string]string{
	"autovacuum":       "on",
	"full_page_writes": "on",
	"shared_buffers":   "128MB",
}

// harnessApp is the application_name of the harness's own connections.
const harnessApp = "soak-harness"

// poolIdleTime is every process's pool_max_conn_idle_time. pgxpool's
// default, 30 minutes, keeps the connections a burst opened for half an
// hour: a burst in the judged window (an answer stalled by other work on
// the machine) then reads as connections climbing to its end. Closed a
// minute after their last use, the connections each minute shows are what
// that minute needed, and a connection that is never given back still
// climbs.
const poolIdleTime = "1m"

// processURL is the database URL of a process: its connections named, its
// pool's idle time set.
func processURL(dbURL, name string) string {
	return procs.WithApplicationName(dbURL, name) + "&pool_max_conn_idle_time=" + poolIdleTime
}

// stack is what a run starts: the cluster and its database, the mock PSP,
// the api workers (the last one killed every KillEvery), the reaper, and
// the harness's own pool.
type stack struct {
	cfg *Config

	cluster *pgcluster.Cluster
	dbURL   string
	apiKey  string

	mock    *procs.Process
	workers []*procs.Process
	bases   []string
	reaper  *procs.Process
	watched []watched // every api and the reaper, with their /metrics

	pool    *pgxpool.Pool
	closers []func()
}

// onClose adds a cleanup for close, as a defer in Run would.
func (s *stack) onClose(f func()) { s.closers = append(s.closers, f) }

// close undoes what start did, in reverse: every process stops before the
// cluster goes.
func (s *stack) close() {
	for _, f := range s.closers {
		defer f()
	}
}

func (s *stack) bin(name string) string { return filepath.Join(s.cfg.BinDir, name) }

// victim is the worker the run kills; the others are never killed, so their
// memory, goroutines and files are judged over the whole run.
func (s *stack) victim() *procs.Process { return s.workers[len(s.workers)-1] }

func (s *stack) start(ctx context.Context) error {
	var err error
	if s.cluster, err = pgcluster.New(ctx, pgcluster.Config{BinDir: s.cfg.PGBinDir, Settings: clusterSettings}); err != nil {
		return err
	}
	s.onClose(func() { _ = s.cluster.Close() })
	if s.dbURL, err = s.cluster.CreateDatabase(ctx, "phasepay_soak"); err != nil {
		return err
	}
	env := map[string]string{"DATABASE_URL": s.dbURL}
	if _, err := procs.RunOnce(ctx, s.bin("api"), env, "migrate"); err != nil {
		return err
	}
	if s.apiKey, err = procs.RunOnce(ctx, s.bin("api"), env, "keys", "create", "--tenant", "soak"); err != nil {
		return err
	}
	pspURL, err := s.startPSP(ctx)
	if err != nil {
		return err
	}
	common := map[string]string{"PSP_URL": pspURL, "LEASE": s.cfg.Lease.String(), "WEBHOOK_ALLOW_PRIVATE": "1"}
	if err := s.startWorkers(ctx, common); err != nil {
		return err
	}
	if err := s.startReaper(ctx, common); err != nil {
		return err
	}
	pc, err := pgxpool.ParseConfig(procs.WithApplicationName(s.dbURL, harnessApp))
	if err != nil {
		return err
	}
	pc.MaxConns = 2 // the sampler asks one thing at a time
	if s.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return err
	}
	s.onClose(s.pool.Close)
	return nil
}

// startPSP starts the mock PSP as its own process, answering after 5 ms
// and failing 1% of authorizations with a 503 (the retry schedule's share
// of the mix), and returns its URL.
func (s *stack) startPSP(ctx context.Context) (string, error) {
	addr, err := procs.FreeAddr()
	if err != nil {
		return "", err
	}
	s.mock = procs.New("mockpsp", s.bin("mockpsp"), map[string]string{
		"MOCKPSP_ADDR": addr, "MOCKPSP_LATENCY": "5", "MOCKPSP_ERROR_RATE": fmt.Sprint(s.cfg.PSPErrorRate),
	})
	if err := s.mock.Start(); err != nil {
		return "", err
	}
	s.onClose(func() { s.mock.Stop(5 * time.Second) })
	u := "http://" + addr
	if err := procs.WaitUp(ctx, u+"/_admin/authorizations"); err != nil {
		return "", fmt.Errorf("mock psp: %w\n%s", err, s.mock.LogText())
	}
	return u, nil
}

// startWorkers starts the api workers, each with a metrics listener of its
// own and restarted whenever it dies, and waits until each answers.
func (s *stack) startWorkers(ctx context.Context, common map[string]string) error {
	s.workers = make([]*procs.Process, s.cfg.Workers)
	s.bases = make([]string, s.cfg.Workers)
	s.onClose(func() {
		for _, w := range s.workers {
			if w != nil {
				w.Stop(10 * time.Second)
			}
		}
	})
	for i := range s.workers {
		name := fmt.Sprintf("api-%d", i)
		addr, err := procs.FreeAddr()
		if err != nil {
			return err
		}
		metrics, err := procs.FreeAddr()
		if err != nil {
			return err
		}
		env := map[string]string{"API_ADDR": addr, "METRICS_ADDR": metrics, "DATABASE_URL": processURL(s.dbURL, name)}
		for k, v := range common {
			env[k] = v
		}
		s.workers[i] = procs.New(name, s.bin("api"), env, "serve")
		if err := s.workers[i].Start(); err != nil {
			return err
		}
		go s.workers[i].Supervise(150 * time.Millisecond)
		s.bases[i] = "http://" + addr
		s.watched = append(s.watched, watched{name: name, metrics: "http://" + metrics + "/metrics"})
		if err := procs.WaitUp(ctx, s.bases[i]+"/healthz"); err != nil {
			return fmt.Errorf("%s: %w\n%s", name, err, s.workers[i].LogText())
		}
	}
	return nil
}

// startReaper starts the reaper with its metrics listener.
func (s *stack) startReaper(ctx context.Context, common map[string]string) error {
	const name = "reaper-0"
	metrics, err := procs.FreeAddr()
	if err != nil {
		return err
	}
	env := map[string]string{"REAPER_METRICS_ADDR": metrics, "DATABASE_URL": processURL(s.dbURL, name)}
	for k, v := range common {
		env[k] = v
	}
	s.reaper = procs.New(name, s.bin("reaper"), env)
	if err := s.reaper.Start(); err != nil {
		return err
	}
	go s.reaper.Supervise(200 * time.Millisecond)
	s.onClose(func() { s.reaper.Stop(10 * time.Second) })
	u := "http://" + metrics + "/metrics"
	s.watched = append(s.watched, watched{name: name, metrics: u})
	if err := procs.WaitUp(ctx, u); err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, s.reaper.LogText())
	}
	return nil
}

// processes is every supervised api and reaper, for the exit checks.
func (s *stack) processes() []*procs.Process {
	return append(append([]*procs.Process{}, s.workers...), s.reaper)
}
