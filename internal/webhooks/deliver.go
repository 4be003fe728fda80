package webhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/phasepay/phasepay/internal/dbnotify"
	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/maintenance"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testsignal"
)

// Defaults of DelivererConfig.
const (
	IntervalDefault    = time.Second
	TimeoutDefault     = 10 * time.Second
	LeaseDefault       = 30 * time.Second
	RetryBaseDefault   = time.Second
	RetryMaxDefault    = time.Hour
	GiveUpAfterDefault = 72 * time.Hour
	ParallelismDefault = 16
	PerEndpointDefault = 4
)

// DelivererConfig configures a Deliverer.
type DelivererConfig struct {
	// Interval is the longest pause between two scans for due deliveries
	// (REAPER_INTERVAL); a committed event wakes the deliverer at once
	// (Listen), so the first attempt usually starts within milliseconds of
	// the commit, and within Interval if the notification is lost.
	// Default 1s.
	Interval time.Duration
	// Listen opens a connection of the deliverer's own to the server
	// itself (DATABASE_URL, or DATABASE_DIRECT_URL behind a transaction
	// pooler), on which it LISTENs for committed events. Nil (behind a
	// pooler with no direct URL, and in tests): it scans every
	// PollInterval instead (package dbnotify makes the choice).
	Listen func(ctx context.Context) (*pgx.Conn, error)
	// PollInterval is the pause between two scans without Listen: how late
	// a first attempt may start after its event's commit. Default
	// dbnotify.PollIntervalDefault (250ms).
	PollInterval time.Duration
	// Timeout bounds one attempt, connection to last byte of the answer's
	// head: an endpoint that does not answer within it failed the attempt.
	// Default 10s (the contract's).
	Timeout time.Duration
	// Lease is how long a deliverer holds a delivery it took: after it,
	// another deliverer may take the delivery over (and the first one's
	// result is not recorded: it no longer holds the fencing token). Must
	// exceed Timeout by a margin for the record's transaction. Default 30s.
	Lease time.Duration
	// RetryBase and RetryMax are the retry schedule (RETRY_BASE,
	// RETRY_MAX): after the n-th failed attempt (n from 0) the next is due
	// about RetryBase·2ⁿ later, jittered by ±25%, never more than RetryMax.
	// Defaults 1s and 1h.
	RetryBase, RetryMax time.Duration
	// GiveUpAfter: a delivery that has not succeeded this long after its
	// event was written is failed at its next failed attempt. Default 72h.
	GiveUpAfter time.Duration
	// Parallelism is how many attempts this deliverer makes at once. They
	// are shared fairly between tenants (fair.go): a tenant has at most
	// its share of them, so a tenant whose endpoints all hang delays no
	// other tenant. No endpoint ever has more than PerEndpoint of them, so
	// a slow or dead endpoint delays no other endpoint, and no host more
	// than PerHost, shared between the tenants sending to it. Defaults 16,
	// 4 and half of Parallelism. An endpoint's own slow answers hold back
	// its next events' first attempts only while PerEndpoint of its
	// attempts hang at once: with 2, two deliveries that took 3 s of a
	// receiver's sometimes-slow answers at once made the next event's first
	// attempt wait for them (make chaos's sink answers 1% of deliveries
	// after 0.5-3 s: first attempts' p99 2.19 s against the contract's 2.2).
	Parallelism, PerEndpoint, PerHost int
	// Pooled says that the pool goes through a transaction pooler
	// (DATABASE_POOLER=transaction), for the partition maintenance's lock
	// (maintenance.Config.Pooled).
	Pooled bool
	// AllowPrivate (WEBHOOK_ALLOW_PRIVATE=1) lets deliveries connect to
	// any address: loopback, private, link-local, this host's own.
	// Development only.
	AllowPrivate bool
	// Meter records the deliverer's metrics; default a no-op meter.
	Meter metric.Meter
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Client, if set, replaces the HTTP client (tests only); it must keep
	// a Guard's DialControl unless AllowPrivate.
	Client *http.Client
	// Retention (EVENTS_RETENTION) is how long events, deliveries and
	// attempts are kept after their day ends; a day holding a delivery
	// still pending is kept until it ends. Default 30 days
	// (events.RetentionDefault); it must exceed GiveUpAfter.
	Retention time.Duration
	// MaintenanceInterval is the pause between two partition maintenance
	// runs of this deliverer (create days ahead, drop days past
	// Retention), made by one deliverer at a time. Default 1m.
	MaintenanceInterval time.Duration
}

// Deliverer sends queued deliveries. Several may run at once, in one
// process or many: each takes due deliveries with FOR UPDATE SKIP LOCKED
// and a fenced lease, exactly like the reaper takes keys.
type Deliverer struct {
	cfg    DelivererConfig
	pool   *pgxpool.Pool
	client *http.Client
	log    *slog.Logger
	m      instruments

	caps caps
	// names names tenants in log lines, as the reaper's and the
	// commands' lines do (see the package doc).
	names *tenants.NameCache
	// candidatesSQL is the package's candidatesSQL with caps' limits.
	candidatesSQL string
	mu            sync.Mutex
	load          *load // attempts in flight (fair.go)

	maintenance *maintenance.Service[EventsMaintenance]
	// TestAttemptDone, if set, is called after each attempt is recorded.
	// For tools that count every attempt (a signal drops what its buffer
	// cannot hold); tests wait on TestSignals.
	TestAttemptDone func(Result)
	// TestSignals are no-ops until a test calls their Init, before Run.
	TestSignals DelivererTestSignals
}

// DelivererTestSignals are the points of a Deliverer's work a test may
// wait on.
type DelivererTestSignals struct {
	// PassDone carries how many attempts each pass of Run started. A pass
	// that started none while deliveries are due found every one it may
	// take excluded by its caps.
	PassDone testsignal.Signal[int]
	// AttemptDone carries each attempt once it is recorded (State empty
	// if the lease was lost).
	AttemptDone testsignal.Signal[Result]
	// Listener are the signals of the listener that wakes the deliverer.
	Listener dbnotify.TestSignals
}

// Init arms every signal for t.
func (ts *DelivererTestSignals) Init(t testsignal.TB) {
	ts.PassDone.Init(t)
	ts.AttemptDone.Init(t)
	ts.Listener.Init(t)
}

// NewDeliverer validates cfg, fills its defaults and returns a Deliverer.
func NewDeliverer(pool *pgxpool.Pool, cfg DelivererConfig) (*Deliverer, error) {
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	cfg.Lease = cmp.Or(cfg.Lease, LeaseDefault)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, RetryBaseDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, RetryMaxDefault)
	cfg.GiveUpAfter = cmp.Or(cfg.GiveUpAfter, GiveUpAfterDefault)
	cfg.Parallelism = cmp.Or(cfg.Parallelism, ParallelismDefault)
	cfg.PerEndpoint = cmp.Or(cfg.PerEndpoint, PerEndpointDefault)
	cfg.PerHost = cmp.Or(cfg.PerHost, max(1, cfg.Parallelism/2))
	cfg.Retention = cmp.Or(cfg.Retention, events.RetentionDefault)
	cfg.MaintenanceInterval = cmp.Or(cfg.MaintenanceInterval, time.Minute)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Meter == nil {
		cfg.Meter = noop.NewMeterProvider().Meter("")
	}
	if cfg.Lease < cfg.Timeout+5*time.Second {
		return nil, fmt.Errorf("webhooks: lease %s must exceed the attempt timeout %s by 5s", cfg.Lease, cfg.Timeout)
	}
	if cfg.Retention <= cfg.GiveUpAfter {
		return nil, fmt.Errorf("webhooks: EVENTS_RETENTION %s must exceed the 3 days deliveries are retried (%s)", cfg.Retention, cfg.GiveUpAfter)
	}
	if cfg.Parallelism < 1 || cfg.PerEndpoint < 1 || cfg.PerHost < 1 || cfg.RetryMax < cfg.RetryBase {
		return nil, errors.New("webhooks: parallelism, per-endpoint and per-host limits and retry schedule must be positive and ordered")
	}
	m, err := newInstruments(cfg.Meter)
	if err != nil {
		return nil, err
	}
	client := cfg.Client
	if client == nil {
		client = NewClient(cfg.Timeout, NewGuard(cfg.AllowPrivate))
	}
	d := &Deliverer{cfg: cfg, pool: pool, client: client, log: cfg.Logger, m: m, load: newLoad(), names: tenants.NewNameCache(pool),
		caps: caps{parallelism: cfg.Parallelism, perHost: cfg.PerHost, perEndpoint: cfg.PerEndpoint}}
	d.candidatesSQL = withLimits(candidatesSQL, d.caps)
	if d.maintenance, err = newMaintenance(d); err != nil {
		return nil, err
	}
	return d, nil
}

// Run delivers until ctx ends, then waits for the attempts in flight
// (each bounded by Timeout) and returns nil. The events tables' partition
// maintenance runs beside it (maintain.go).
func (d *Deliverer) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	if err := d.maintenance.Start(ctx); err != nil {
		return err
	}
	defer d.maintenance.Stop()
	stopListening, err := d.listen(ctx, wake)
	if err != nil {
		return err
	}
	defer stopListening()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			d.backlog(ctx)
		case <-wake:
		}
		started, err := d.RunOnce(ctx, &wg, wake)
		if err != nil && !errors.Is(err, context.Canceled) {
			if dbstate.Unavailable(err) {
				d.log.WarnContext(ctx, "webhook pass: database unavailable, retrying next pass", "error", err.Error())
			} else {
				d.log.ErrorContext(ctx, "webhook pass failed", "error", err.Error())
			}
		}
		d.TestSignals.PassDone.Signal(started)
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(d.cfg.Interval)
	}
}

// listen wakes the loop on every committed event: through LISTEN on a
// connection of its own (Listen), or by a scan every PollInterval without
// one (package dbnotify). Either way, each time it starts hearing again
// (after a lost connection) it wakes the loop once, for what it missed. A
// lost notification costs at most one Interval.
func (d *Deliverer) listen(ctx context.Context, wake chan<- struct{}) (stop func(), err error) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	l, err := dbnotify.New(dbnotify.Config{
		Name:         "webhook wake-ups",
		Channel:      events.NotifyChannel,
		Connect:      d.cfg.Listen,
		PollInterval: d.cfg.PollInterval,
		OnNotify:     func(string) { signal() },
		OnHearing:    signal,
		Logger:       d.log,
	})
	if err != nil {
		return nil, err
	}
	l.TestSignals = d.TestSignals.Listener
	if err := l.Start(ctx); err != nil {
		return nil, err
	}
	return l.Stop, nil
}
