// Command reaper finishes the requests crashed API workers abandoned and
// keeps the idempotency-key partitions: created ahead, dropped past
// retention. Several may run at once. It loops until SIGTERM, finishes the
// batch in hand, and exits 0.
//
// Configuration is by environment variable; see Config.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/envconfig"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/platform"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/telemetry"
)

func main() {
	os.Exit(run(os.Getenv, os.Stderr))
}

func run(getenv func(string) string, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := ParseEnv(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "reaper: %v\n", err)
		return 2
	}
	m := &Main{Config: cfg, Logger: telemetry.NewLogger(stderr)}
	if err := m.Run(ctx); err != nil {
		m.Logger.Error("reaper stopped", "error", err.Error())
		return 1
	}
	return 0
}

// Config is the reaper's configuration.
type Config struct {
	DatabaseURL string        // DATABASE_URL
	PSPURL      string        // PSP_URL; empty: an in-process mock (see Run)
	Lease       time.Duration // LEASE: must match the API's
	Interval    time.Duration // REAPER_INTERVAL
	Retention   time.Duration // RETENTION
	// MetricsAddr (REAPER_METRICS_ADDR) serves /metrics; empty: none.
	MetricsAddr string
}

// ParseEnv reads Config from the environment and validates it.
func ParseEnv(getenv func(string) string) (Config, error) {
	c := Config{
		DatabaseURL: envconfig.String(getenv, "DATABASE_URL", platform.DatabaseURLDefault),
		PSPURL:      getenv("PSP_URL"),
		MetricsAddr: getenv("REAPER_METRICS_ADDR"),
	}
	var err error
	if c.Lease, err = envconfig.Duration(getenv, "LEASE", idempotency.LeaseDefault); err != nil {
		return Config{}, err
	}
	if c.Interval, err = envconfig.Duration(getenv, "REAPER_INTERVAL", reaper.IntervalDefault); err != nil {
		return Config{}, err
	}
	if c.Retention, err = envconfig.Duration(getenv, "RETENTION", reaper.RetentionDefault); err != nil {
		return Config{}, err
	}
	if c.Retention <= c.Lease {
		return Config{}, fmt.Errorf("RETENTION: %s must exceed LEASE %s (and every client's retry window)", c.Retention, c.Lease)
	}
	return c, nil
}

// Main is the reaper program, runnable in-process by tests.
type Main struct {
	Config Config
	Logger *slog.Logger
	// Authorizer, if set, replaces the PSP client (tests only).
	Authorizer charges.Authorizer

	mu          sync.Mutex
	metricsAddr string
}

// Run runs the reaper until ctx ends.
func (m *Main) Run(ctx context.Context) error {
	if m.Logger == nil {
		m.Logger = slog.New(slog.DiscardHandler)
	}
	tel, err := telemetry.New(ctx, "phasepay-reaper")
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // best effort at exit
	pool, err := platform.OpenPool(ctx, m.Config.DatabaseURL, tel)
	if err != nil {
		return err
	}
	defer pool.Close()

	authorizer := m.Authorizer
	if authorizer == nil {
		pspURL := m.Config.PSPURL
		if pspURL == "" {
			// Alone, an in-process mock has a ledger of its own. make run
			// points the reaper at the API's embedded mock instead.
			ms, _, err := psp.StartMock("127.0.0.1:0")
			if err != nil {
				return err
			}
			defer ms.Shutdown(context.Background()) //nolint:errcheck
			m.Logger.Warn("PSP_URL is empty: using an in-process mock PSP of the reaper's own", "url", ms.URL)
			pspURL = ms.URL
		}
		if authorizer, err = platform.PSPClient(pspURL, tel); err != nil {
			return fmt.Errorf("psp: %w", err)
		}
	}

	if m.Config.MetricsAddr != "" {
		stopMetrics, err := m.serveMetrics(tel.MetricsHandler)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}

	keys, err := idempotency.NewStore(idempotency.Config{Lease: m.Config.Lease})
	if err != nil {
		return err
	}
	svc, err := charges.NewService(pool, keys, authorizer, charges.Config{
		Logger: m.Logger, TracerProvider: tel.Tracer, MeterProvider: tel.Meter,
	})
	if err != nil {
		return err
	}
	r, err := reaper.New(pool, keys, svc, reaper.Config{
		Interval:  m.Config.Interval,
		Retention: m.Config.Retention,
		Meter:     tel.Meter.Meter("github.com/phasepay/phasepay/internal/reaper"),
		Logger:    m.Logger,
	})
	if err != nil {
		return err
	}
	m.Logger.Info("reaper running", "interval", m.Config.Interval.String(), "retention", m.Config.Retention.String(),
		"lease", m.Config.Lease.String())
	err = r.Run(ctx)
	m.Logger.Info("reaper stopped")
	return err
}

func (m *Main) serveMetrics(h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", m.Config.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	m.mu.Lock()
	m.metricsAddr = ln.Addr().String()
	m.mu.Unlock()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("metrics listener", "error", err.Error())
		}
	}()
	return func() { _ = srv.Shutdown(context.Background()) }, nil
}

// MetricsAddr returns the metrics listener's address once Run serves it.
func (m *Main) MetricsAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.metricsAddr
}
