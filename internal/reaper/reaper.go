package reaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/maintenance"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testsignal"
)

// Defaults of Config.
const (
	IntervalDefault    = time.Second
	RetentionDefault   = 24 * time.Hour
	BatchSizeDefault   = 20
	ParallelismDefault = 4
)

// Config configures a Reaper.
type Config struct {
	// Interval is the pause between passes. Default 1s.
	Interval time.Duration
	// Retention is how long a finished key is kept after its day's
	// partition ends before the partition may be dropped. It bounds how late
	// a client may retry and still get a replay, so it must exceed the
	// longest client retry window; it must also exceed Lease. Default 24h.
	Retention time.Duration
	// Lease is the lease duration keys are taken over with (must match the
	// API's), used here only to validate Retention.
	Lease time.Duration
	// MaintenanceInterval is the pause between two partition maintenance
	// runs of this reaper (completion runs every Interval). Default 1m.
	MaintenanceInterval time.Duration
	// MaintenanceTimeout bounds one maintenance run: a DETACH …
	// CONCURRENTLY waiting on a long transaction is cut off, left "detach
	// pending", and finished by a later run. Default 30s.
	MaintenanceTimeout time.Duration
	// Pooled says that pool goes through a transaction pooler
	// (DATABASE_POOLER=transaction): maintenance then takes its lock in
	// each of its transactions, raises no session setting, and its
	// statements run under the database's own timeouts (see
	// maintainPartitions).
	Pooled bool
	// BatchSize is the most keys one takeover statement claims; it never
	// claims more than there are idle driving slots (Parallelism), so no
	// key is held without being driven. Default 20.
	BatchSize int
	// Parallelism is how many taken-over keys are driven at once (each may
	// wait on the PSP). Default 4.
	Parallelism int
	// OverdueAfter is how long a key may be due without being picked up
	// before it counts as overdue (the stuck-keys gauge): a few passes, so
	// that a key waiting for its scheduled attempt (a PSP outage) is never
	// counted, and one the reapers fail to pick up is. Default five
	// Intervals, at least 10s.
	OverdueAfter time.Duration
	// Clock is the process clock that spaces the reaper's repeated
	// warnings (WarnRepeat); tests move it. Default time.Now. It decides
	// nothing else: leases and schedules are the database's clock's.
	Clock func() time.Time
	// Meter records the reaper's metrics; default a no-op meter.
	Meter metric.Meter
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Reaper completes abandoned keys and maintains partitions.
type Reaper struct {
	cfg  Config
	pool *pgxpool.Pool
	keys *idempotency.Store
	ops  Resumer
	log  *slog.Logger
	m    instruments

	maintenance *maintenance.Service[*MaintenanceResult]

	// overdueWarning and attentionWarning space the census's warnings;
	// names names tenants in log lines.
	overdueWarning, attentionWarning countWarning
	names                            *tenants.NameCache
	// background: releases of batch takeovers whose answer was lost
	// (releaseLost).
	background sync.WaitGroup

	// TestSignals are no-ops until a test calls their Init, before Run.
	TestSignals TestSignals
}

// TestSignals are the points of a Reaper's work a test may wait on.
type TestSignals struct {
	// PassDone carries the result of each pass of Run (nil if it failed).
	PassDone testsignal.Signal[*PassResult]
}

// Init arms every signal for t.
func (ts *TestSignals) Init(t testsignal.TB) {
	ts.PassDone.Init(t)
}

// Resumer drives a taken-over key to done through the operation its
// claim named (idempotency.Record.Operation): a *phases.Engine, or a service that owns one
// (*charges.Service). A key no operation claims comes back released, with
// phases.ErrNoOperation, so it is counted as stuck and visible, not held.
type Resumer interface {
	Resume(ctx context.Context, lease *idempotency.Lease) (idempotency.Response, error)
}

// New validates cfg, fills its defaults and returns a Reaper.
func New(pool *pgxpool.Pool, keys *idempotency.Store, ops Resumer, cfg Config) (*Reaper, error) {
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	cfg.Lease = cmp.Or(cfg.Lease, keys.Lease())
	cfg.BatchSize = cmp.Or(cfg.BatchSize, BatchSizeDefault)
	cfg.MaintenanceInterval = cmp.Or(cfg.MaintenanceInterval, time.Minute)
	cfg.MaintenanceTimeout = cmp.Or(cfg.MaintenanceTimeout, 30*time.Second)
	cfg.Parallelism = cmp.Or(cfg.Parallelism, ParallelismDefault)
	cfg.OverdueAfter = cmp.Or(cfg.OverdueAfter, max(5*cfg.Interval, 10*time.Second))
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Meter == nil {
		cfg.Meter = noop.NewMeterProvider().Meter("")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Retention <= cfg.Lease {
		return nil, fmt.Errorf("reaper: RETENTION %s must exceed LEASE %s (and every client's retry window)", cfg.Retention, cfg.Lease)
	}
	if cfg.BatchSize < 1 || cfg.Parallelism < 1 {
		return nil, fmt.Errorf("reaper: batch size and parallelism must be positive")
	}
	m, err := newInstruments(cfg.Meter)
	if err != nil {
		return nil, err
	}
	r := &Reaper{cfg: cfg, pool: pool, keys: keys, ops: ops, log: cfg.Logger, m: m, names: tenants.NewNameCache(pool)}
	r.maintenance, err = maintenance.New(pool, maintenance.Config{
		Name:     "key partition maintenance",
		LockID:   MaintenanceLockID,
		Interval: cfg.MaintenanceInterval,
		Timeout:  cfg.MaintenanceTimeout,
		Logger:   cfg.Logger,
		Pooled:   cfg.Pooled,
	}, r.maintainPartitions)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Maintenance is the reaper's partition maintenance service, which Run
// starts beside the passes (exposed for tests: its RunOnce and
// TestSignals).
func (r *Reaper) Maintenance() *maintenance.Service[*MaintenanceResult] { return r.maintenance }

// Run makes a pass at once and then every Interval until ctx ends, whatever
// a pass returns: a pass that failed (the database away) is logged and the
// next one tries again. Partition maintenance runs beside the passes
// (Maintenance). A pass under way when ctx ends finishes its current batch
// (the keys it took over are driven to done or released), then Run returns
// nil.
func (r *Reaper) Run(ctx context.Context) error {
	if err := r.maintenance.Start(ctx); err != nil {
		return err
	}
	defer r.maintenance.Stop()
	defer r.Wait()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		res, err := r.RunOnce(ctx)
		if err != nil {
			res = nil
		}
		r.TestSignals.PassDone.Signal(res)
		switch {
		case err == nil, errors.Is(err, context.Canceled):
		case dbstate.Unavailable(err):
			// A PostgreSQL restart or outage: nothing to do but try again
			// next pass; the reaper is not restarted for it.
			r.log.WarnContext(ctx, "reaper pass: database unavailable, retrying next pass", "error", err.Error())
		default:
			r.log.ErrorContext(ctx, "reaper pass failed", "error", err.Error())
		}
		t.Reset(r.cfg.Interval)
	}
}

// PassResult says what one pass did.
type PassResult struct {
	Completed int   // keys driven to done
	Failed    int   // keys released again (PSP still failing) or lost to another worker
	Stuck     int64 // keys due for longer than OverdueAfter (Census.Overdue)
	Census    idempotency.Census
}

// RunOnce makes one pass: completion, then the census of unfinished keys.
func (r *Reaper) RunOnce(ctx context.Context) (*PassResult, error) {
	res := &PassResult{}
	if err := r.complete(ctx, res); err != nil {
		return res, err
	}
	c, err := r.keys.TakeCensus(ctx, r.pool, r.cfg.OverdueAfter)
	if err != nil {
		return res, err
	}
	res.Census, res.Stuck = c, c.Overdue
	r.m.record(ctx, c)
	// Each warning when its count changes, and once a minute while it
	// lasts; the gauges carry every pass's count.
	now := r.cfg.Clock()
	switch warn, ended := r.overdueWarning.next(c.Overdue, now); {
	case warn:
		r.log.WarnContext(ctx, "due keys no reaper picked up remain", "count", c.Overdue,
			"overdue_after", r.cfg.OverdueAfter.String(), "max_attempts", c.OverdueMaxAttempts, "repeated_every", WarnRepeat.String())
	case ended:
		r.log.InfoContext(ctx, "no due key is left unpicked any more")
	}
	switch warn, ended := r.attentionWarning.next(c.NeedsAttention, now); {
	case warn:
		r.log.WarnContext(ctx, "requests need an operator (bin/api requests list --state needs_attention)", "count", c.NeedsAttention,
			"repeated_every", WarnRepeat.String())
	case ended:
		r.log.InfoContext(ctx, "no request needs an operator any more")
	}
	return res, nil
}

// complete takes over and drives abandoned keys until none is due. It takes
// over only as many keys as it has free driving slots (Parallelism): a key
// taken over is a lease, and a lease held by a key waiting in a queue is not
// heartbeated, so it would run out and a second reaper would take the key
// over and call the PSP for it again, while this one still meant to. Keys
// taken over are driven under a context that SIGTERM does not cancel: a key
// this reaper holds is finished or released, never dropped half way.
func (r *Reaper) complete(ctx context.Context, res *PassResult) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		most = min(r.cfg.BatchSize, r.cfg.Parallelism)
		// free holds one token per idle driving slot.
		free = make(chan struct{}, r.cfg.Parallelism)
	)
	for range r.cfg.Parallelism {
		free <- struct{}{}
	}
	defer wg.Wait()
	for {
		// Wait for a slot, then take every other slot idle right now.
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		n := 1
	more:
		for n < most {
			select {
			case <-free:
				n++
			default:
				break more
			}
		}
		leases, err := r.keys.TakeOverExpired(ctx, r.pool, n)
		for range n - len(leases) {
			free <- struct{}{}
		}
		if lost, ok := errors.AsType[*idempotency.LostTakeoverError](err); ok {
			r.releaseLost(lost)
		}
		if err != nil {
			return err
		}
		r.m.takeovers.Add(ctx, int64(len(leases)))
		for _, lease := range leases {
			wg.Go(func() {
				defer func() { free <- struct{}{} }()
				r.driveOne(context.WithoutCancel(ctx), lease, res, &mu)
			})
		}
		if len(leases) < n {
			return nil // nothing else is due; the keys in hand finish before the pass ends
		}
	}
}

// releaseLost gives up, in the background, the leases of a batch takeover
// whose answer was lost: it may have committed, holding keys this reaper
// does not drive, which every retry and every other reaper would otherwise
// wait out for a whole lease. The release waits for the database to answer
// and matches the batch's token, so it never ends a later holder's lease;
// it stops once those leases would have run out by themselves.
func (r *Reaper) releaseLost(lost *idempotency.LostTakeoverError) {
	r.background.Go(func() {
		switch err := idempotency.RetryUnlock(lost.Deadline(), func(ctx context.Context) error { return lost.Release(ctx, r.pool) }); {
		case err == nil:
			r.log.Info("released the keys of a takeover whose answer was lost", "cause", lost.Err.Error())
		case errors.Is(err, idempotency.ErrLeaseLost):
		default:
			r.log.Warn("could not release the keys of a takeover whose answer was lost; their leases run out by themselves",
				"error", err.Error())
		}
	})
}

// Wait waits until the leases being released in the background
// (releaseLost) are released or given up; Run waits for them before it
// returns, tests after RunOnce.
func (r *Reaper) Wait() { r.background.Wait() }

// driveOne resumes one taken-over key and counts the outcome in res. The
// takeover and the completion are logged at INFO, each with the tenant,
// the key and its object, so that an operator watching the log sees the
// reaper finish what a dead worker left (bin/api requests show TENANT KEY
// then prints the request's timeline).
func (r *Reaper) driveOne(ctx context.Context, lease *idempotency.Lease, res *PassResult, mu *sync.Mutex) {
	rec := lease.Record
	tenant := r.tenant(ctx, rec.TenantID)
	r.log.InfoContext(ctx, "reaper took over request", tenant, "key", rec.Key, "object_id", rec.ObjectID,
		"endpoint", rec.Request.Method+" "+rec.Request.Path, "recovery_point", string(rec.Point), "lock_version", rec.LockVersion)
	resp, err := r.resume(ctx, lease)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		res.Failed++
		r.m.failures.Add(ctx, 1)
		r.log.WarnContext(ctx, "could not complete key", tenant, "key", rec.Key, "object_id", rec.ObjectID,
			"recovery_point", string(rec.Point), "attempts", rec.Attempts+1, "error", err.Error())
		return
	}
	res.Completed++
	r.m.completions.Add(ctx, 1)
	r.log.InfoContext(ctx, "reaper completed request", tenant, "key", rec.Key, "object_id", rec.ObjectID,
		"response_status", resp.Status)
}

// tenant is a log line's tenant: its name, as every other line names it
// (bin/api requests show TENANT KEY takes it), or its id when the name
// cannot be read now.
func (r *Reaper) tenant(ctx context.Context, id int64) slog.Attr {
	return r.names.Attr(ctx, id)
}

// resume drives one key through the operation its claim named.
func (r *Reaper) resume(ctx context.Context, lease *idempotency.Lease) (idempotency.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*r.cfg.Lease)
	defer cancel()
	return r.ops.Resume(ctx, lease)
}

type instruments struct {
	takeovers, completions, failures     metric.Int64Counter
	partitionsCreated, partitionsDropped metric.Int64Counter
	stuck, daysAhead                     metric.Int64Gauge
	unfinished, needsAttention           metric.Int64Gauge
}

// Values of the phasepay.schedule attribute of phasepay.idempotency.unfinished_keys.
var (
	scheduleInFlight = metric.WithAttributes(attribute.String("phasepay.schedule", "in_flight"))
	scheduleWaiting  = metric.WithAttributes(attribute.String("phasepay.schedule", "waiting"))
	scheduleOverdue  = metric.WithAttributes(attribute.String("phasepay.schedule", "overdue"))
)

// record sets the gauges of one census.
func (in instruments) record(ctx context.Context, c idempotency.Census) {
	in.stuck.Record(ctx, c.Overdue)
	in.unfinished.Record(ctx, c.InFlight, scheduleInFlight)
	in.unfinished.Record(ctx, c.Waiting, scheduleWaiting)
	in.unfinished.Record(ctx, c.Overdue, scheduleOverdue)
	in.needsAttention.Record(ctx, c.NeedsAttention)
}

func newInstruments(m metric.Meter) (instruments, error) {
	var (
		in   instruments
		errs []error
	)
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	in.takeovers = counter("phasepay.reaper.takeovers", "Abandoned keys the reaper took over.")
	in.completions = counter("phasepay.reaper.completions", "Taken-over keys the reaper drove to done.")
	in.failures = counter("phasepay.reaper.failures", "Taken-over keys the reaper could not finish (released for a later pass).")
	in.partitionsCreated = counter("phasepay.partitions.created", "Daily key partitions created ahead.")
	in.partitionsDropped = counter("phasepay.partitions.dropped", "Daily key partitions dropped past retention.")
	g, err := m.Int64Gauge("phasepay.idempotency.stuck_keys",
		metric.WithDescription("Started keys due (lease run out, next attempt due) for longer than a few reaper passes and not picked up. "+
			"Keys waiting for their scheduled attempt (a PSP outage) are not counted. Alarm if it stays above zero."))
	errs = append(errs, err)
	in.stuck = g
	g, err = m.Int64Gauge("phasepay.idempotency.unfinished_keys",
		metric.WithDescription("Started keys by phasepay.schedule: in_flight (lease held), waiting (for the next scheduled attempt: "+
			"a PSP outage raises it), overdue (due and not picked up: the stuck keys)."))
	errs = append(errs, err)
	in.unfinished = g
	g, err = m.Int64Gauge("phasepay.idempotency.needs_attention_keys",
		metric.WithDescription("Requests given up after GIVE_UP_AFTER: no automatic attempt until an operator retries or resolves them."))
	errs = append(errs, err)
	in.needsAttention = g
	// Counters appear on /metrics only once written; start them at zero so
	// that dashboards and alerts see a series from the first scrape.
	for _, c := range []metric.Int64Counter{in.takeovers, in.completions, in.failures, in.partitionsCreated, in.partitionsDropped} {
		if c != nil {
			c.Add(context.Background(), 0)
		}
	}
	g, err = m.Int64Gauge("phasepay.partitions.days_ahead",
		metric.WithDescription("Days of key partitions that exist from today (UTC) on, today included. Alarm below 2."))
	errs = append(errs, err)
	in.daysAhead = g
	return in, errors.Join(errs...)
}
