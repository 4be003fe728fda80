package phases

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// How a run that cannot finish ends: its lease kept alive during a slow
// foreign call, released on the retry schedule after a busy or unknown
// outcome, released once the database is back after it failed under the
// run, and answered from the key alone when the lease was taken over.

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
	if errors.Is(cause, ErrUnavailable) {
		return &UnavailableError{ObjectID: objectID, RetryAfter: rel.RetryAfter, Cause: cause}
	}
	return cause
}

// releaseLater gives up the lease of a run the database failed under, once
// the database answers again, retrying in the background with a growing
// pause. It is not an attempt (idempotency.Lease.Unlock): the PSP did not
// fail, so the key is due at once and the client's retry resumes it,
// rather than being told the PSP is unavailable. It gives up when the lease
// would have run out by itself anyway, or when it finds the lease gone (the
// run's last commit did land, or someone took the key over). The key stays
// at its last committed recovery point: the PSP's answer, if one was lost
// with the database, is found again by the lookup by reference that
// precedes any resend under the same PSP key. Wait waits for these to end.
func (e *Engine) releaseLater(lease *idempotency.Lease, cause error) {
	e.unlockLater(lease.Record.Key, cause, time.Now().Add(e.keys.Lease()),
		func(ctx context.Context) error { return lease.Unlock(ctx, e.pool) })
}

// releaseLostClaim is releaseLater for a claim whose answer was lost before
// the key's row was read back: the claim may have committed, holding the
// key for a whole lease, though nothing runs it (every retry would get 409
// until the lease ran out). Not knowing the row's creation time, the
// release finds the key by the token this very claim wrote
// (idempotency.Store.UnlockLostClaim): never another request's lease.
func (e *Engine) releaseLostClaim(lease *idempotency.Lease, cause error) {
	e.unlockLater(lease.Record.Key, cause, time.Now().Add(e.keys.Lease()),
		func(ctx context.Context) error { return e.keys.UnlockLostClaim(ctx, e.pool, lease) })
}

// releaseLostTakeover is releaseLater for a takeover whose answer was lost
// (idempotency.LostTakeoverError): it may hold the key, and nothing runs
// it. The release is fenced by what the takeover wrote, its token and the
// lock_version it set, so it never touches a later holder.
func (e *Engine) releaseLostTakeover(key string, lost *idempotency.LostTakeoverError) {
	e.unlockLater(key, lost, lost.Deadline(), func(ctx context.Context) error { return lost.Release(ctx, e.pool) })
}

// unlockLater retries unlock in the background until the database answers,
// or until giveUp (when the lease runs out by itself anyway): see
// releaseLater.
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
