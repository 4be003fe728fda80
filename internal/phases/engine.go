package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Config configures an Engine.
type Config struct {
	// OneCommitPerPhase commits every phase in a transaction of its own,
	// the claim alone first. The recovery points are the same, and only
	// the commit boundaries move. For benchmarks, and for crash tests that
	// stop a run between every phase.
	OneCommitPerPhase bool
	// CrashHook, if set, is called at each crash point. If it returns an
	// error the run stops there at once, as if its process had died. What
	// committed stays, and no lease is released. For tests and the
	// chaos run (phasestest.CrashAt).
	CrashHook func(ctx context.Context, at CrashPoint) error
	// Batch configures the batching of concurrent requests' transactions
	// (batch.go). The zero value batches.
	Batch BatchConfig
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider and MeterProvider default to no-ops.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Outcome says how a request's key was handled, for logs and metrics.
type Outcome string

// The outcomes of a request that got a response.
const (
	OutcomeNew      Outcome = "new"
	OutcomeReplay   Outcome = "replay"
	OutcomeTakeover Outcome = "takeover"
)

// Result is the final response of a request, new or replayed.
type Result struct {
	Response Response
	Outcome  Outcome
}

// Engine runs operations. It is safe for concurrent use once every
// operation is registered.
type Engine struct {
	pool *pgxpool.Pool
	keys *idempotency.Store
	cfg  Config
	log  *slog.Logger
	tel  instruments

	ops        map[string]resumer // by Operation.Name
	background sync.WaitGroup     // releaseLater's goroutines
	hints      *keyHints
	lanes      lanes
	batches    *batchStats
}

// resumer is a registered operation, whatever its object type.
type resumer interface {
	resume(ctx context.Context, e *Engine, lease *idempotency.Lease) (Response, error)
}

// registered is an operation as Register checked it. Its phases are a
// copy, so that the operation cannot change under a run.
type registered[S any] struct {
	orig *Operation[S] // what lookup compares
	op   Operation[S]
}

// New returns an Engine with no operation registered.
func New(pool *pgxpool.Pool, keys *idempotency.Store, cfg Config) (*Engine, error) {
	tel, err := newInstruments(cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	stats := &batchStats{}
	return &Engine{pool: pool, keys: keys, cfg: cfg, log: log, tel: tel, hints: newKeyHints(), ops: map[string]resumer{},
		lanes: newLanes(cfg.Batch, stats), batches: stats}, nil
}

// Register makes op runnable by Do and resumable by Resume, under its Name.
// It panics on an operation that could never reach Done, or whose name is
// taken. Both are programming errors, found at start-up.
func Register[S any](e *Engine, op *Operation[S]) {
	if err := op.check(); err != nil {
		panic("phases: " + err.Error())
	}
	if _, ok := e.ops[op.Name]; ok {
		panic(fmt.Sprintf("phases: %s registered twice", op.Name))
	}
	r := &registered[S]{orig: op, op: *op}
	r.op.Phases = append([]Phase[S](nil), op.Phases...)
	e.ops[op.Name] = r
}

// lookup returns op as registered on e.
func lookup[S any](e *Engine, op *Operation[S]) (*registered[S], error) {
	r, ok := e.ops[op.Name].(*registered[S])
	if !ok || r.orig != op {
		return nil, fmt.Errorf("phases: operation %q is not registered on this engine", op.Name)
	}
	return r, nil
}

// Resume drives a key this worker has just taken over (the reaper) to
// Done, through the operation its claim recorded.
//
// A key that no registered operation runs is released, so that it is
// counted as stuck and visible rather than held.
func (e *Engine) Resume(ctx context.Context, lease *idempotency.Lease) (Response, error) {
	if op, ok := e.ops[lease.Record.Operation]; ok {
		return op.resume(ctx, e, lease)
	}
	err := fmt.Errorf("key %q (operation %q, %s %s): %w", lease.Record.Key, lease.Record.Operation,
		lease.Record.Request.Method, lease.Record.Request.Path, ErrNoOperation)
	_, rerr := lease.Release(ctx, e.pool, err, 0)
	return Response{}, errors.Join(err, rerr)
}

// Wait waits until the leases being released in the background are
// released or given up. For shutdown and tests.
func (e *Engine) Wait() { e.background.Wait() }

func (r *registered[S]) resume(ctx context.Context, e *Engine, lease *idempotency.Lease) (Response, error) {
	return resume(ctx, e, &r.op, lease)
}

// resume drives a key just taken over from its recovery point. Its span
// links to the trace of the request that claimed the key.
func resume[S any](ctx context.Context, e *Engine, op *Operation[S], lease *idempotency.Lease) (_ Response, err error) {
	opts := append(linkTo(lease.Record.TraceContext), trace.WithAttributes(
		attrTenant.Int64(lease.Record.TenantID),
		attrRecoveryPoint.String(string(lease.Record.Point)),
		attrLockVersion.Int64(lease.Record.LockVersion)))
	ctx, span := e.tel.tracer.Start(ctx, op.Name+".resume", opts...)
	defer func() { endSpan(span, err) }()
	nameRequest(span, op.Name, lease.Record.Key, lease.Record.ObjectID)
	span.AddEvent(EventTakeover)
	return drive(ctx, e, op, &Run[S]{Lease: lease, ObjectID: lease.Record.ObjectID}, lease.Record.Point)
}
