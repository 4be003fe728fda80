package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // served on PPROF_ADDR only
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/httpapi"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/routing"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/migrations"
)

// ShutdownTimeout bounds how long SIGTERM waits for requests in flight. A
// request cut off after it keeps its recovery point and lease; a retry or
// the reaper resumes it.
const ShutdownTimeout = 30 * time.Second

// Main is the API server, runnable in-process by tests.
type Main struct {
	Config Config
	Logger *slog.Logger
	// CrashHook is passed to the state machine (tests only).
	CrashHook func(ctx context.Context, at phases.CrashPoint) error
	// WrapPSP, if set, wraps the PSP the service uses (the chaos build's
	// deliberate defects, package internal/testutil/faults).
	WrapPSP func(charges.Authorizer) (charges.Authorizer, error)
	// Authorizer, if set, replaces the PSP client (tests only).
	Authorizer charges.Authorizer
	// Telemetry, if set, replaces the providers built from OTEL_* (tests
	// pass in-memory exporters).
	Telemetry *telemetry.Telemetry
	// Server bounds the API's connections; zero fields take the contract's
	// limits (httpapi.ServerConfig). Tests shorten them.
	Server httpapi.ServerConfig

	// metrics serves /metrics on METRICS_ADDR, when set.
	metrics httpapi.MetricsListener

	mu         sync.Mutex
	addr       string
	mockPSP    *mockpsp.Mock
	mockPSPURL string
	ready      chan struct{}
	auth       *tenants.Authenticator
	pool       *pgxpool.Pool
}

// Run serves until ctx ends, then shuts down gracefully.
func (m *Main) Run(ctx context.Context) error {
	m.init()
	// Before anything starts: a refusal is one line, at once.
	if !m.Config.hasPSP() {
		return ErrPSPURLRequired
	}
	tel := m.Telemetry
	if tel == nil {
		var err error
		if tel, err = telemetry.New(ctx, "phasepay-api"); err != nil {
			return err
		}
		defer tel.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // best effort at exit
	}
	pool, err := dbpool.OpenPool(ctx, m.Config.database(), tel)
	if err != nil {
		return err
	}
	defer pool.Close()
	m.mu.Lock()
	m.pool = pool
	m.mu.Unlock()
	stopCheck, err := m.checkPartitions(ctx, pool)
	if err != nil {
		return err
	}
	defer stopCheck()

	authorizer := m.Authorizer
	if authorizer == nil {
		var mockURL string
		if m.Config.PSPURL == PSPEmbedded {
			ms, err := m.startMockPSP()
			if err != nil {
				return err
			}
			// Deferred, so that it stops on every return, and after the API
			// has drained: requests in flight still reach it.
			defer func() {
				shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
				defer cancel()
				_ = ms.Shutdown(shutCtx)
			}()
			mockURL = ms.URL
		}
		if authorizer, err = routing.NewTraced(m.Config.routes(mockURL), tel, m.Logger); err != nil {
			return fmt.Errorf("psp: %w", err)
		}
	}
	if m.WrapPSP != nil {
		if authorizer, err = m.WrapPSP(authorizer); err != nil {
			return err
		}
	}

	keys, err := idempotency.NewStore(m.Config.keysConfig())
	if err != nil {
		return err
	}
	svc, err := charges.NewService(pool, keys, authorizer, phases.Config{
		OneCommitPerPhase: m.Config.OneCommitPerPhase,
		Batch:             m.Config.Batch,
		CrashHook:         m.CrashHook,
		Logger:            m.Logger,
		TracerProvider:    tel.Tracer,
		MeterProvider:     tel.Meter,
	})
	if err != nil {
		return err
	}
	auth, stopListener, err := m.startRevocationListener(ctx, pool)
	if err != nil {
		return err
	}
	defer stopListener()
	handler, err := httpapi.NewHandler(httpapi.Config{
		Pool: pool, Charges: svc, Telemetry: tel, Logger: m.Logger, Authenticator: auth,
		MetricsElsewhere:    m.Config.MetricsAddr != "",
		ServerAddr:          m.Config.Addr,
		WebhookAllowPrivate: m.Config.WebhookAllowPrivate,
		PSPWebhookSecrets:   m.Config.pspWebhookSecrets(),
	})
	if err != nil {
		return err
	}
	if m.Config.MetricsAddr != "" {
		stopMetrics, err := m.metrics.Serve(m.Config.MetricsAddr, tel.MetricsHandler, m.Logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}

	if m.Config.PprofAddr != "" {
		// http.DefaultServeMux carries net/http/pprof's handlers (imported
		// for that alone); the API itself never serves it.
		pprofSrv := &http.Server{Addr: m.Config.PprofAddr, ReadHeaderTimeout: 10 * time.Second}
		// Where requests wait on each other: lock contention (mutex) and
		// blocking on channels, locks and selects of 100 µs or more
		// (block), sampled; a few percent of CPU, for a debugging aid.
		runtime.SetMutexProfileFraction(100)
		runtime.SetBlockProfileRate(int(100 * time.Microsecond))
		go pprofSrv.ListenAndServe() //nolint:errcheck // a debugging aid
		defer pprofSrv.Close()
	}

	ln, err := net.Listen("tcp", m.Config.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srvCfg := m.Server
	srvCfg.ErrorLog = slog.NewLogLogger(m.Logger.Handler(), slog.LevelWarn)
	api := httpapi.NewServer(handler, srvCfg)
	m.mu.Lock()
	m.addr = ln.Addr().String()
	m.mu.Unlock()
	close(m.ready)
	m.Logger.Info("api listening", "addr", m.addr, "psp", pspLabel(m.Config), "lease", m.Config.Lease.String())

	served := make(chan error, 1)
	go func() { served <- api.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	m.Logger.Info("api shutting down")
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	return api.Shutdown(shutCtx)
}

// StartupCheckTimeout bounds each try of the start-up partition check, so
// that a database that accepts connections but does not answer cannot hang
// the start.
const StartupCheckTimeout = 10 * time.Second

// startupCheckRetry is the pause between tries while the database is away.
const startupCheckRetry = 2 * time.Second

// checkPartitions creates the partitions inserts will soon need, as the
// reaper does, so that a fresh deployment works before any reaper ran;
// behind a transaction pooler it first checks that the server settings
// are in effect (dbpool.CheckSettings).
// A database that is down, restarting or busy (dbstate.Unavailable) does not
// stop the start: the api serves (requests answer 503 database_unavailable
// and /readyz 503 until PostgreSQL answers) and the check is retried in the
// background, the way the api rides out a restart that happens later. Any
// other failure (no such function: `api migrate` has not run) is a
// configuration error, and the start fails with it. Days left without a
// partition (an operator's DEFAULT partition holds their rows) are a
// warning, not a failure. stop ends the background retries.
func (m *Main) checkPartitions(ctx context.Context, pool *pgxpool.Pool) (stop func(), err error) {
	try := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, StartupCheckTimeout)
		defer cancel()
		if m.Config.DatabasePooler == dbpool.PoolerTransaction {
			// No startup parameter passes the pooler: the limits hold only
			// as the database's defaults, which `api migrate` sets.
			if err := dbpool.CheckSettings(ctx, pool); err != nil {
				return err
			}
		}
		created, err := idempotency.EnsurePartitions(ctx, pool)
		if err != nil {
			return err
		}
		// Events are written in phase transactions: their days must exist
		// as surely as the keys'.
		evCreated, err := events.EnsurePartitions(ctx, pool)
		if err != nil {
			return err
		}
		created += evCreated
		if created > 0 {
			m.Logger.Info("created partitions ahead", "count", created)
		}
		if missing, err := idempotency.MissingDays(ctx, pool); err == nil && len(missing) > 0 {
			days := make([]string, len(missing))
			for i, d := range missing {
				days[i] = d.Format(time.DateOnly)
			}
			m.Logger.Warn("days without a partition of their own (their keys go to the DEFAULT partition; see docs/operations.md)", "days", days)
		}
		return nil
	}
	err = try(ctx)
	switch {
	case err == nil:
		return func() {}, nil
	case errors.Is(err, dbpool.ErrSettings):
		return nil, fmt.Errorf("start: %w", err)
	case !dbstate.Unavailable(err):
		return nil, fmt.Errorf("start: %w (has `api migrate` run?)", err)
	}
	m.Logger.Warn("database unavailable at start: serving 503 until it answers", "error", err.Error())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(startupCheckRetry):
			}
			err := try(ctx)
			if err == nil {
				m.Logger.Info("database available: start-up partition check done")
				return
			}
			if ctx.Err() == nil {
				m.Logger.Warn("start-up partition check failed; retrying", "error", err.Error())
			}
		}
	}()
	return func() { cancel(); <-done }, nil
}

func (m *Main) init() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ready == nil {
		m.ready = make(chan struct{})
	}
	if m.Logger == nil {
		m.Logger = slog.New(slog.DiscardHandler)
	}
}

// Addr waits until Run listens and returns its address.
func (m *Main) Addr(ctx context.Context) (string, error) {
	m.init()
	select {
	case <-m.ready:
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.addr, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// dbPool returns the pool Run opened (tests only: they act on the api's
// own connections, as a pooler or an operator would).
func (m *Main) dbPool() *pgxpool.Pool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pool
}

// MockPSP returns the in-process mock PSP, if Run started one.
func (m *Main) MockPSP() *mockpsp.Mock {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mockPSP
}

// MockPSPURL returns the base URL of the in-process mock PSP, if Run
// started one.
func (m *Main) MockPSPURL() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mockPSPURL
}

// startMockPSP serves the embedded mock PSP on MockPSPAddr, or on a free
// port if that one is taken (another api process has it).
func (m *Main) startMockPSP() (*mockpsp.Server, error) {
	ms, onAddr, err := mockpsp.Start(m.Config.MockPSPAddr)
	if err != nil {
		return nil, err
	}
	if !onAddr {
		m.Logger.Warn("embedded mock PSP: address taken, using a free port", "addr", m.Config.MockPSPAddr)
	}
	m.mu.Lock()
	m.mockPSP, m.mockPSPURL = ms.Mock, ms.URL
	m.mu.Unlock()
	m.Logger.Info("embedded mock psp listening", "url", ms.URL)
	return ms, nil
}

// pspLabel names the configured PSPs for the start-up log line, their URLs
// without credentials or query (psp.RedactURL).
func pspLabel(c Config) string {
	if c.PSPURL == PSPEmbedded {
		return "embedded mock"
	}
	if c.PSPURL == "" && len(c.Routing.PSPs) > 0 {
		var names []string
		for _, p := range c.Routing.PSPs {
			names = append(names, p.Name+"="+psp.RedactURL(p.URL))
		}
		return strings.Join(names, ",")
	}
	return psp.RedactURL(c.PSPURL)
}

func migrate(ctx context.Context, cfg Config) error {
	db := cfg.database()
	url := db.Direct()
	if url == "" {
		return fmt.Errorf("%w: DATABASE_POOLER=transaction: `api migrate` needs DATABASE_DIRECT_URL, the server itself (DDL and goose's session lock do not belong behind a transaction pooler)", errConfig)
	}
	if err := createDatabase(ctx, url); err != nil {
		return err
	}
	if err := migrations.UpURL(ctx, url); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if db.Pooler == dbpool.PoolerTransaction {
		if err := dbpool.ApplySettings(ctx, conn); err != nil {
			return err
		}
	}
	if _, err = idempotency.EnsurePartitions(ctx, conn); err != nil {
		return err
	}
	_, err = events.EnsurePartitions(ctx, conn)
	return err
}

// createDatabase creates DATABASE_URL's database if the server does not have
// it yet, so that `make run` works on a fresh server.
func createDatabase(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	name := cfg.Database
	cfg.Database = "postgres"
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: a concurrent migrate won
			return nil
		}
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}
