package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// Config configures an Engine.
type Config struct {
	// OneCommitPerPhase commits every arrow in a transaction of its own
	// instead of folding the arrows that have no foreign call between them
	// (and the first of them into the claim's transaction). The recovery
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

	ops        []resumer
	background sync.WaitGroup // releaseLater's goroutines
	hints      *keyHints
}

// resumer is a registered operation, whatever its object type.
type resumer interface {
	path() string
	resume(ctx context.Context, e *Engine, lease *idempotency.Lease) (idempotency.Response, error)
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
	return &Engine{pool: pool, keys: keys, cfg: cfg, log: log, tel: tel, hints: newKeyHints()}, nil
}

// Register makes op resumable by Resume. It panics on an operation that
// could never reach done, or on a path another operation has: both are
// programming errors found at start-up.
func Register[S any](e *Engine, op *Operation[S]) {
	if n := len(op.Arrows); n == 0 || op.Arrows[n-1].To != idempotency.PointDone || op.Load == nil {
		panic(fmt.Sprintf("phases: %s: the last arrow must reach done, and Load is required", op.Path))
	}
	for _, r := range e.ops {
		if r.path() == op.Path {
			panic(fmt.Sprintf("phases: %s registered twice", op.Path))
		}
	}
	e.ops = append(e.ops, op)
}

// ErrNoOperation: a key's request path matches no registered operation.
var ErrNoOperation = errors.New("no operation for this request path")

// Resume drives a key this worker has just taken over (the reaper) from its
// recovery point to done, through the operation its request path names.
// A key no operation claims is released, so that it is counted as stuck
// and visible rather than held.
func (e *Engine) Resume(ctx context.Context, lease *idempotency.Lease) (idempotency.Response, error) {
	for _, op := range e.ops {
		if match(op.path(), lease.Record.Request.Path) {
			return op.resume(ctx, e, lease)
		}
	}
	err := fmt.Errorf("%s %s: %w", lease.Record.Request.Method, lease.Record.Request.Path, ErrNoOperation)
	_, rerr := lease.Release(ctx, e.pool, idempotency.Because(reasonNoOperation, err), 0)
	return idempotency.Response{}, errors.Join(err, rerr)
}

// Wait waits until the leases being released in the background
// (releaseLater) are released or given up; for shutdown and tests.
func (e *Engine) Wait() { e.background.Wait() }

// Do runs one new request of op: the key of (tenantID, key) for req. It
// returns the final response (new or replayed), or an error:
// idempotency.ErrMismatch, idempotency.ErrInProgress, *idempotency.WaitError,
// idempotency.ErrUnresolved, ErrPSPUnavailable (*UnavailableError), what
// op.Admit returned, or an internal error.
func Do[S any](ctx context.Context, e *Engine, op *Operation[S], tenantID int64, key string, req idempotency.Canonical) (_ Result, err error) {
	ctx, span := e.tel.tracer.Start(ctx, op.Span, trace.WithAttributes(attrTenant.Int64(tenantID)))
	defer func() { endSpan(span, err) }()
	nameRequest(span, op.Span, key, "")
	var seen *peeked
	if day, ok := e.hints.seen(tenantID, key); ok {
		seen = e.peek(ctx, tenantID, key, day)
	}
	return do(ctx, e, op, tenantID, key, req, seen)
}

// peeked is the read of a key this process has seen (keyHints), made
// before the request's claim: the record (idempotency.Store.Peek) or why
// there was none.
type peeked struct {
	rec idempotency.Record
	err error
}

// peek reads the key in the partition of day, the day its hint knows (the
// zero time if none), or else through its heads (idempotency.PeekDay), and
// corrects the hint's day for the next retry when the day was missing or
// wrong.
func (e *Engine) peek(ctx context.Context, tenantID int64, key string, day time.Time) *peeked {
	rec, fromDay, err := e.keys.PeekDay(ctx, e.pool, tenantID, key, day)
	if err == nil && !fromDay {
		if !day.IsZero() && dayOf(rec.CreatedAt) == dayOf(day) {
			e.hints.noDay(tenantID, key)
		} else {
			e.hints.add(tenantID, key, rec.CreatedAt)
		}
	}
	return &peeked{rec: rec, err: err}
}

// do is Do inside the request's span, seen the read of a key this process
// has seen (nil for any other), made once whoever made it (Do, or DoRaw
// before it parsed the request): one request never reads its key twice
// before its claim.
func do[S any](ctx context.Context, e *Engine, op *Operation[S], tenantID int64, key string, req idempotency.Canonical, seen *peeked) (_ Result, err error) {
	// The claim, committed before any foreign call so that a duplicate gets
	// 409 at once and the reaper can see the key. Folded into its
	// transaction: the arrows before the first foreign call, whose
	// recovery point and object the new key row records itself, so they
	// need no fence of their own (the claim's commit is their commit).
	//
	// One exchange answers a new key and a retry alike: the claim, a
	// check that it created the key, and the folded arrows' writes,
	// queued in a pipelined transaction (pipeTx) that commits them
	// together. A new key commits there. An existing key fails the check
	// (idempotency.ErrKeyExists), which rolls the exchange back, and is
	// answered from the row the claim read: a replay, a mismatch, an
	// attempt not yet due or a request waiting for an operator cost that
	// one exchange; an abandoned key goes on to its takeover.
	//
	// A key this process has seen before is probably a retry: it was read
	// first (seen; see keyHints), and the read answers the final decisions
	// and the waits, which never need a lock; anything else goes on to the
	// claim. The read is a peek (not the whole row): none of these answers
	// needs more, and the claim reads the whole row again for the rest.
	if seen != nil {
		switch {
		case seen.err == nil:
			switch idempotency.Decide(seen.rec, req.Fingerprint) {
			case idempotency.Replay, idempotency.Mismatch, idempotency.NotDue, idempotency.Unresolved:
				return existing(ctx, e, op, seen.rec, req.Fingerprint)
			}
		case !errors.Is(seen.err, idempotency.ErrNotFound):
			return Result{}, fmt.Errorf("%s: %w", op.Span, seen.err)
		}
	}
	// Seen from now on, its day not known until the claim reads its row
	// (added below).
	e.hints.add(tenantID, key, time.Time{})
	claim := idempotency.ClaimParams{TenantID: tenantID, Key: key, Request: req, TraceContext: traceContext(ctx)}
	folded := op.group(0, e.cfg.OneCommitPerPhase, true)
	run := &Run[S]{}
	if op.ObjectID != nil {
		run.ObjectID = op.ObjectID(req)
	}
	nameObject(trace.SpanFromContext(ctx), run.ObjectID)
	if len(folded) > 0 {
		claim.Point = folded[len(folded)-1].To
		claim.ObjectID = run.ObjectID
	}
	var (
		q      *idempotency.QueuedClaim
		arrows []arrowRun
	)
	err = inPipeTx(ctx, e.pool, func(tx *pipeTx) error {
		q = e.keys.QueueClaim(tx, claim)
		run.Lease = q.Lease
		if op.Admit != nil {
			// Admit reads: its query goes out with the claim, in an
			// explicit transaction, so a refusal rolls the claim back.
			if err := op.Admit(ctx, tx, tenantID, req); err != nil {
				if errors.Is(tx.err, idempotency.ErrKeyExists) {
					return tx.err
				}
				return err
			}
		}
		_, err := commitArrows(ctx, e, tx, run, folded, false, false, &arrows)
		return err
	})
	if q == nil {
		// No connection (the pool could not connect): nothing was sent,
		// nothing claimed.
		return Result{}, fmt.Errorf("%s: %w", op.Span, dbstate.Wrap(err))
	}
	if errors.Is(err, idempotency.ErrKeyExists) && q.Found {
		e.hints.add(tenantID, key, q.Existing.CreatedAt)
		return existing(ctx, e, op, q.Existing, req.Fingerprint)
	}
	// The new row's day, once the claim read it (even if the commit's
	// answer was then lost: a day whose partition lacks the key only costs
	// the next retry one more read).
	e.hints.add(tenantID, key, q.Lease.Record.CreatedAt)
	e.recordArrows(ctx, q.Lease, arrows, time.Now())
	if err != nil {
		if dbstate.Unavailable(err) && !q.Lease.Record.CreatedAt.IsZero() {
			// The commit's answer was lost with the database after the
			// claim's row was read: the claim may have committed, holding
			// the key for a whole lease. (Lost before that row was read,
			// the key, if it committed, waits out its lease.)
			e.releaseLater(q.Lease, err)
		}
		return Result{}, fmt.Errorf("%s: %w", op.Span, dbstate.Wrap(err))
	}
	e.tel.countOutcome(ctx, string(OutcomeNew))
	if err := e.crash(ctx, CrashAfterClaim); err != nil {
		return Result{}, err
	}
	point := idempotency.PointStart
	switch {
	case run.response != nil:
		point = idempotency.PointDone
	case len(folded) > 0:
		point = claim.Point
	}
	resp, err := drive(ctx, e, op, run, point)
	return Result{Response: resp, Outcome: OutcomeNew}, err
}

// existing answers a request whose key was already claimed.
func existing[S any](ctx context.Context, e *Engine, op *Operation[S], rec idempotency.Record, fp idempotency.Fingerprint) (Result, error) {
	nameObject(trace.SpanFromContext(ctx), rec.ObjectID)
	// Two rounds at most: a takeover that loses the race re-reads the key
	// once, and then it is either done (replay) or someone holds it (409).
	for range 2 {
		decision := idempotency.Decide(rec, fp)
		switch decision {
		case idempotency.Mismatch:
			e.tel.countOutcome(ctx, decision.String())
			return Result{}, idempotency.ErrMismatch
		case idempotency.Replay:
			e.tel.countOutcome(ctx, decision.String())
			return Result{Response: *rec.Response, Outcome: OutcomeReplay}, nil
		case idempotency.InProgress:
			e.tel.countOutcome(ctx, decision.String())
			return Result{}, idempotency.ErrInProgress
		case idempotency.NotDue:
			e.tel.countOutcome(ctx, decision.String())
			return Result{}, &idempotency.WaitError{RetryAfter: rec.RetryAfter, ObjectID: rec.ObjectID}
		case idempotency.Unresolved:
			e.tel.countOutcome(ctx, decision.String())
			return Result{}, fmt.Errorf("key %q: %w", rec.Key, idempotency.ErrUnresolved)
		case idempotency.TakeOver:
			lease, err := e.keys.TakeOver(ctx, e.pool, rec)
			if errors.Is(err, idempotency.ErrInProgress) {
				if rec, err = e.keys.Lookup(ctx, e.pool, rec.TenantID, rec.Key); err != nil {
					return Result{}, err
				}
				continue
			}
			if err != nil {
				return Result{}, err
			}
			e.tel.countOutcome(ctx, decision.String())
			resp, err := op.resume(ctx, e, lease)
			return Result{Response: resp, Outcome: OutcomeTakeover}, err
		}
	}
	e.tel.countOutcome(ctx, idempotency.InProgress.String())
	return Result{}, idempotency.ErrInProgress
}

func (op *Operation[S]) path() string { return op.Path }

// resume drives a key just taken over from its recovery point. Its span
// links to the trace of the request that claimed the key.
func (op *Operation[S]) resume(ctx context.Context, e *Engine, lease *idempotency.Lease) (_ idempotency.Response, err error) {
	opts := append(linkTo(lease.Record.TraceContext), trace.WithAttributes(
		attrTenant.Int64(lease.Record.TenantID),
		attrRecoveryPoint.String(string(lease.Record.Point)),
		attrLockVersion.Int64(lease.Record.LockVersion)))
	ctx, span := e.tel.tracer.Start(ctx, op.ResumeSpan, opts...)
	defer func() { endSpan(span, err) }()
	nameRequest(span, op.Span, lease.Record.Key, lease.Record.ObjectID)
	span.AddEvent(EventTakeover)
	return drive(ctx, e, op, &Run[S]{Lease: lease, ObjectID: lease.Record.ObjectID}, lease.Record.Point)
}

func (e *Engine) crash(ctx context.Context, at CrashPoint) error {
	if e.cfg.CrashHook == nil {
		return nil
	}
	return e.cfg.CrashHook(ctx, at)
}
