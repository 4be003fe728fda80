package phases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// drive advances a leased request from point to Done, one transaction at a
// time. A run whose lease was taken over answers only with what the key
// stores, never from its own rolled-back work.
//
// A run never returns holding its lease. A busy or unknown outcome releases
// it on the retry schedule, and a database that failed under the run
// releases it once it answers. Any other failure releases it counting an
// attempt, so that GIVE_UP_AFTER ends the retries (pitfall E5 "A request
// that loops for ever"). Only a test's crash stops a run where it stands.
func drive[S any](ctx context.Context, e *Engine, op *Operation[S], run *Run[S], point Point) (Response, error) {
	lease := run.Lease
	for point != Done {
		var err error
		if i, ok := op.after(point); ok {
			err = advance(ctx, e, op, run, i, &point)
		} else {
			err = fmt.Errorf("resume %q: unknown recovery point %q", lease.Record.Key, point)
		}
		switch {
		case err == nil:
		case errors.Is(err, idempotency.ErrLeaseLost):
			return e.afterLeaseLost(ctx, lease)
		case errors.As(err, new(released)):
			return Response{}, err.(released).err
		case errors.As(err, new(crashed)):
			return Response{}, err
		case dbstate.Unavailable(err):
			// The database went away mid-run. The key stays at its last
			// committed point, released once the database is back. The
			// client's retry resumes it then, not a lease later.
			e.releaseLater(lease, err)
			return Response{}, dbstate.Wrap(err)
		default:
			// Ours to fix. The attempt is counted and its error kept in
			// last_error_detail. Whoever drove the key logs it.
			return Response{}, e.release(ctx, lease, cmp.Or(run.ObjectID, lease.Record.ObjectID), err, 0)
		}
	}
	if run.done == nil {
		return Response{}, fmt.Errorf("resume %q: done without an answer", lease.Record.Key)
	}
	return *run.done, nil
}

// released ends a run at its recovery point with the lease released, after
// a busy or unknown outcome. err is its answer.
type released struct{ err error }

func (r released) Error() string { return r.err.Error() }

// advance runs the transaction that starts at phase i, after its call if
// it has one, and moves *point to what committed.
func advance[S any](ctx context.Context, e *Engine, op *Operation[S], run *Run[S], i int, point *Point) error {
	group := op.Phases[i:op.span(i, e.cfg.OneCommitPerPhase)]
	mode := txMode{fenced: true, first: i == 0}
	if c := group[0].Call; c != nil {
		out, err := call(ctx, e, op, run, c)
		if err != nil {
			return err
		}
		mode.afterCall, mode.renew = true, out.Renew
	}
	from := *point
	end, err := commitTx(ctx, e, op, run, group, from, mode)
	if err != nil {
		return err
	}
	switch {
	case end.again:
		return e.crash(ctx, CrashAfter(from))
	case end.response != nil:
		*point, run.done = Done, end.response
	default:
		*point = end.reached
	}
	if group[0].To == Done {
		return nil
	}
	return e.crash(ctx, CrashAfter(group[0].To))
}

// call makes a phase's foreign call. The answer's class alone decides what
// happens next, whoever drives the key:
//
//	Success, Final, Unknown with Renew → committed by the phase
//	Busy, Unknown                      → released, next attempt on the schedule
//
// The error of a call that is committed is not the run's. Its class says
// what happened.
func call[S any](ctx context.Context, e *Engine, op *Operation[S], run *Run[S], fn func(context.Context, *Run[S]) (CallOutcome, error)) (CallOutcome, error) {
	// An object this run committed cannot have reached the service yet.
	// Any other may have, with its answer lost, so the call looks first.
	run.Fresh = run.loaded
	if !run.loaded {
		if err := load(ctx, e, op, run); err != nil {
			return CallOutcome{}, err
		}
	}
	out, err := e.call(ctx, run.Lease, func(ctx context.Context) (CallOutcome, error) { return fn(ctx, run) })
	if errors.Is(err, idempotency.ErrLeaseLost) {
		// The heartbeat found the lease taken over and stopped the call.
		// Its answer is the new holder's to find out, not this run's to
		// record.
		return out, err
	}
	if out.Class == Busy || out.Class == Unknown && !out.Renew {
		return out, released{e.release(ctx, run.Lease, cmp.Or(run.ObjectID, run.Lease.Record.ObjectID), err, out.RetryAfter)}
	}
	if err := e.crash(ctx, CrashAfterCall); err != nil {
		return out, err
	}
	return out, nil
}

// load reads the run's object with op.Load, outside any transaction.
func load[S any](ctx context.Context, e *Engine, op *Operation[S], run *Run[S]) error {
	return inReadTx(ctx, e.pool, func(tx *Tx) error {
		obj, err := op.Load(ctx, tx, run)
		if err != nil {
			return err
		}
		run.Object, run.loaded = obj, true
		return nil
	})
}

// holds reports whether the run holds an object, anything but its type's
// zero value.
//
// A run that holds none loads it before its next call. So a phase that
// forgot to set it costs a read, not a call made blind (pitfall E4 "A
// call made with an object nobody loaded").
func holds[S any](run *Run[S]) bool {
	return !reflect.ValueOf(&run.Object).Elem().IsZero()
}

// txEnd is how a transaction's phases ended. They reached a point, stored
// a response (the key is done), or go round the call again.
type txEnd struct {
	reached  Point
	response *Response
	again    bool
}

// txMode says how a transaction's phases are written. The zero txMode is
// the claim's transaction. Its new key row records the point and the
// object, so the phases write no fence of their own.
type txMode struct {
	// With fenced, the first phase records the transaction's last
	// recovery point (Lease.Advance), fenced, before any effect.
	fenced bool
	// With first, the phases start at the operation's first. The key's
	// object is recorded too.
	first bool
	// With afterCall, the first phase follows a foreign call and may
	// return Again. With renew, it must.
	afterCall, renew bool
}

// commitTx commits phases in a transaction of their own, loading the run's
// object in it first if the run holds none.
//
// A claim that committed alone recorded no object, so the first phase
// names it. An id an earlier incarnation of the key holds makes it name
// the next incarnation's (ErrObjectIDTaken).
func commitTx[S any](ctx context.Context, e *Engine, op *Operation[S], run *Run[S], phases []Phase[S], from Point, mode txMode) (end txEnd, err error) {
	derive := mode.first && run.ObjectID == "" && op.ObjectID != nil
	for n := 0; ; n++ {
		if derive {
			id := run.Lease.Record.ID()
			run.ObjectID = op.ObjectID(id.TenantID, id.Key, run.Request(), incarnation(n))
		}
		end, err = commitOnce(ctx, e, op, run, phases, from, mode)
		if !derive || !objectIDTaken(err, n) {
			return end, err
		}
	}
}

// objectIDTaken reports whether the n-th try failed on ErrObjectIDTaken
// and another is due.
func objectIDTaken(err error, n int) bool {
	return errors.Is(err, ErrObjectIDTaken) && n < ObjectIDAttempts
}

// commitOnce is one try of commitTx.
func commitOnce[S any](ctx context.Context, e *Engine, op *Operation[S], run *Run[S], phases []Phase[S], from Point, mode txMode) (end txEnd, err error) {
	err = e.inBatchTx(ctx, e.lanes.commits, keyOf(run.Lease), func(tx *Tx) error {
		if !run.loaded && !mode.first {
			obj, err := op.Load(ctx, tx, run)
			if err != nil {
				return err
			}
			run.Object, run.loaded = obj, true
		}
		var err error
		if end, err = commitPhases(ctx, e, tx, run, phases, mode, nil); err != nil {
			return err
		}
		if end.again {
			// The key stays where it was, fenced all the same (an Advance
			// went first). Its timeline gains what the phase noted, not a
			// second "reached" of the point it never left.
			return run.Lease.Stay(ctx, tx, from)
		}
		return nil
	})
	if Committed(err) {
		// What committed stands. What a queued row was to fill in of the
		// object is read again before it is used.
		e.log.WarnContext(ctx, "transaction committed, but reading part of its answer failed",
			"key", run.Lease.Record.Key, "error", err.Error())
		run.loaded = false
		return end, nil
	}
	return end, err
}

// commitPhases writes phases inside tx, in order, as mode says.
//
// A transaction that reaches Done needs no Advance, since Lease.Finish in
// it is fenced. With later set, the phases' spans are collected rather
// than recorded now (the claim's, phaseRun).
func commitPhases[S any](ctx context.Context, e *Engine, tx *Tx, run *Run[S], phases []Phase[S], mode txMode, later *[]phaseRun) (txEnd, error) {
	if len(phases) == 0 {
		return txEnd{}, nil
	}
	lease := run.Lease
	last := phases[len(phases)-1].To
	traced := func(to Point, fn func(context.Context) error) error {
		if later == nil {
			return e.phase(ctx, lease, to, fn)
		}
		r := phaseRun{to: to, start: time.Now()}
		r.err = fn(ctx)
		*later = append(*later, r)
		return r.err
	}
	for k, p := range phases {
		var next Next
		err := traced(p.To, func(ctx context.Context) error {
			if k == 0 && mode.fenced && last != Done {
				if err := lease.Advance(ctx, tx, last); err != nil {
					return err
				}
			}
			if k == 0 && mode.first {
				if err := lease.SetObject(ctx, tx, run.ObjectID); err != nil {
					return err
				}
			}
			var err error
			if next, err = p.Commit(ctx, tx, run); err != nil {
				return err
			}
			run.loaded = holds(run)
			return decided(lease.Record.Key, p.To, next, k == 0 && mode.afterCall, k == 0 && mode.renew, func(resp Response) error {
				return lease.Finish(ctx, tx, resp)
			})
		})
		if err != nil {
			return txEnd{}, err
		}
		switch next.kind {
		case respond:
			return txEnd{reached: Done, response: &next.response}, nil
		case again:
			return txEnd{again: true}, nil
		}
	}
	return txEnd{reached: last}, nil
}

// decided checks what a phase's Commit decided, and stores a response with
// finish. The flag afterCall says the phase follows a foreign call, and
// renew that the call's outcome was Unknown with Renew.
func decided(key string, to Point, next Next, afterCall, renew bool, finish func(Response) error) error {
	switch {
	case next.kind == unsaid:
		return fmt.Errorf("key %q: the phase to %s returned no decision", key, to)
	case renew && next.kind != again:
		return fmt.Errorf("key %q: the phase to %s must go again after a renewed call, not %s", key, to, next)
	case next.kind == proceed && to == Done:
		return fmt.Errorf("key %q: the phase to done must respond, not proceed", key)
	case next.kind == again && !afterCall:
		return fmt.Errorf("key %q: Again from the phase to %s, which does not follow a foreign call", key, to)
	case next.kind == respond:
		return finish(next.response)
	}
	return nil
}
