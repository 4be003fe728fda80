package phases

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// Do runs one request of op under the key (tenantID, key). It claims the
// key, answers a key that exists, and drives a new one to Done.
//
// The body is for path, a request op serves. Do returns the final response,
// new or replayed, or an error: idempotency.ErrMismatch,
// idempotency.ErrInProgress, *idempotency.WaitError,
// idempotency.ErrUnresolved, *UnavailableError, *ParseError, what op.Admit
// returned, or an internal error.
func Do[S any](ctx context.Context, e *Engine, op *Operation[S], tenantID int64, key, path string, body Body) (_ Result, err error) {
	r, err := lookup(e, op)
	if err != nil {
		return Result{}, err
	}
	reg := &r.op
	ctx, span := e.tel.tracer.Start(ctx, reg.Name, trace.WithAttributes(attrTenant.Int64(tenantID)))
	defer func() { endSpan(span, err) }()
	nameRequest(span, reg.Name, key, "")

	// A key this process has seen is probably a retry, and is read first
	// (fastpath.go).
	req, res, answered, err := fastPath(ctx, e, reg, tenantID, key, path, body)
	if answered {
		return res, err
	}

	// The claim commits before any foreign call, so that a duplicate gets
	// 409 at once and the reaper can see the key. A derived object id that
	// an earlier incarnation of the key holds rolls it back, and the claim
	// is made again with the next incarnation's.
	var c claimed[S]
	for n := 0; ; n++ {
		c, err = claim(ctx, e, reg, tenantID, key, req, n)
		if !objectIDTaken(err, n) {
			break
		}
	}
	if err != nil {
		return Result{}, err
	}

	// A key that existed is answered from the row the claim read, or
	// taken over when its holder abandoned it.
	if c.existing != nil {
		return answer(ctx, e, reg, *c.existing, req.Fingerprint)
	}

	e.tel.countOutcome(ctx, string(OutcomeNew))
	if err := e.crash(ctx, CrashAfterClaim); err != nil {
		return Result{}, err
	}
	resp, err := drive(ctx, e, reg, c.run, c.point)
	return Result{Response: resp, Outcome: OutcomeNew}, err
}

// claimed is what a claim found or made. That is an existing key's record,
// or a new key's run and the recovery point its transaction committed.
type claimed[S any] struct {
	existing *idempotency.Record
	run      *Run[S]
	point    Point
}

// claim claims the key in one exchange that answers a new key and a retry
// alike. The exchange holds the claim, a check that it created the key,
// and the writes of the phases that commit with the claim.
//
// A new key commits there. Its row records those phases' last recovery
// point and the object, so they need no fence of their own. For a key
// that exists the check fails (idempotency.ErrKeyExists) and rolls the
// exchange back, and the record the claim read is the answer. The try n
// picks the incarnation ObjectID derives for.
func claim[S any](ctx context.Context, e *Engine, op *Operation[S], tenantID int64, key string, req Request, n int) (claimed[S], error) {
	// Seen from now on, its day not known until the claim reads its row.
	e.hints.add(tenantID, key, time.Time{})
	params := idempotency.ClaimParams{TenantID: tenantID, Key: key, Request: req, TraceContext: traceContext(ctx), Operation: op.Name}
	run := &Run[S]{}
	if op.ObjectID != nil {
		run.ObjectID = op.ObjectID(tenantID, key, req, incarnation(n))
	}
	nameObject(trace.SpanFromContext(ctx), run.ObjectID)
	withClaim := op.Phases[:op.withClaim(e.cfg.OneCommitPerPhase)]
	if len(withClaim) > 0 {
		params.Point = withClaim[len(withClaim)-1].To
		params.ObjectID = run.ObjectID
	}
	var (
		q   *idempotency.QueuedClaim
		ran []phaseRun
		end txEnd
	)
	err := e.inBatchTx(ctx, e.lanes.claims, batchKey{tenantID, key}, func(tx *Tx) error {
		q = e.keys.QueueClaim(tx, params)
		run.Lease = q.Lease
		if op.Admit != nil {
			// Admit's read goes out with the claim, in an explicit
			// transaction, so that its refusal rolls the claim back.
			if err := op.Admit(ctx, tx, tenantID, req); err != nil {
				if errors.Is(tx.p.err, idempotency.ErrKeyExists) {
					return tx.p.err
				}
				return err
			}
		}
		var err error
		end, err = commitPhases(ctx, e, tx, run, withClaim, txMode{}, &ran)
		return err
	})
	if q == nil || nothingSent(err) {
		// No connection, so nothing was sent and nothing claimed.
		return claimed[S]{}, fmt.Errorf("%s: %w", op.Name, dbstate.Wrap(err))
	}
	if errors.Is(err, idempotency.ErrKeyExists) && q.Found {
		e.hints.add(tenantID, key, q.Existing.CreatedAt)
		return claimed[S]{existing: &q.Existing}, nil
	}
	// The new row's day, once the claim read it. A day whose partition
	// lacks the key (the commit's answer lost) costs the next retry one
	// more read.
	e.hints.add(tenantID, key, q.Lease.Record.CreatedAt)
	e.recordPhases(ctx, q.Lease, ran, time.Now())
	if Committed(err) {
		// Committed, but a queued row's reading failed. The key's row and
		// the object are read again. A read that fails leaves the claim's
		// lease to release, by its token.
		e.log.WarnContext(ctx, "claim committed, but reading part of its answer failed", "key", key, "error", err.Error())
		c, rerr := reread(ctx, e, run, tenantID, key)
		if rerr != nil {
			e.releaseLostClaim(q.Lease, rerr)
		}
		return c, rerr
	}
	if err != nil {
		switch {
		case !dbstate.Unavailable(err):
		case !q.Lease.Record.CreatedAt.IsZero():
			// The commit's answer was lost with the database after the
			// claim's row was read. The claim may hold the key for a
			// whole lease though nothing runs it.
			e.releaseLater(q.Lease, err)
		default:
			// Lost before that row was read back. The same, found by the
			// token this claim wrote.
			e.releaseLostClaim(q.Lease, err)
		}
		return claimed[S]{}, fmt.Errorf("%s: %w", op.Name, dbstate.Wrap(err))
	}
	point := Start
	switch {
	case end.response != nil:
		point = Done
		run.done = end.response
	case len(withClaim) > 0:
		point = end.reached
	}
	return claimed[S]{run: run, point: point}, nil
}

// reread reads a key whose claim committed when part of the claim's answer
// could not be read.
//
// A key still this run's (lock_version 1, leased) is driven from the point
// it records, its object loaded afresh. Any other is answered like a key
// that existed.
func reread[S any](ctx context.Context, e *Engine, run *Run[S], tenantID int64, key string) (claimed[S], error) {
	rec, err := e.keys.Lookup(ctx, e.pool, tenantID, key)
	if err != nil {
		return claimed[S]{}, fmt.Errorf("claim %q committed, then: %w", key, dbstate.Wrap(err))
	}
	if rec.LockVersion != 1 || rec.State != idempotency.StateStarted || !rec.Leased {
		return claimed[S]{existing: &rec}, nil
	}
	var zero S
	run.Lease, run.Object, run.loaded, run.done = e.keys.LeaseOf(rec), zero, false, nil
	return claimed[S]{run: run, point: rec.Point}, nil
}

// answer answers a request whose key was claimed before, from its record.
//
// The answer is a replay, a mismatch, a conflict, an attempt not yet due or
// a request waiting for an operator. A key its holder abandoned is taken
// over and driven from its recovery point.
func answer[S any](ctx context.Context, e *Engine, op *Operation[S], rec idempotency.Record, fp idempotency.Fingerprint) (Result, error) {
	nameObject(trace.SpanFromContext(ctx), rec.ObjectID)
	// Two rounds at most. A takeover that loses the race reads the key
	// again, and then it is done (a replay) or someone holds it (409).
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
			if lost, ok := errors.AsType[*idempotency.LostTakeoverError](err); ok {
				// The takeover may have committed with its answer lost.
				// Its lease is given up once the database answers, rather
				// than held for a lease with nothing running it.
				e.releaseLostTakeover(rec.Key, lost)
				return Result{}, dbstate.Wrap(err)
			}
			if err != nil {
				return Result{}, err
			}
			e.tel.countOutcome(ctx, decision.String())
			resp, err := resume(ctx, e, op, lease)
			return Result{Response: resp, Outcome: OutcomeTakeover}, err
		}
	}
	e.tel.countOutcome(ctx, idempotency.InProgress.String())
	return Result{}, idempotency.ErrInProgress
}
