// Command reaper finishes the requests crashed API workers abandoned and
// keeps the idempotency-key partitions: created ahead, dropped past
// retention. Several may run at once. It loops until SIGTERM, finishes the
// batch in hand, and exits 0.
//
// Configuration is by environment variable; see Config. PSP_URL is
// required.
//
// -h, -help and --help print the usage on stdout and exit 0 before any
// configuration is read, and any other argument exits 2: asking for help
// never takes over a lease.
//
//	go test ./cmd/reaper/ -run '^TestReaperHelpStartsNothing$'
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/envconfig"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/httpapi"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/routing"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/webhooks"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const usage = `Usage: reaper

Loops until SIGTERM: takes over expired leases and drives unfinished
requests on their retry schedule, creates partitions ahead and drops those
past retention. Several reapers may run at once.

Configuration is by environment variable:
  PSP_URL              required: the PSP's base URL, or "embedded" for an
                       in-process mock PSP of the reaper's own (tests only)
  PSPS, PSP_ROUTING    instead of PSP_URL, several PSPs and the order each
                       currency tries them in (the API's values)
  DATABASE_URL         PostgreSQL (default ` + dbpool.DatabaseURLDefault + `)
  DATABASE_POOLER      "transaction": DATABASE_URL goes through a
                       transaction-mode pooler (PgBouncer): no named
                       prepared statement, no session state
  DATABASE_DIRECT_URL  with a pooler, the server itself, to LISTEN for
                       webhook wake-ups on; unset: they are polled
  LEASE                lease taken by a takeover; must match the API's (default 60s)
  RETRY_BASE, RETRY_MAX
                       the retry schedule of an unfinished request: the n-th
                       failed attempt is followed by one about RETRY_BASE·2ⁿ
                       later (with jitter), never more than RETRY_MAX; the
                       API's values (default 1s, 1h). Webhook deliveries are
                       retried on the same schedule
  GIVE_UP_AFTER        a request still unresolved this long after its claim
                       becomes needs_attention at its next failed attempt;
                       the API's value (default 72h)
  REAPER_INTERVAL      pause between passes (default 1s)
  RETENTION            how long a finished key is kept (default 24h)
  EVENTS_RETENTION     how long events and webhook deliveries are kept
                       (default 720h; never a day still being retried)
  WEBHOOK_ALLOW_PRIVATE  1: deliver webhooks to loopback, private and
                       link-local addresses (development only)
  REAPER_METRICS_ADDR  listen address of GET /metrics (METRICS_ADDR is
                       accepted too); empty: no metrics listener
  PSP_BREAKER_THRESHOLD, PSP_BREAKER_COOLDOWN
                       with PSPS, the unknown or busy outcomes in a row that
                       open a PSP's circuit breaker, and its cool-down
                       (default 5, 5s)
  TIMELINE             "off" records no request timelines (make bench's
                       measurement only; default on)
  OTEL_*               OpenTelemetry SDK variables
`

// run is main with its inputs and exit code explicit, so that tests can run
// it in-process.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	// No flags: -h/--help prints the usage, anything else is a mistake,
	// and neither may start a reaper.
	fs := flag.NewFlagSet("reaper", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	} else if err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "reaper: takes no arguments (configuration is by environment); run 'reaper -h' for usage")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := ParseEnv(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "reaper: %v\n", err)
		return 2
	}
	m := &Main{Config: cfg, Logger: telemetry.NewLogger(stderr)}
	if m.WrapPSP, err = chaosDefect(getenv); err != nil {
		fmt.Fprintf(stderr, "reaper: %v\n", err)
		return 2
	}
	if err := m.Run(ctx); err != nil {
		m.Logger.Error("reaper stopped", "error", err.Error())
		return 1
	}
	return 0
}

// Config is the reaper's configuration.
type Config struct {
	DatabaseURL string // DATABASE_URL
	// DatabasePooler (DATABASE_POOLER=transaction) declares that
	// DatabaseURL goes through a transaction-mode pooler, and
	// DatabaseDirectURL (DATABASE_DIRECT_URL) is then the server itself,
	// for LISTEN; see dbpool.Config.
	DatabasePooler    dbpool.Pooler
	DatabaseDirectURL string
	// PSPURL is PSP_URL, required: the PSP's base URL, or PSPEmbedded for
	// an in-process mock PSP with a ledger of its own (see Run).
	PSPURL string
	// Routing is the PSPs (PSP_URL, or PSPS and PSP_ROUTING: the API's);
	// see package routing. Empty in a Main built with PSPURL alone.
	Routing routing.Config
	Lease   time.Duration // LEASE: must match the API's
	// RETRY_BASE, RETRY_MAX, GIVE_UP_AFTER: the retry schedule (must match
	// the API's); see idempotency.Config.
	RetryBase, RetryMax, GiveUpAfter time.Duration
	Interval                         time.Duration // REAPER_INTERVAL
	Retention                        time.Duration // RETENTION
	// MetricsAddr (REAPER_METRICS_ADDR, else METRICS_ADDR, the api's name
	// for the same thing) serves /metrics; empty: none.
	MetricsAddr string
	// EventsRetention (EVENTS_RETENTION) is how long events and their
	// deliveries are kept; see webhooks.DelivererConfig.Retention.
	EventsRetention time.Duration
	// WebhookAllowPrivate (WEBHOOK_ALLOW_PRIVATE=1) lets deliveries reach
	// loopback, private and link-local addresses: development only.
	WebhookAllowPrivate bool
	// TimelineOff (TIMELINE=off): no request timelines (make bench only).
	TimelineOff bool
}

// PSPEmbedded is the PSP_URL that selects an in-process mock PSP.
const PSPEmbedded = "embedded"

// ParseEnv reads Config from the environment and validates it.
func ParseEnv(getenv func(string) string) (Config, error) {
	db, err := dbpool.ConfigFromEnv(getenv)
	if err != nil {
		return Config{}, err
	}
	c := Config{
		DatabaseURL:       db.URL,
		DatabasePooler:    db.Pooler,
		DatabaseDirectURL: db.DirectURL,
		PSPURL:            getenv("PSP_URL"),
		MetricsAddr:       cmp.Or(getenv("REAPER_METRICS_ADDR"), getenv("METRICS_ADDR")),
	}
	// Never a default: a reaper that lost its PSP_URL must not drive
	// requests against a mock and record authorizations no PSP ever saw.
	if c.Routing, err = routing.FromEnv(getenv); err != nil {
		return Config{}, err
	}
	if len(c.Routing.PSPs) == 0 {
		return Config{}, fmt.Errorf(`PSP_URL is required: the PSP's base URL, or %q for an in-process mock PSP (tests only); or PSPS (and PSP_ROUTING) for several PSPs`, PSPEmbedded)
	}
	if c.RetryBase, c.RetryMax, c.GiveUpAfter, err = idempotency.ScheduleFromEnv(getenv); err != nil {
		return Config{}, err
	}
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
	if c.EventsRetention, err = envconfig.Duration(getenv, "EVENTS_RETENTION", events.RetentionDefault); err != nil {
		return Config{}, err
	}
	if c.EventsRetention <= webhooks.GiveUpAfterDefault {
		return Config{}, fmt.Errorf("EVENTS_RETENTION: %s must exceed the %s webhook deliveries are retried", c.EventsRetention, webhooks.GiveUpAfterDefault)
	}
	if c.WebhookAllowPrivate, err = envconfig.Bool(getenv, "WEBHOOK_ALLOW_PRIVATE", false); err != nil {
		return Config{}, err
	}
	if c.TimelineOff, err = idempotency.TimelineOffFromEnv(getenv); err != nil {
		return Config{}, err
	}
	return c, nil
}

// database is how the reaper connects to PostgreSQL.
func (c Config) database() dbpool.Config {
	return dbpool.Config{URL: c.DatabaseURL, Pooler: c.DatabasePooler, DirectURL: c.DatabaseDirectURL}
}

// Main is the reaper program, runnable in-process by tests.
type Main struct {
	Config Config
	Logger *slog.Logger
	// Authorizer, if set, replaces the PSP client (tests only).
	Authorizer charges.Authorizer
	// WrapPSP, if set, wraps the PSP the service uses (the chaos build's
	// deliberate defects, package internal/testutil/faults).
	WrapPSP func(charges.Authorizer) (charges.Authorizer, error)

	// metrics serves /metrics on REAPER_METRICS_ADDR, when set.
	metrics httpapi.MetricsListener
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
	db := m.Config.database()
	pool, err := dbpool.OpenPool(ctx, db, tel)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := m.checkSettings(ctx, pool); err != nil {
		return err
	}

	authorizer := m.Authorizer
	if authorizer == nil {
		routes := m.Config.Routing
		if len(routes.PSPs) == 0 {
			routes = routing.Single(m.Config.PSPURL)
		}
		if routes.Single && routes.PSPs[0].URL == PSPEmbedded {
			// Alone, an in-process mock has a ledger of its own. make run
			// points the reaper at the API's embedded mock instead.
			ms, _, err := mockpsp.Start("127.0.0.1:0")
			if err != nil {
				return err
			}
			defer ms.Shutdown(context.Background()) //nolint:errcheck
			m.Logger.Warn("PSP_URL=embedded: using an in-process mock PSP of the reaper's own", "url", ms.URL)
			routes.PSPs = []routing.PSP{{Name: routing.DefaultName, URL: ms.URL}}
		}
		if authorizer, err = routing.NewTraced(routes, tel, m.Logger); err != nil {
			return fmt.Errorf("psp: %w", err)
		}
	}
	if m.WrapPSP != nil {
		if authorizer, err = m.WrapPSP(authorizer); err != nil {
			return err
		}
	}

	if m.Config.MetricsAddr != "" {
		stopMetrics, err := m.metrics.Serve(m.Config.MetricsAddr, tel.MetricsHandler, m.Logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}

	keys, err := idempotency.NewStore(idempotency.Config{Lease: m.Config.Lease, RetryBase: m.Config.RetryBase,
		RetryMax: m.Config.RetryMax, GiveUpAfter: m.Config.GiveUpAfter, NeedsAttention: events.NeedsAttention,
		Role: idempotency.RoleReaper, TimelineOff: m.Config.TimelineOff})
	if err != nil {
		return err
	}
	svc, err := charges.NewService(pool, keys, authorizer, phases.Config{
		Logger: m.Logger, TracerProvider: tel.Tracer, MeterProvider: tel.Meter,
	})
	if err != nil {
		return err
	}
	r, err := reaper.New(pool, keys, svc, reaper.Config{
		Interval:  m.Config.Interval,
		Retention: m.Config.Retention,
		Pooled:    db.Pooler == dbpool.PoolerTransaction,
		Meter:     tel.Meter.Meter("github.com/phasepay/phasepay/internal/reaper"),
		Logger:    m.Logger,
	})
	if err != nil {
		return err
	}
	// Webhook delivery runs beside the passes, not in them: a pass may
	// spend a lease driving keys, and deliveries must start within a
	// REAPER_INTERVAL of their event.
	deliverer, err := webhooks.NewDeliverer(pool, webhooks.DelivererConfig{
		Interval:     m.Config.Interval,
		RetryBase:    m.Config.RetryBase,
		RetryMax:     m.Config.RetryMax,
		Retention:    m.Config.EventsRetention,
		AllowPrivate: m.Config.WebhookAllowPrivate,
		Pooled:       db.Pooler == dbpool.PoolerTransaction,
		Listen:       listenConnect(db.Direct()),
		Meter:        tel.Meter.Meter("github.com/phasepay/phasepay/internal/webhooks"),
		Logger:       m.Logger,
	})
	if err != nil {
		return err
	}
	m.Logger.Info("reaper running", "interval", m.Config.Interval.String(), "retention", m.Config.Retention.String(),
		"lease", m.Config.Lease.String())
	var wg sync.WaitGroup
	wg.Go(func() { _ = deliverer.Run(ctx) }) // returns nil when ctx ends
	err = r.Run(ctx)
	wg.Wait()
	m.Logger.Info("reaper stopped")
	return err
}

// settingsCheckTimeout bounds the start-up check of the server settings.
const settingsCheckTimeout = 10 * time.Second

// checkSettings, behind a transaction pooler, checks that the server
// settings hold as the database's defaults (no startup parameter passes
// the pooler; `api migrate` sets them): a reaper whose statements would
// run without timeouts refuses to start. A database that does not answer
// does not stop the start: the reaper rides out outages, and the api's
// check reports the settings once it answers.
func (m *Main) checkSettings(ctx context.Context, pool *pgxpool.Pool) error {
	if m.Config.DatabasePooler != dbpool.PoolerTransaction {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, settingsCheckTimeout)
	defer cancel()
	err := dbpool.CheckSettings(ctx, pool)
	if errors.Is(err, dbpool.ErrSettings) {
		return err
	}
	if err != nil {
		m.Logger.Warn("could not check the server settings at start", "error", err.Error())
	}
	return nil
}

// listenConnect returns how the webhook deliverer opens its LISTEN
// connection to the server at url: nil without one (behind a pooler with
// no DATABASE_DIRECT_URL), and the deliverer polls.
func listenConnect(url string) func(context.Context) (*pgx.Conn, error) {
	if url == "" {
		return nil
	}
	return func(ctx context.Context) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, err
		}
		cfg.RuntimeParams["application_name"] = WebhookListenerApplicationName
		ctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
		defer cancel()
		return pgx.ConnectConfig(ctx, cfg)
	}
}

// WebhookListenerApplicationName is the application_name of the webhook
// deliverer's LISTEN connection, for pg_stat_activity.
const WebhookListenerApplicationName = "phasepay-webhooks-listener"

// listenConnectTimeout bounds one connection attempt of the listener.
const listenConnectTimeout = 10 * time.Second

// MetricsAddr returns the metrics listener's address once Run serves it
// (REAPER_METRICS_ADDR set), else "".
func (m *Main) MetricsAddr() string { return m.metrics.Addr() }
