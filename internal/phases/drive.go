package phases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// drive advances a leased request from point to done, one transaction per
// step the operation declares (or per arrow, with OneCommitPerPhase).
//
// If the lease is lost on the way (a worker that stalled past its lease and
// was taken over), drive answers only with what the key stores: the new
// holder's response once it is done, else ErrInProgress. It never answers
// from its own rolled-back work.
//
// A run never returns holding its lease. It ends released on the retry
// schedule (a busy or unknown outcome), released once the database answers
// (the database failed under it), or released counting an attempt for any
// other failure: a deterministic error (an arrow's own, a zero Transition,
// a statement the database refuses, a row that does not decode) that would
// otherwise leave the key to be taken over at every lease's end, its
// foreign call made again each time, for ever. Counted, its attempts
// follow the schedule and GIVE_UP_AFTER hands the key to an operator, who
// reads the error in last_error_detail (pitfall 87 "A request that loops
// for ever"). Only a test's crash (CrashHook) stops a run where it
// stands, as if its process died.
func drive[S any](ctx context.Context, e *Engine, op *registered[S], run *Run[S], point idempotency.RecoveryPoint) (idempotency.Response, error) {
	lease := run.Lease
	for point != idempotency.PointDone {
		var err error
		if at, ok := after(op.steps, point); ok {
			err = advance(ctx, e, op, run, at, &point)
		} else {
			err = fmt.Errorf("resume %q: unknown recovery point %q", lease.Record.Key, point)
		}
		switch {
		case err == nil:
		case errors.Is(err, idempotency.ErrLeaseLost):
			return e.afterLeaseLost(ctx, lease)
		case errors.As(err, new(released)):
			return idempotency.Response{}, err.(released).err
		case errors.As(err, new(crashed)):
			return idempotency.Response{}, err
		case dbstate.Unavailable(err):
			// The database went away mid-run (after the PSP answered,
			// say): the key stays at its last committed recovery point,
			// and is released once the database is back, so that the
			// client's retry resumes it then, not a lease later.
			e.releaseLater(lease, err)
			return idempotency.Response{}, dbstate.Wrap(err)
		default:
			// Ours to fix: the attempt is counted, its error kept in
			// last_error_detail, and whoever drove the key logs it.
			return idempotency.Response{}, e.release(ctx, lease, cmp.Or(run.ObjectID, lease.Record.ObjectID), err, 0)
		}
	}
	if run.done == nil {
		return idempotency.Response{}, fmt.Errorf("resume %q: done without an answer", lease.Record.Key)
	}
	return *run.done, nil
}

// released is the end of a run at its recovery point with the lease
// released (busy or unknown outcome): err is its answer, whatever it wraps
// (a lost lease included: the release found it gone, nothing was written).
type released struct{ err error }

func (r released) Error() string { return r.err.Error() }

// advance runs one transaction from the arrow at: the step's foreign call
// first when the arrow is the step's first, then the arrows from at to the
// step's end (or at alone, with OneCommitPerPhase) in one transaction. It
// moves *point to what committed.
func advance[S any](ctx context.Context, e *Engine, op *registered[S], run *Run[S], at position, point *idempotency.RecoveryPoint) error {
	s := op.steps[at.step]
	arrows := s.Arrows[at.arrow:]
	if e.cfg.OneCommitPerPhase {
		arrows = arrows[:1]
	}
	withCall := at.arrow == 0 && s.Call != nil
	if withCall {
		out, err := call(ctx, e, op, run, s.Call)
		if err != nil {
			return err
		}
		run.Outcome = out
	}
	from := *point
	end, err := commitTx(ctx, e, op, run, arrows, from, at == position{}, withCall)
	if err != nil {
		return err
	}
	switch {
	case end.again:
		// Committed at the same point (Again): round the step again.
		return e.crash(ctx, CrashAfter(from))
	case end.response != nil:
		*point, run.done = idempotency.PointDone, end.response
	default:
		*point = end.reached
	}
	if arrows[0].To == idempotency.PointDone {
		return nil
	}
	return e.crash(ctx, CrashAfter(arrows[0].To))
}

// call makes a step's foreign call. What happens next is decided by the
// answer's class alone (psp.Classify), the same whether the api or the
// reaper drives the key:
//
//	success, final failure → committed by the step's arrows
//	busy, unknown          → released, next attempt on the schedule
//
// An object made in this very run cannot have reached the PSP yet (Fresh);
// any other is looked up by reference before anything is sent (the PSP may
// have acted on a request whose answer was lost, and may have forgotten its
// key since).
func call[S any](ctx context.Context, e *Engine, op *registered[S], run *Run[S], fn func(context.Context, *Run[S]) (psp.Outcome, error)) (psp.Outcome, error) {
	run.Fresh = run.loaded
	if !run.loaded {
		obj, err := op.Load(ctx, e.pool, run.Lease)
		if err != nil {
			return psp.Outcome{}, err
		}
		run.Object, run.loaded = obj, true
	}
	out, err := e.call(ctx, run.Lease, func(ctx context.Context) (psp.Outcome, error) { return fn(ctx, run) })
	if errors.Is(err, idempotency.ErrLeaseLost) {
		// The heartbeat found the lease taken over during the call, and
		// stopped it: whatever the PSP answered is the new holder's to
		// find out (by reference), not this run's to record.
		return out, err
	}
	// An unknown outcome whose key is spent (NewKey) is committed: its
	// step's arrows record a new key for the next call.
	if out.Class == psp.ClassBusy || out.Class == psp.ClassUnknown && !out.NewKey {
		return out, released{e.release(ctx, run.Lease, cmp.Or(run.ObjectID, run.Lease.Record.ObjectID), err, out.RetryAfter)}
	}
	if err := e.crash(ctx, CrashAfterPSPCall); err != nil {
		return out, err
	}
	return out, nil
}

// groupEnd is how a transaction's arrows ended: at reached, with a
// response stored (the key is done), or round again (Again).
type groupEnd struct {
	reached  idempotency.RecoveryPoint
	response *idempotency.Response
	again    bool
}

// commitTx commits arrows in a transaction of their own, loading the run's
// object in it first if the run has none in hand. The transaction is
// pipelined (Tx): a run that has its object in hand sends the fence, the
// arrows' writes, the finish and the commit in one exchange, or in as many
// as the arrows' reads need. first says the arrows start at the
// operation's first arrow; canAgain that they follow a foreign call.
func commitTx[S any](ctx context.Context, e *Engine, op *registered[S], run *Run[S], arrows []Arrow[S], from idempotency.RecoveryPoint, first, canAgain bool) (end groupEnd, err error) {
	// A claim that committed alone recorded no object: the first arrow
	// names it, and names the next incarnation's if an earlier
	// incarnation of the key holds it (ErrObjectIDTaken).
	derive := first && run.ObjectID == "" && op.ObjectID != nil
	for n := 0; ; n++ {
		if derive {
			id := run.Lease.Record.ID()
			run.ObjectID = op.ObjectID(id.TenantID, id.Key, run.Request(), incarnation(n))
		}
		end, err = commitOnce(ctx, e, op, run, arrows, from, first, canAgain)
		if !derive || !objectIDTaken(err, n) {
			return end, err
		}
	}
}

// ObjectIDAttempts bounds the incarnations of one key and request whose
// derived object ids are tried (ErrObjectIDTaken): the same key and body
// claimed again after retention, over and over, makes each new claim try
// every id before its own, one exchange each. Past the bound, the last try
// asks for an id that is not derived (incarnation -1, a random one): such a
// key is no longer protected from a claim lost in a failover
// (docs/pitfalls.md). Operation.ObjectID is called with incarnations 0 to
// ObjectIDAttempts-1, and -1.
const ObjectIDAttempts = 8

// incarnation is what the n-th try passes to Operation.ObjectID.
func incarnation(n int) int {
	if n < ObjectIDAttempts {
		return n
	}
	return -1
}

// objectIDTaken reports whether the n-th try failed on ErrObjectIDTaken
// and another is due.
func objectIDTaken(err error, n int) bool {
	return errors.Is(err, ErrObjectIDTaken) && n < ObjectIDAttempts
}

// commitOnce is one try of commitTx.
func commitOnce[S any](ctx context.Context, e *Engine, op *registered[S], run *Run[S], arrows []Arrow[S], from idempotency.RecoveryPoint, first, canAgain bool) (end groupEnd, err error) {
	err = inPipeTx(ctx, e.pool, func(tx *Tx) error {
		if !run.loaded && !first {
			obj, err := op.Load(ctx, tx, run.Lease)
			if err != nil {
				return err
			}
			run.Object, run.loaded = obj, true
		}
		mode := arrowsFenced
		if first {
			mode |= arrowsSetObject
		}
		if canAgain {
			mode |= arrowsAfterCall
		}
		var err error
		if end, err = commitArrows(ctx, e, tx, run, arrows, mode, nil); err != nil {
			return err
		}
		if end.again {
			// The key stays where it was, fenced all the same (an
			// Advance to the arrows' last point went first). Its
			// timeline gains what the arrow noted (a charge's "moved"),
			// not a second "reached" of the point it never left.
			return run.Lease.Stay(ctx, tx, from)
		}
		return nil
	})
	if Committed(err) {
		// What committed stands; what a queued row was to fill in of the
		// object is read again before it is used.
		e.log.WarnContext(ctx, "transaction committed, but reading part of its answer failed",
			"key", run.Lease.Record.Key, "error", err.Error())
		run.loaded = false
		return end, nil
	}
	return end, err
}

// arrowMode says how commitArrows writes a transaction's arrows.
type arrowMode int

const (
	// arrowsInClaim: the claim's transaction; its new key row records the
	// point and the object, so the arrows write no fence of their own.
	arrowsInClaim arrowMode = 0
	// arrowsFenced: the first arrow records the transaction's last
	// recovery point with Lease.Advance before any effect, fenced.
	arrowsFenced arrowMode = 1 << iota
	// arrowsSetObject: the key's object is recorded too.
	arrowsSetObject
	// arrowsAfterCall: the first arrow follows a foreign call, and may
	// return Again.
	arrowsAfterCall
)

// commitArrows writes arrows inside tx, in order, as mode says. A group
// that reaches done needs no Advance: Lease.Finish, in the same
// transaction, is fenced, and nothing commits unless it matches.
//
// later, if set, collects the arrows' runs instead of recording their spans
// and metrics now (the claim's transaction, see arrowRun).
func commitArrows[S any](ctx context.Context, e *Engine, tx *Tx, run *Run[S], arrows []Arrow[S], mode arrowMode, later *[]arrowRun) (groupEnd, error) {
	if len(arrows) == 0 {
		return groupEnd{}, nil
	}
	lease := run.Lease
	last := arrows[len(arrows)-1].To
	traced := func(to idempotency.RecoveryPoint, fn func(context.Context) error) error {
		if later == nil {
			return e.arrow(ctx, lease, to, fn)
		}
		r := arrowRun{to: to, start: time.Now()}
		r.err = fn(ctx)
		*later = append(*later, r)
		return r.err
	}
	for k, a := range arrows {
		var t Transition
		err := traced(a.To, func(ctx context.Context) error {
			if k == 0 && mode&arrowsFenced != 0 && last != idempotency.PointDone {
				if err := lease.Advance(ctx, tx, last); err != nil {
					return err
				}
			}
			if k == 0 && mode&arrowsSetObject != 0 {
				if err := lease.SetObject(ctx, tx, run.ObjectID); err != nil {
					return err
				}
			}
			var err error
			if t, err = a.Commit(ctx, tx, run); err != nil {
				return err
			}
			run.loaded = true
			switch t.kind {
			case next:
				if a.To == idempotency.PointDone {
					return fmt.Errorf("key %q: the arrow to done must Respond, not go on", lease.Record.Key)
				}
			case respond:
				return lease.Finish(ctx, tx, t.response)
			case again:
				if k != 0 || mode&arrowsAfterCall == 0 {
					return fmt.Errorf("key %q: Again from the arrow to %s, which does not follow a foreign call", lease.Record.Key, a.To)
				}
			default:
				return fmt.Errorf("key %q: the arrow to %s returned no transition", lease.Record.Key, a.To)
			}
			return nil
		})
		if err != nil {
			return groupEnd{}, err
		}
		switch t.kind {
		case respond:
			return groupEnd{reached: idempotency.PointDone, response: &t.response}, nil
		case again:
			return groupEnd{again: true}, nil
		}
	}
	return groupEnd{reached: last}, nil
}
