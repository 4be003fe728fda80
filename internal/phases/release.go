package phases

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// How a run that cannot finish ends. After a busy or unknown outcome it is
// released on the retry schedule. After the database failed under it, it
// is released once the database is back. A run whose lease was taken over
// answers from the key alone.

// release ends an attempt at its recovery point. It gives the lease up and
// schedules the next attempt, no sooner than notBefore (a busy service's
// Retry-After). Past GIVE_UP_AFTER the key goes to an operator.
//
// It runs even if the request's context ended. A lease left held would
// make every retry wait it out.
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
	if errors.Is(cause, ErrUnavailable) {
		return &UnavailableError{ObjectID: objectID, RetryAfter: rel.RetryAfter, Cause: cause}
	}
	return cause
}

// releaseLater gives up the lease of a run the database failed under, once
// the database answers again. Wait waits for it.
//
// It is not an attempt (idempotency.Lease.Unlock). The service did not
// fail, so the key is due at once and the client's retry resumes it. The
// key stays at its last committed point; an answer lost with the database
// is found again by the lookup that precedes any resend. The retries stop
// when the lease would have run out anyway, or is found gone.
func (e *Engine) releaseLater(lease *idempotency.Lease, cause error) {
	e.unlockLater(lease.Record.Key, cause, time.Now().Add(e.keys.Lease()),
		func(ctx context.Context) error { return lease.Unlock(ctx, e.pool) })
}

// releaseLostClaim is releaseLater for a claim whose answer was lost before
// the key's row was read back.
//
// The claim may have committed and hold the key for a whole lease, with
// nothing running it. Every retry would get 409. The release finds the key
// by the token this very claim wrote (idempotency.Store.UnlockLostClaim),
// so it never ends another request's lease.
func (e *Engine) releaseLostClaim(lease *idempotency.Lease, cause error) {
	e.unlockLater(lease.Record.Key, cause, time.Now().Add(e.keys.Lease()),
		func(ctx context.Context) error { return e.keys.UnlockLostClaim(ctx, e.pool, lease) })
}

// releaseLostTakeover is releaseLater for a takeover whose answer was lost.
// It may hold the key with nothing running it. The release is fenced by
// the token and lock_version the takeover wrote, so it never touches a
// later holder.
func (e *Engine) releaseLostTakeover(key string, lost *idempotency.LostTakeoverError) {
	e.unlockLater(key, lost, lost.Deadline(), func(ctx context.Context) error { return lost.Release(ctx, e.pool) })
}

// unlockLater retries unlock in the background until the database answers,
// or until giveUp, when the lease runs out by itself (see releaseLater).
func (e *Engine) unlockLater(key string, cause error, giveUp time.Time, unlock func(context.Context) error) {
	e.background.Go(func() {
		switch err := idempotency.RetryUnlock(giveUp, unlock); {
		case err == nil:
			e.log.Info("released the lease of a run the database failed under", "key", key, "cause", cause.Error())
		case errors.Is(err, idempotency.ErrLeaseLost):
		default:
			e.log.Warn("could not release the lease of a run the database failed under; it runs out by itself",
				"key", key, "error", err.Error())
		}
	})
}

// afterLeaseLost answers a run whose lease was taken over. The answer is
// the key's stored response if the new holder finished, else ErrInProgress.
func (e *Engine) afterLeaseLost(ctx context.Context, lease *idempotency.Lease) (Response, error) {
	rec, err := e.keys.Lookup(ctx, e.pool, lease.Record.TenantID, lease.Record.Key)
	if err != nil {
		return Response{}, err
	}
	e.tel.countOutcome(ctx, "lease_lost")
	e.log.WarnContext(ctx, "lease lost to a takeover", "key", lease.Record.Key, "lock_version", lease.Record.LockVersion,
		"now_lock_version", rec.LockVersion)
	if rec.State == idempotency.StateDone && rec.CreatedAt.Equal(lease.Record.CreatedAt) {
		return *rec.Response, nil
	}
	return Response{}, fmt.Errorf("key %q: %w", lease.Record.Key, idempotency.ErrInProgress)
}
