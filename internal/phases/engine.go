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
	// OneCommitPerPhase commits every arrow in a transaction of its own
	// instead of the transactions the operation declares (its WithClaim
	// arrows after the claim, each step's arrows one by one). The recovery
	// points are the same either way; only the commit boundaries move. For
	// comparison in benchmarks and for tests that crash between every arrow.
	OneCommitPerPhase bool
	// CrashHook, if set, is called at each crash point (see CrashPoint). If
	// it returns an error the run stops there at once, as if the process had
	// died: no rollback of what committed, no lease release. For tests.
	CrashHook func(ctx context.Context, at CrashPoint) error
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider and MeterProvider default to no-ops.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// CrashPoint names a moment at which a test may kill a run.
type CrashPoint string

// The crash points every operation has: after the claim's commit, and after
// a foreign call answered but before its answer committed (the
// lost-response case). Every other commit has its own: CrashAfter.
const (
	CrashAfterClaim   CrashPoint = "after_claim"
	CrashAfterPSPCall CrashPoint = "after_psp_call"
)

// CrashAfter names the crash point after the commit of the transaction
// whose first arrow reaches point.
func CrashAfter(point idempotency.RecoveryPoint) CrashPoint {
	return CrashPoint("after_" + string(point))
}

// Outcome says how a request's key was handled (for logs and metrics).
type Outcome string

// The outcomes of a request that got a response.
const (
	OutcomeNew      Outcome = "new"
	OutcomeReplay   Outcome = "replay"
	OutcomeTakeover Outcome = "takeover"
)

// Result is the final response of a request, new or replayed.
type Result struct {
	Response idempotency.Response
	Outcome  Outcome
}

// Engine runs operations. It is safe for concurrent use; register every
// operation before the first request.
type Engine struct {
	pool *pgxpool.Pool
	keys *idempotency.Store
	cfg  Config
	log  *slog.Logger
	tel  instruments

	ops        map[string]resumer // by Operation.Name
	background sync.WaitGroup     // releaseLater's goroutines
	hints      *keyHints
}

// resumer is a registered operation, whatever its object type.
type resumer interface {
	resume(ctx context.Context, e *Engine, lease *idempotency.Lease) (idempotency.Response, error)
}

// registered is an operation as Register checked and laid it out.
type registered[S any] struct {
	*Operation[S]
	steps []step[S]
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
	return &Engine{pool: pool, keys: keys, cfg: cfg, log: log, tel: tel, hints: newKeyHints(), ops: map[string]resumer{}}, nil
}

// Register makes op runnable by Do and resumable by Resume, under its
// Name. It panics on an operation that could never reach done, or whose
// name another operation has: both are programming errors found at
// start-up.
func Register[S any](e *Engine, op *Operation[S]) {
	steps, err := op.compile()
	if err != nil {
		panic("phases: " + err.Error())
	}
	if _, ok := e.ops[op.Name]; ok {
		panic(fmt.Sprintf("phases: %s registered twice", op.Name))
	}
	e.ops[op.Name] = &registered[S]{Operation: op, steps: steps}
}

// lookup returns op as registered on e.
func lookup[S any](e *Engine, op *Operation[S]) (*registered[S], error) {
	r, ok := e.ops[op.Name].(*registered[S])
	if !ok || r.Operation != op {
		return nil, fmt.Errorf("phases: operation %q is not registered on this engine", op.Name)
	}
	return r, nil
}

// ErrNoOperation: a key names no registered operation.
var ErrNoOperation = errors.New("no operation registered under the key's name")

// Resume drives a key this worker has just taken over (the reaper) from its
// recovery point to done, through the operation its claim recorded
// (idempotency.Record.Operation). A key no registered operation runs is
// released, so that it is counted as stuck and visible rather than held.
func (e *Engine) Resume(ctx context.Context, lease *idempotency.Lease) (idempotency.Response, error) {
	if op, ok := e.ops[lease.Record.Operation]; ok {
		return op.resume(ctx, e, lease)
	}
	err := fmt.Errorf("key %q (operation %q, %s %s): %w", lease.Record.Key, lease.Record.Operation,
		lease.Record.Request.Method, lease.Record.Request.Path, ErrNoOperation)
	_, rerr := lease.Release(ctx, e.pool, err, 0)
	return idempotency.Response{}, errors.Join(err, rerr)
}

// Wait waits until the leases being released in the background
// (releaseLater) are released or given up; for shutdown and tests.
func (e *Engine) Wait() { e.background.Wait() }

// resume drives a key just taken over from its recovery point. Its span
// links to the trace of the request that claimed the key.
func (r *registered[S]) resume(ctx context.Context, e *Engine, lease *idempotency.Lease) (_ idempotency.Response, err error) {
	opts := append(linkTo(lease.Record.TraceContext), trace.WithAttributes(
		attrTenant.Int64(lease.Record.TenantID),
		attrRecoveryPoint.String(string(lease.Record.Point)),
		attrLockVersion.Int64(lease.Record.LockVersion)))
	ctx, span := e.tel.tracer.Start(ctx, r.ResumeSpan, opts...)
	defer func() { endSpan(span, err) }()
	nameRequest(span, r.Name, lease.Record.Key, lease.Record.ObjectID)
	span.AddEvent(EventTakeover)
	return drive(ctx, e, r, &Run[S]{Lease: lease, ObjectID: lease.Record.ObjectID}, lease.Record.Point)
}

func (e *Engine) crash(ctx context.Context, at CrashPoint) error {
	if e.cfg.CrashHook == nil {
		return nil
	}
	if err := e.cfg.CrashHook(ctx, at); err != nil {
		return crashed{err}
	}
	return nil
}

// crashed is a CrashHook's error: the run stops where it stands, as if its
// process had died, holding whatever it holds (drive releases nothing).
type crashed struct{ err error }

func (c crashed) Error() string { return c.err.Error() }
func (c crashed) Unwrap() error { return c.err }
