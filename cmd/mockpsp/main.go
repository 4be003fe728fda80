// Command mockpsp serves the mock payment service provider of docs/api.md
// ("The mock PSP") over HTTP, with its state in memory.
//
// Configuration is by environment variable: MOCKPSP_ADDR (default
// 127.0.0.1:8090), MOCKPSP_NAME (default mockpsp, shown in every log line
// and in GET /_admin/faults), MOCKPSP_KEY_TTL (how long an idempotency key
// is remembered, a Go duration, default 24h), MOCKPSP_ERROR_RATE,
// MOCKPSP_DROP_RATE, MOCKPSP_REJECT_RATE and MOCKPSP_LOOKUP_ERROR_RATE
// (0..1), MOCKPSP_LATENCY (a Go duration, or a bare integer of
// milliseconds) and MOCKPSP_STATE (a file that keeps its books across
// runs; `make run` sets it).
//
// -h, -help and --help print the usage on stdout and exit 0 before any
// configuration is read, and any other argument exits 2: asking for help
// never binds a port.
//
//	go test ./cmd/mockpsp/ -run '^TestMockPSPHelpStartsNothing$'
package main

import (
	"context"
	"errors"
	"flag"
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

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/telemetry"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Usage: mockpsp

Serves the mock payment service provider over HTTP until SIGTERM, with its
state in memory (docs/api.md, "The mock PSP"), and with MOCKPSP_STATE its
books kept in a file across runs.

Configuration is by environment variable:
  MOCKPSP_ADDR               listen address (default ` + ListenAddrDefault + `)
  MOCKPSP_NAME               name in every log line and GET /_admin/faults (default mockpsp)
  MOCKPSP_KEY_TTL            how long an idempotency key is remembered (default 24h)
  MOCKPSP_ERROR_RATE         0..1: answer 503 without acting
  MOCKPSP_DROP_RATE          0..1: act, then drop the connection unanswered
  MOCKPSP_REJECT_RATE        0..1: answer 400 without acting
  MOCKPSP_LOOKUP_ERROR_RATE  0..1: answer lookups 503
  MOCKPSP_LATENCY            delay every answer (Go duration, or milliseconds)
  MOCKPSP_STATE              a file to keep the books in across runs: loaded at
                             start, saved every second while they change and at
                             shutdown (make run sets .run/mockpsp-state.json)
  OTEL_*                     OpenTelemetry SDK variables

PUT /_admin/faults changes the faults at run time.
`

// run is main with an exit code, so that deferred calls run before the exit.
func run(args []string, stdout, stderr io.Writer) int {
	// No flags: -h/--help prints the usage, anything else is a mistake,
	// and neither may start a server.
	fs := flag.NewFlagSet("mockpsp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	} else if err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "mockpsp: takes no arguments (configuration is by environment); run 'mockpsp -h' for usage")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	m := NewMain()
	m.Logger = telemetry.NewLogger(stderr)
	if err := m.ParseEnv(os.Getenv); err != nil {
		fmt.Fprintf(stderr, "mockpsp: %v\n", err)
		return 2
	}
	if err := m.Run(ctx); err != nil {
		m.Logger.Error("mockpsp stopped", "name", m.Name, "error", err)
		return 1
	}
	return 0
}

// ShutdownTimeoutDefault bounds how long a graceful shutdown waits for
// requests in flight (a request may be delayed by latency_ms).
const ShutdownTimeoutDefault = 10 * time.Second

// Main is the mockpsp program, built so that tests can run all of it
// in-process. Create it with NewMain.
type Main struct {
	// ListenAddr is the TCP address to listen on; port 0 picks a free one,
	// which Addr reports once Run is listening.
	ListenAddr string
	// Name tells several mocks apart: in every log line and in GET
	// /_admin/faults.
	Name string
	// KeyTTL is how long the mock remembers an idempotency key; after it,
	// the same key is a new request, as at real PSPs.
	KeyTTL time.Duration
	// Faults are injected from the start; PUT /_admin/faults changes them.
	Faults mockpsp.Faults
	// ShutdownTimeout bounds the graceful shutdown when Run's context ends;
	// connections still open after it are closed.
	ShutdownTimeout time.Duration
	// StateFile, if set, keeps the mock's books across runs: loaded at
	// start, saved every StateEvery while they change, and at shutdown
	// (mockpsp.Mock.SaveState). A SIGKILL loses at most StateEvery of them.
	StateFile string
	// StateEvery is the pause between two saves of StateFile.
	StateEvery time.Duration
	// Logger receives the program's JSON log lines.
	Logger *slog.Logger

	listening chan struct{} // closed once Run has a listener

	mu      sync.Mutex
	running bool
	addr    string
	srv     *http.Server
}

// NewMain returns a Main with the contract's defaults.
func NewMain() *Main {
	return &Main{
		ListenAddr:      ListenAddrDefault,
		Name:            mockpsp.NameDefault,
		KeyTTL:          mockpsp.KeyTTLDefault,
		ShutdownTimeout: ShutdownTimeoutDefault,
		StateEvery:      time.Second,
		Logger:          slog.New(slog.DiscardHandler),
		listening:       make(chan struct{}),
	}
}

// Run listens on ListenAddr and serves the mock until ctx ends, then shuts
// down gracefully and returns nil. It returns early with an error if it
// cannot listen or serve, and with nil after Close. It runs once per Main.
func (m *Main) Run(ctx context.Context) error {
	mock, err := mockpsp.NewFromConfig(mockpsp.Config{Name: m.Name, KeyTTL: m.KeyTTL, Faults: m.Faults})
	if err != nil {
		return err
	}
	// Every line names the mock: several may run side by side.
	log := m.Logger.With("name", m.Name)
	if m.StateFile != "" {
		switch n, err := mock.LoadState(m.StateFile); {
		case errors.Is(err, mockpsp.ErrNoState):
			log.Info("mockpsp books: none saved yet, starting empty", "state", m.StateFile)
		case err != nil:
			// Starting empty would forget authorizations the database's
			// charges hold: refuse, and let the developer choose.
			return fmt.Errorf("%w (remove the file to start with empty books)", err)
		default:
			log.Info("mockpsp books loaded", "state", m.StateFile, "operations", n)
		}
		stopSaving := m.keepState(ctx, mock, log)
		defer stopSaving()
	}
	// Traced like the API (OTEL_* variables), and continuing the caller's
	// W3C trace context, so one trace spans the API and the PSP.
	tel, err := telemetry.New(ctx, "phasepay-mockpsp")
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // best effort at exit
	handler := otelhttp.NewHandler(mock, "mockpsp",
		otelhttp.WithTracerProvider(tel.Tracer),
		otelhttp.WithMeterProvider(tel.Meter),
		otelhttp.WithPropagators(tel.Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "mockpsp " + r.Method + " " + r.URL.Path }),
	)

	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("run: already started")
	}
	m.running = true
	m.mu.Unlock()

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", m.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", m.ListenAddr, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		// net/http's own complaints (TLS, hijack, panics) become JSON lines too.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError),
	}
	m.mu.Lock()
	m.addr, m.srv = ln.Addr().String(), srv
	m.mu.Unlock()
	close(m.listening)

	log.Info("mockpsp listening", "addr", ln.Addr().String(), "key_ttl", m.KeyTTL.String(),
		"error_rate", m.Faults.ErrorRate, "drop_rate", m.Faults.DropRate, "reject_rate", m.Faults.RejectRate,
		"lookup_error_rate", m.Faults.LookupErrorRate, "latency_ms", m.Faults.LatencyMS)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		if errors.Is(err, http.ErrServerClosed) {
			return nil // Close was called
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	log.Info("mockpsp shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		<-served
		return fmt.Errorf("shutdown: %w", err)
	}
	<-served
	return nil
}

// Addr returns the address Run listens on, with the real port when
// ListenAddr asked for port 0; it is empty until Run is listening.
func (m *Main) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// Close stops the server at once, dropping requests in flight; Run then
// returns nil. It is safe to call before Run and more than once.
func (m *Main) Close() error {
	m.mu.Lock()
	srv := m.srv
	m.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// keepState saves the mock's books to StateFile every StateEvery while
// they change; the func it returns stops that and saves them once more
// (at shutdown).
func (m *Main) keepState(ctx context.Context, mock *mockpsp.Mock, log *slog.Logger) func() {
	saved := -1
	save := func() {
		if n := mock.Changes(); n != saved {
			if err := mock.SaveState(m.StateFile); err != nil {
				log.Warn("mockpsp books not saved", "state", m.StateFile, "error", err.Error())
				return
			}
			saved = n
		}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(m.StateEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				save()
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		save()
	}
}
