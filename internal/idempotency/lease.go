package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lease is a worker's hold on a started key: the right to advance it, valid
// while the key's lock_version is still Record.LockVersion. Every write below
// carries that token, so a worker that stalled past its lease and was taken
// over finds its writes match no row (ErrLeaseLost) and must roll back.
type Lease struct {
	store *Store
	// Record is the key as it was when the lease was taken. Its Point is
	// where the holder resumes.
	Record Record

	notes []Entry // timeline entries for the holder's next write (Note)
	// token is the lease token its claim or takeover drew and wrote
	// (lost.go); "" for a lease made from a record read back (LeaseOf).
	token string
}

// advanceSQL fences a phase and records its recovery point. Callers run it
// first in the phase's transaction: the row lock it takes makes a concurrent
// takeover wait until the phase commits or rolls back, and a lost lease stops
// the phase before any of its effects is written. It also renews the lease:
// a worker that makes progress is alive. A failed fence fails the statement
// (see fenced), so that it can be queued in a pipelined transaction whose
// Exec has no rows affected to look at. The timeline gains the holder's
// notes and "reached" ($7).
var advanceSQL = fenced(`
UPDATE idempotency_keys
   SET recovery_point = $5,
       locked_until = phasepay_now() + $6 * interval '1 microsecond',
       timeline = phasepay_timeline_append(timeline, $7, lock_version)
 WHERE tenant_id = $1 AND key = $2 AND created_at = $3
   AND lock_version = $4
   AND state = 'started'`, "advance")

// Advance moves the key to point inside tx, fenced by the lease. Call it
// before the phase's effects, in the same transaction; the caller commits.
// It returns ErrLeaseLost if the lease was taken over or the key finished
// (from the commit, when tx is a Queuer).
func (l *Lease) Advance(ctx context.Context, tx Execer, point RecoveryPoint) error {
	r := l.Record
	err := write(ctx, tx, advanceSQL, r.TenantID, r.Key, r.CreatedAt, r.LockVersion, string(point), l.store.cfg.Lease.Microseconds(),
		l.take(Entry{Kind: KindReached, RecoveryPoint: point}))
	return fenceError(err, "advance %q to %s", r.Key, point)
}

// Stay records, fenced like Advance, that the key stays at point (where it
// is) while its holder goes round the point's call again: the holder's
// notes (a "moved" among them) are written, and no "reached", since
// nothing new was reached. It renews the lease like Advance.
func (l *Lease) Stay(ctx context.Context, tx Execer, point RecoveryPoint) error {
	r := l.Record
	err := write(ctx, tx, advanceSQL, r.TenantID, r.Key, r.CreatedAt, r.LockVersion, string(point), l.store.cfg.Lease.Microseconds(),
		l.take())
	return fenceError(err, "stay %q at %s", r.Key, point)
}

// finishSQL stores the response and ends the key, fenced like advanceSQL.
// The timeline gains the holder's notes (the PSP call just answered) and
// "finished" ($8); nobody holds the key any more.
var finishSQL = fenced(`
UPDATE idempotency_keys
   SET state = 'done',
       recovery_point = 'done',
       locked_until = NULL,
       holder = NULL,
       timeline = phasepay_timeline_append(timeline, $8, lock_version),
       next_attempt_at = NULL,
       last_error = NULL,
       last_error_detail = NULL,
       response_status = $5,
       response_content_type = $6,
       response_body = $7,
       finished_at = phasepay_now()
 WHERE tenant_id = $1 AND key = $2 AND created_at = $3
   AND lock_version = $4
   AND state = 'started'`, "finish")

// Finish stores resp as the key's final answer inside tx, the transaction of
// the request's last effect. It returns ErrLeaseLost if the lease was lost
// (from the commit, when tx is a Queuer).
func (l *Lease) Finish(ctx context.Context, tx Execer, resp Response) error {
	r := l.Record
	err := write(ctx, tx, finishSQL, r.TenantID, r.Key, r.CreatedAt, r.LockVersion, resp.Status, resp.ContentType, resp.Body,
		l.take(Entry{Kind: KindFinished, ResponseStatus: resp.Status}))
	return fenceError(err, "finish %q", r.Key)
}

// extendSQL is the heartbeat: it pushes the lease out while the holder waits
// on something slow, fenced so that it cannot revive a lease already taken
// over. The fence alone is not enough: Release ends a lease without bumping
// lock_version, so a heartbeat tick that ran just after its own holder's
// Release (the goroutine not yet stopped) would lease the key again, and
// the client's next retry would get 409 for a whole lease. Only a lease
// that is still held is extended: locked_until set and not yet passed.
//
// It also records the heartbeat in the timeline ($6), so that when a
// holder dies its last sign of life is known (the console ends its hold
// there rather than at the takeover). A run of heartbeats is one entry:
// while the timeline's last entry is this holder's heartbeat, its "at" is
// moved instead of a new entry appended. So a slow call adds one entry at
// most, and a stalled one does not grow the row.
const extendSQL = `
UPDATE idempotency_keys
   SET locked_until = phasepay_now() + $5 * interval '1 microsecond',
       timeline = CASE WHEN $6::text IS NOT NULL AND timeline->-1->>'kind' = 'heartbeat'
                            AND timeline->-1->>'lock_version' = lock_version::text
                       THEN jsonb_set(timeline, '{-1,at}', to_jsonb(phasepay_timeline_time(phasepay_now())))
                       ELSE phasepay_timeline_append(timeline, $6, lock_version) END
 WHERE tenant_id = $1 AND key = $2 AND created_at = $3
   AND lock_version = $4
   AND state = 'started'
   AND locked_until > phasepay_now()`

// Extend renews the lease for another Lease duration and records the
// heartbeat. It returns ErrLeaseLost if the lease was taken over,
// released, or ran out. It may run beside the holder's own statements
// (Heartbeat's goroutine), so it leaves the holder's notes alone.
func (l *Lease) Extend(ctx context.Context, q DBTX) error {
	r := l.Record
	tag, err := q.Exec(ctx, extendSQL, r.TenantID, r.Key, r.CreatedAt, r.LockVersion, l.store.cfg.Lease.Microseconds(),
		l.store.entries(Entry{Kind: KindHeartbeat}))
	if err != nil {
		return fmt.Errorf("extend %q: %w", r.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("extend %q: %w", r.Key, ErrLeaseLost)
	}
	return nil
}

// Heartbeat extends the lease every third of its duration until ctx ends,
// so that a live worker waiting on a slow foreign call is not taken over
// while a dead one's lease still runs out. It calls lost (once) and returns
// when an extension finds the lease gone (ErrLeaseLost). Run it in its own
// goroutine, and wait for it to return before releasing or finishing the
// lease (extendSQL refuses a released lease, but a tick in flight is still
// a statement racing the release).
func (l *Lease) Heartbeat(ctx context.Context, q DBTX, lost func(error)) {
	t := time.NewTicker(l.store.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A failed extension for any other reason (a dropped
			// connection) is retried at the next tick: the lease still has
			// two thirds of its time.
			if err := l.Extend(ctx, q); errors.Is(err, ErrLeaseLost) {
				lost(err)
				return
			}
		}
	}
}

// unlockSQL gives a lease up without ending an attempt: the holder did not
// fail at its work, the database failed under it (the phase engine's
// releaseLater). The key stays at its last committed recovery point with
// its attempts, last error and schedule unchanged, so that the client's
// next retry resumes it at once instead of being told to wait for a PSP
// that never failed (releaseSQL would count an attempt and schedule the
// next one). Fenced like every write of a holder. The timeline gains the
// holder's notes ($5) and "released" with the reason database
// unavailable and the next attempt as it stands (due now, unless one was
// scheduled).
const unlockSQL = `
UPDATE idempotency_keys
   SET locked_until = NULL,
       holder = NULL,
       timeline = CASE WHEN $5::text IS NULL THEN timeline
           ELSE phasepay_timeline_append(timeline, $5, lock_version) || jsonb_build_array(jsonb_build_object(
                'at', phasepay_timeline_time(phasepay_now()), 'kind', 'released', 'holder', $6::text,
                'lock_version', lock_version, 'reason', '` + ReasonDatabaseUnavailable + `',
                'next_attempt_at', phasepay_timeline_time(coalesce(next_attempt_at, phasepay_now()))))
           END
 WHERE tenant_id = $1 AND key = $2 AND created_at = $3
   AND lock_version = $4
   AND state = 'started'`

// Unlock gives the lease up at the key's last recovery point without
// counting an attempt (see unlockSQL). It returns ErrLeaseLost if the lease
// was already lost (the run's last commit landed, or the key was taken
// over).
func (l *Lease) Unlock(ctx context.Context, q DBTX) error {
	r := l.Record
	tag, err := q.Exec(ctx, unlockSQL, r.TenantID, r.Key, r.CreatedAt, r.LockVersion, l.take(), l.store.holder)
	if err != nil {
		return fmt.Errorf("unlock %q: %w", r.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("unlock %q: %w", r.Key, ErrLeaseLost)
	}
	return nil
}
