package idempotency

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/dbstate"
)

// Leases whose answer was lost (pitfall C12 "A release of a lease its claim
// never took", pitfall C13 "A lost takeover answer that holds the key"): a
// claim or a takeover whose statement was sent and whose answer never came
// back (the connection dropped after the server committed it, a statement or
// lock timeout, a request deadline). Its sender cannot know whether it holds
// the key. If it does, nothing runs the key, and every retry of the client
// would get 409 until the lease ran out. So the sender gives the lease up
// once the database answers again, without counting an attempt (unlockSQL's
// reasons), matching the token it drew before sending and wrote with the
// lease (lease_token, migrations/00024). Only that very claim or takeover
// wrote it: the release can end neither another request's lease (a duplicate
// in the same process, whose holder name is the same) nor a later holder's.

// newLeaseToken draws a lease token: a random UUID (version 4), in the
// text form the statements cast to uuid (text travels in every exec mode,
// a pooler's included).
func newLeaseToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// releasedUnavailable is the timeline entry of a lease given up after its
// answer was lost: "released" for the reason database unavailable, with
// the next attempt as it stands (due now, unless one was scheduled); none
// when $holder is NULL (TIMELINE=off). It reads the row as k.
func releasedUnavailable(holder string) string {
	return `CASE WHEN ` + holder + `::text IS NULL THEN k.timeline
           ELSE coalesce(k.timeline, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                'at', phasepay_timeline_time(phasepay_now()), 'kind', 'released', 'holder', ` + holder + `::text,
                'lock_version', k.lock_version, 'reason', '` + ReasonDatabaseUnavailable + `',
                'next_attempt_at', phasepay_timeline_time(coalesce(k.next_attempt_at, phasepay_now()))))
           END`
}

// unlockLostClaimSQL gives up the lease of a claim whose answer was lost
// before its row was read back (so its creation time is not known): the
// newest incarnation of the key, still at lock_version 1 (nobody took it
// over), started, leased, with the claim's token. A claim that did not
// commit wrote no row; a duplicate's claim, which found the key, wrote
// nothing to it; either finds no row here.
var unlockLostClaimSQL = `
UPDATE idempotency_keys k
   SET locked_until = NULL,
       holder = NULL,
       timeline = ` + releasedUnavailable("$4") + `
  FROM idempotency_keys_newest($1, $2) n
 WHERE k.tenant_id = n.tenant_id AND k.key = n.key AND k.created_at = n.created_at
   AND k.lock_version = 1
   AND k.state = 'started'
   AND k.locked_until > phasepay_now()
   AND k.lease_token = $3::uuid`

// UnlockLostClaim gives up the lease of a claim whose answer was lost
// before its row was read back, without counting an attempt; lease is the
// claim's (QueuedClaim.Lease), whose token the claim wrote. It returns
// ErrLeaseLost if there is no such lease: the claim did not commit, or its
// lease is gone.
func (s *Store) UnlockLostClaim(ctx context.Context, q DBTX, lease *Lease) error {
	r := lease.Record
	if lease.token == "" {
		return fmt.Errorf("unlock the lost claim of %q: the lease has no token", r.Key)
	}
	tag, err := q.Exec(ctx, unlockLostClaimSQL, r.TenantID, r.Key, lease.token, s.holderColumn())
	if err != nil {
		return fmt.Errorf("unlock the lost claim of %q: %w", r.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("unlock the lost claim of %q: %w", r.Key, ErrLeaseLost)
	}
	return nil
}

// unlockTakeoverSQL gives up the lease of a takeover (TakeOver) whose
// answer was lost: the key at the lock_version that takeover would have set
// ($4, the one it read plus one), still started and leased, with its
// token. A takeover that won the race instead set the same lock_version
// with its own token; any later holder set another lock_version.
var unlockTakeoverSQL = `
UPDATE idempotency_keys k
   SET locked_until = NULL,
       holder = NULL,
       timeline = ` + releasedUnavailable("$6") + `
 WHERE k.tenant_id = $1 AND k.key = $2 AND k.created_at = $3
   AND k.lock_version = $4
   AND k.state = 'started'
   AND k.locked_until > phasepay_now()
   AND k.lease_token = $5::uuid`

// unlockBatchSQL gives up every lease a batch takeover (TakeOverExpired)
// whose answer was lost took: the started keys still leased with its
// token. A key the batch took became due at the batch's lease end, within
// a lease from now ($3): the range of the partial index
// idempotency_keys_due (dueAtExpr, spelled alike) that holds the keys in
// flight and those due within a lease, never the finished ones, nor a
// backlog waiting for later attempts. A takeover by a process too old to
// write tokens leaves the token in place; the batch's release stops trying
// when its lease would have run out anyway (LostTakeoverError.Deadline),
// before anyone else may take the keys over.
var unlockBatchSQL = `
UPDATE idempotency_keys k
   SET locked_until = NULL,
       holder = NULL,
       timeline = ` + releasedUnavailable("$2") + `
 WHERE k.state = 'started'
   AND ` + dueAtExpr + ` > phasepay_now()
   AND ` + dueAtExpr + ` <= phasepay_now() + $3 * interval '1 microsecond'
   AND k.locked_until > phasepay_now()
   AND k.lease_token = $1::uuid`

// LostTakeoverError is a takeover (TakeOver, TakeOverExpired) whose
// statement was sent and whose answer was lost (Err): it may have
// committed, holding keys that nothing runs. Release gives up what it
// took, if anything, once the database answers.
type LostTakeoverError struct {
	Err   error
	store *Store
	token string
	sent  time.Time
	// one is TakeOver's key as it read it (before the takeover); nil for
	// a batch.
	one *Record
}

func (e *LostTakeoverError) Error() string { return e.Err.Error() }
func (e *LostTakeoverError) Unwrap() error { return e.Err }

// Deadline is when a lease the takeover took runs out by itself, at the
// latest, by this process's clock: there is no point in releasing it later.
func (e *LostTakeoverError) Deadline() time.Time { return e.sent.Add(e.store.cfg.Lease) }

// Release gives up the leases the takeover took, without counting an
// attempt. It returns ErrLeaseLost when it held none (it did not commit,
// or its leases are gone).
func (e *LostTakeoverError) Release(ctx context.Context, q DBTX) error {
	var (
		what string
		err  error
		n    int64
	)
	if r := e.one; r != nil {
		what = fmt.Sprintf("%q", r.Key)
		tag, xerr := q.Exec(ctx, unlockTakeoverSQL, r.TenantID, r.Key, r.CreatedAt, r.LockVersion+1, e.token, e.store.holderColumn())
		err, n = xerr, tag.RowsAffected()
	} else {
		what = "the keys of a batch"
		tag, xerr := q.Exec(ctx, unlockBatchSQL, e.token, e.store.holderColumn(), e.store.cfg.Lease.Microseconds())
		err, n = xerr, tag.RowsAffected()
	}
	switch {
	case err != nil:
		return fmt.Errorf("unlock the lost takeover of %s: %w", what, err)
	case n == 0:
		return fmt.Errorf("unlock the lost takeover of %s: %w", what, ErrLeaseLost)
	}
	return nil
}

// lostTakeover wraps the error of a takeover whose statement was sent.
func (s *Store) lostTakeover(err error, token string, sent time.Time, one *Record) error {
	return &LostTakeoverError{Err: err, store: s, token: token, sent: sent, one: one}
}

// RetryUnlock calls unlock (an Unlock, UnlockLostClaim or
// LostTakeoverError.Release) until the database answers it, pausing longer
// each time (100 ms, doubling, at most 2 s), and gives up past giveUp. It
// returns unlock's last error: nil (released), ErrLeaseLost (nothing left
// to release), or why it gave up.
func RetryUnlock(giveUp time.Time, unlock func(context.Context) error) error {
	pause := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := unlock(ctx)
		cancel()
		if err == nil || errors.Is(err, ErrLeaseLost) || !dbstate.Unavailable(err) || time.Now().Add(pause).After(giveUp) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Second)
	}
}
