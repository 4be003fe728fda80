package phases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// next returns the index of the arrow that leaves point.
func (op *Operation[S]) next(point idempotency.RecoveryPoint) (int, bool) {
	if point == idempotency.PointStart {
		return 0, true
	}
	for i, a := range op.Arrows {
		if a.To == point {
			return i + 1, i+1 < len(op.Arrows)
		}
	}
	return 0, false
}

// group returns the arrows from Arrows[i] that commit in one transaction:
// Arrows[i] and those after it up to the next foreign call, or Arrows[i]
// alone when every arrow commits on its own. For the claim's transaction
// (claim), no arrow with a call: the call must come after the claim commits.
func (op *Operation[S]) group(i int, oneCommit, claim bool) []Arrow[S] {
	if claim && (oneCommit || op.Arrows[0].Call != nil) {
		return nil
	}
	j := i + 1
	for !oneCommit && j < len(op.Arrows) && op.Arrows[j].Call == nil {
		j++
	}
	return op.Arrows[i:j]
}

// drive advances a leased request from point to done, one transaction per
// group of arrows.
//
// If the lease is lost on the way (a worker that stalled past its lease and
// was taken over), drive answers only with what the key stores: the new
// holder's response once it is done, else ErrInProgress. It never answers
// from its own rolled-back work.
func drive[S any](ctx context.Context, e *Engine, op *Operation[S], run *Run[S], point idempotency.RecoveryPoint) (idempotency.Response, error) {
	lease := run.Lease
	for point != idempotency.PointDone {
		i, ok := op.next(point)
		if !ok {
			return idempotency.Response{}, fmt.Errorf("resume %q: unknown recovery point %q", lease.Record.Key, point)
		}
		err := step(ctx, e, op, run, i, &point)
		switch {
		case errors.Is(err, idempotency.ErrLeaseLost):
			return e.afterLeaseLost(ctx, lease)
		case errors.As(err, new(released)):
			return idempotency.Response{}, err.(released).err
		case err != nil && dbstate.Unavailable(err):
			// The database went away mid-run (after the PSP answered,
			// say): the key stays at its last committed recovery point,
			// and is released once the database is back, so that the
			// client's retry resumes it then, not a lease later.
			e.releaseLater(lease, err)
			return idempotency.Response{}, dbstate.Wrap(err)
		case err != nil:
			return idempotency.Response{}, err
		}
	}
	if run.response == nil {
		return idempotency.Response{}, fmt.Errorf("resume %q: done without an answer", lease.Record.Key)
	}
	return *run.response, nil
}

// released is the end of a run at its recovery point with the lease
// released (busy or unknown outcome): err is its answer, whatever it wraps
// (a lost lease included: the release found it gone, nothing was written).
type released struct{ err error }

func (r released) Error() string { return r.err.Error() }

// step runs the group of arrows from Arrows[i]: the foreign call of the
// first, if it has one, then their commits in one transaction. It moves
// *point to what committed.
func step[S any](ctx context.Context, e *Engine, op *Operation[S], run *Run[S], i int, point *idempotency.RecoveryPoint) error {
	group := op.group(i, e.cfg.OneCommitPerPhase, false)
	if first := group[0]; first.Call != nil {
		// The foreign call. What happens next is decided by the answer's
		// class alone (psp.Classify), the same whether the api or the
		// reaper drives the key:
		//   success, final failure → committed by the arrow
		//   busy, unknown          → released, next attempt on the schedule
		// An object made in this very run cannot have reached the PSP
		// yet; any other is looked up by reference before anything is sent
		// (the PSP may have acted on a request whose answer was lost, and
		// may have forgotten its key since).
		run.Fresh = run.loaded
		if !run.loaded {
			obj, err := op.Load(ctx, e.pool, run.Lease)
			if err != nil {
				return err
			}
			run.Object, run.loaded = obj, true
		}
		out, err := e.call(ctx, run.Lease, func(ctx context.Context) (psp.Outcome, error) { return first.Call(ctx, run) })
		if out.Class == psp.ClassBusy || out.Class == psp.ClassUnknown {
			return released{e.release(ctx, run.Lease, cmp.Or(run.ObjectID, run.Lease.Record.ObjectID),
				withReason(pspReason(out, err), err), out.RetryAfter)}
		}
		if err := e.crash(ctx, CrashAfterPSPCall); err != nil {
			return err
		}
		run.Outcome = out
	}
	from := *point
	reached, err := commitTx(ctx, e, op, run, group, from)
	if err != nil {
		return err
	}
	*point = reached
	if run.again {
		// Committed at the same point (Run.Again): round the arrow again.
		run.again = false
		return e.crash(ctx, CrashAfter(from))
	}
	if group[0].To == idempotency.PointDone {
		return nil
	}
	return e.crash(ctx, CrashAfter(group[0].To))
}

// commitTx commits group in a transaction of its own, loading the run's
// object in it first if the run has none in hand. The transaction is
// pipelined (pipeTx): a run that has its object in hand sends the fence,
// the arrows' writes, Finish and the commit in one exchange, or in as many
// as the arrows' reads need.
func commitTx[S any](ctx context.Context, e *Engine, op *Operation[S], run *Run[S], group []Arrow[S], from idempotency.RecoveryPoint) (reached idempotency.RecoveryPoint, err error) {
	err = inPipeTx(ctx, e.pool, func(tx *pipeTx) error {
		first := group[0].To == op.Arrows[0].To
		if first && run.ObjectID == "" && op.ObjectID != nil {
			// A one-commit claim recorded no object: the first arrow names it.
			run.ObjectID = op.ObjectID(run.Request())
		}
		if !run.loaded && !first {
			obj, err := op.Load(ctx, tx, run.Lease)
			if err != nil {
				return err
			}
			run.Object, run.loaded = obj, true
		}
		reached, err = commitArrows(ctx, e, tx, run, group, true, first, nil)
		if err == nil && run.again {
			// Run.Again: the key stays where it was, fenced all the same
			// (an Advance to the group's last point may have run first).
			if group[0].Call == nil {
				return fmt.Errorf("key %q: Again from an arrow without a call", run.Lease.Record.Key)
			}
			reached, err = from, run.Lease.Advance(ctx, tx, from)
		}
		return err
	})
	return reached, err
}

// commitArrows writes group's arrows inside tx. fence makes the first
// arrow record the group's last recovery point with Lease.Advance before
// any effect, and setObject records the key's object too; the claim's
// transaction passes false for both, its new key row recording them
// itself. A group that reaches done needs no Advance: Lease.Finish, in the
// same transaction, is fenced, and nothing commits unless it matches.
//
// later, if set, collects the arrows' runs instead of recording their spans
// and metrics now (the claim's transaction, see arrowRun).
func commitArrows[S any](ctx context.Context, e *Engine, tx pgx.Tx, run *Run[S], group []Arrow[S], fence, setObject bool, later *[]arrowRun) (idempotency.RecoveryPoint, error) {
	if len(group) == 0 {
		return "", nil
	}
	lease := run.Lease
	last := group[len(group)-1].To
	traced := func(to idempotency.RecoveryPoint, fn func(context.Context) error) error {
		if later == nil {
			return e.arrow(ctx, lease, to, fn)
		}
		r := arrowRun{to: to, start: time.Now()}
		r.err = fn(ctx)
		*later = append(*later, r)
		return r.err
	}
	for k, a := range group {
		err := traced(a.To, func(ctx context.Context) error {
			if k == 0 && fence && last != idempotency.PointDone {
				if err := lease.Advance(ctx, tx, last); err != nil {
					return err
				}
			}
			if k == 0 && setObject {
				if err := lease.SetObject(ctx, tx, run.ObjectID); err != nil {
					return err
				}
			}
			if err := a.Commit(ctx, tx, run); err != nil {
				return err
			}
			run.loaded = true
			switch {
			case run.again:
				return nil
			case run.response != nil:
				return lease.Finish(ctx, tx, *run.response)
			case a.To == idempotency.PointDone:
				return fmt.Errorf("key %q: the arrow to done gave no answer", lease.Record.Key)
			}
			return nil
		})
		if err != nil {
			run.response, run.again = nil, false
			return "", err
		}
		if run.again {
			return "", nil // commitTx fences the point the run stays at
		}
		if run.response != nil {
			return idempotency.PointDone, nil
		}
	}
	return last, nil
}

// call makes an arrow's foreign call. A heartbeat keeps the lease while the
// call is slow, and is stopped before this returns, so that it can never
// renew a lease the caller then releases. The call is noted for the
// request's timeline, written with the holder's next statement.
func (e *Engine) call(ctx context.Context, lease *idempotency.Lease, fn func(context.Context) (psp.Outcome, error)) (psp.Outcome, error) {
	hbCtx, stop := context.WithCancel(ctx)
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		lease.Heartbeat(hbCtx, e.pool, func(error) {})
	}()
	defer func() { stop(); <-beat }()
	start := time.Now()
	out, err := fn(ctx)
	e.recordPSP(ctx, start, out)
	notePSPCall(lease, out, time.Since(start))
	return out, err
}

// release ends an attempt whose PSP outcome is unknown (or busy) at its
// recovery point: the lease is given up and the next attempt scheduled, no
// sooner than notBefore (a busy PSP's Retry-After), or the key is handed to
// an operator once it is past GIVE_UP_AFTER. It runs even if the request's
// context ended: a lease left held would make every retry wait out the
// lease.
func (e *Engine) release(ctx context.Context, lease *idempotency.Lease, objectID string, cause error, notBefore time.Duration) error {
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rel, err := lease.Release(relCtx, e.pool, cause, notBefore)
	if err != nil && !errors.Is(err, idempotency.ErrLeaseLost) {
		if dbstate.Unavailable(err) {
			e.releaseLater(lease, cause)
		}
		return errors.Join(cause, err)
	}
	if rel.NeedsAttention {
		return fmt.Errorf("%w: %w", idempotency.ErrUnresolved, cause)
	}
	if errors.Is(cause, psp.ErrUnavailable) || errors.Is(cause, psp.ErrBusy) {
		return &UnavailableError{ObjectID: objectID, RetryAfter: rel.RetryAfter, Cause: cause}
	}
	return cause
}

// releaseLater releases the lease of a run the database failed under, once
// the database answers again, retrying in the background with a growing
// pause. It gives up when the lease would have run out by itself anyway, or
// when the release finds the lease gone (the run's last commit did land,
// or someone took the key over). The key stays at its last committed
// recovery point: the PSP's answer, if one was lost with the database, is
// found again by the lookup by reference that precedes any resend under the
// same PSP key. Wait waits for these to end.
func (e *Engine) releaseLater(lease *idempotency.Lease, cause error) {
	giveUp := time.Now().Add(e.keys.Lease())
	cause = withReason(reasonDatabaseUnavailable, cause)
	e.background.Go(func() {
		pause := 100 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := lease.Release(ctx, e.pool, cause, 0)
			cancel()
			switch {
			case err == nil:
				e.log.Info("released the lease of a run the database failed under", "key", lease.Record.Key)
				return
			case errors.Is(err, idempotency.ErrLeaseLost):
				return
			case !dbstate.Unavailable(err) || time.Now().Add(pause).After(giveUp):
				e.log.Warn("could not release the lease of a run the database failed under; it runs out by itself",
					"key", lease.Record.Key, "error", err.Error())
				return
			}
			time.Sleep(pause)
			pause = min(2*pause, 2*time.Second)
		}
	})
}

// afterLeaseLost answers a run whose lease was taken over: with the key's
// stored response if the new holder finished, else ErrInProgress.
func (e *Engine) afterLeaseLost(ctx context.Context, lease *idempotency.Lease) (idempotency.Response, error) {
	rec, err := e.keys.Lookup(ctx, e.pool, lease.Record.TenantID, lease.Record.Key)
	if err != nil {
		return idempotency.Response{}, err
	}
	e.tel.countOutcome(ctx, "lease_lost")
	e.log.WarnContext(ctx, "lease lost to a takeover", "key", lease.Record.Key, "lock_version", lease.Record.LockVersion,
		"now_lock_version", rec.LockVersion)
	if rec.State == idempotency.StateDone && rec.CreatedAt.Equal(lease.Record.CreatedAt) {
		return *rec.Response, nil
	}
	return idempotency.Response{}, fmt.Errorf("key %q: %w", lease.Record.Key, idempotency.ErrInProgress)
}
