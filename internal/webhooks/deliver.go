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
	PerEndpointDefault = 2
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
	// Parallelism is how many attempts this deliverer makes at once; no
	// endpoint ever has more than PerEndpoint of them, so a slow or dead
	// endpoint holds at most PerEndpoint slots and delays no other
	// endpoint. Defaults 16 and 2.
	Parallelism, PerEndpoint int
	// AllowPrivate (WEBHOOK_ALLOW_PRIVATE=1) lets deliveries connect to
	// loopback, private and link-local addresses. Development only.
	AllowPrivate bool
	// Meter records the deliverer's metrics; default a no-op meter.
	Meter metric.Meter
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Client, if set, replaces the HTTP client (tests only); it must keep
	// the guard of DialControl unless AllowPrivate.
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

	mu       sync.Mutex
	inflight map[string]int // endpoint id → attempts in flight
	running  int

	maintenance *maintenance.Service[EventsMaintenance]
	// TestAttemptDone, if set, is called after each attempt is recorded
	// (tests only).
	TestAttemptDone func(Result)
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
	if cfg.Parallelism < 1 || cfg.PerEndpoint < 1 || cfg.RetryMax < cfg.RetryBase {
		return nil, errors.New("webhooks: parallelism, per-endpoint limit and retry schedule must be positive and ordered")
	}
	m, err := newInstruments(cfg.Meter)
	if err != nil {
		return nil, err
	}
	client := cfg.Client
	if client == nil {
		client = NewClient(cfg.Timeout, cfg.AllowPrivate)
	}
	d := &Deliverer{cfg: cfg, pool: pool, client: client, log: cfg.Logger, m: m, inflight: map[string]int{}}
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
		if _, err := d.RunOnce(ctx, &wg, wake); err != nil && !errors.Is(err, context.Canceled) {
			if dbstate.Unavailable(err) {
				d.log.WarnContext(ctx, "webhook pass: database unavailable, retrying next pass", "error", err.Error())
			} else {
				d.log.ErrorContext(ctx, "webhook pass failed", "error", err.Error())
			}
		}
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
	if err := l.Start(ctx); err != nil {
		return nil, err
	}
	return l.Stop, nil
}

// claimSQL takes up to $1 due deliveries, oldest due first, skipping rows
// another deliverer holds (SKIP LOCKED, and the lease re-checked against
// the row's latest version) and the endpoints this deliverer already
// sends PerEndpoint attempts to ($3). lock_version + 1 is the new holder's
// fencing token; the lease covers one attempt and its record.
const claimSQL = `
WITH due AS (
    SELECT tenant_id, event_id, endpoint_id, event_created_at
      FROM webhook_deliveries
     WHERE state = 'pending'
       AND ` + dueAtExpr + ` <= phasepay_now()
       AND NOT (endpoint_id = ANY ($3::text[]))
     ORDER BY ` + dueAtExpr + `
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
   SET lock_version = d.lock_version + 1,
       locked_until = phasepay_now() + $2 * interval '1 microsecond'
  FROM due, events e, webhook_endpoints w
 WHERE d.tenant_id = due.tenant_id AND d.event_id = due.event_id AND d.endpoint_id = due.endpoint_id
   AND d.event_created_at = due.event_created_at
   AND e.tenant_id = d.tenant_id AND e.id = d.event_id AND e.created_at = d.event_created_at
   AND w.tenant_id = d.tenant_id AND w.id = d.endpoint_id
RETURNING d.tenant_id, d.event_id, d.event_created_at, d.endpoint_id, d.lock_version, d.attempts,
          e.body, w.url, w.secret`

// dueAtExpr is when a pending delivery may be taken: its next attempt due
// and no live lease. Spelled as the index webhook_deliveries_due.
const dueAtExpr = `greatest(next_attempt_at, coalesce(locked_until, '-infinity'::timestamptz))`

type delivery struct {
	TenantID       int64
	EventID        string
	EventCreatedAt time.Time
	EndpointID     string
	LockVersion    int64
	Attempts       int
	Body           []byte
	URL, Secret    string
}

// RunOnce takes as many due deliveries as there are free slots and starts
// their attempts (in wg); it returns how many it started. Each attempt
// signals wake when it ends, so a freed slot is filled at once.
func (d *Deliverer) RunOnce(ctx context.Context, wg *sync.WaitGroup, wake chan<- struct{}) (int, error) {
	started := 0
	for {
		d.mu.Lock()
		free := d.cfg.Parallelism - d.running
		saturated := []string{}
		for id, n := range d.inflight {
			if n >= d.cfg.PerEndpoint {
				saturated = append(saturated, id)
			}
		}
		d.mu.Unlock()
		if free <= 0 {
			return started, nil
		}
		rows, err := d.pool.Query(ctx, claimSQL, free, d.cfg.Lease.Microseconds(), saturated)
		if err != nil {
			return started, fmt.Errorf("claim deliveries: %w", err)
		}
		claimed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[delivery])
		if err != nil {
			return started, fmt.Errorf("claim deliveries: %w", err)
		}
		for _, dl := range claimed {
			d.mu.Lock()
			over := d.inflight[dl.EndpointID] >= d.cfg.PerEndpoint
			if !over {
				d.inflight[dl.EndpointID]++
				d.running++
			}
			d.mu.Unlock()
			if over {
				// One batch took more of an endpoint's deliveries than
				// its slots: hand the extra back, as it was.
				if _, err := d.pool.Exec(ctx, unclaimSQL, dl.TenantID, dl.EventID, dl.EndpointID, dl.EventCreatedAt, dl.LockVersion); err != nil {
					d.log.WarnContext(ctx, "could not hand back a delivery (its lease will run out)", "error", err.Error())
				}
				continue
			}
			started++
			wg.Go(func() {
				defer func() {
					d.mu.Lock()
					if d.inflight[dl.EndpointID]--; d.inflight[dl.EndpointID] == 0 {
						delete(d.inflight, dl.EndpointID)
					}
					d.running--
					d.mu.Unlock()
					select {
					case wake <- struct{}{}:
					default:
					}
				}()
				// An attempt under way finishes and is recorded even at
				// shutdown: it is bounded by Timeout.
				d.attempt(context.WithoutCancel(ctx), dl)
			})
		}
		if len(claimed) < free {
			return started, nil
		}
	}
}

// unclaimSQL gives back a delivery taken but not attempted.
const unclaimSQL = `
UPDATE webhook_deliveries SET locked_until = NULL
 WHERE tenant_id = $1 AND event_id = $2 AND endpoint_id = $3 AND event_created_at = $4 AND lock_version = $5`
