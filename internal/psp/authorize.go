package psp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// AuthorizeOutcome is one attempt, as the state machine counts attempts, to
// get req authorized: the service's "own quick retries and lookups" of the
// contract, bounded by MaxAttempts sends and ctx. Its rule (settle):
//
//  1. Unless req.FirstSend, look the reference up first: an earlier attempt
//     may have reached the PSP under a key it has since forgotten.
//  2. Send. Success or final failure: done.
//  3. Busy: pause (Retry-After if it fits within MaxBackoff, else return
//     busy at once for the caller to schedule) and send again under the
//     same key: nothing was done, so no lookup is needed.
//  4. Unknown: pause, then look the reference up. Found: its result is the
//     outcome, as if the PSP had answered (FoundByLookup). Not found: send
//     again under the same key. The lookup failed: return unknown at once,
//     sending nothing more; the next attempt, on the caller's schedule,
//     starts with a lookup.
//
// So the authorization is never sent twice without a lookup between, and
// an unknown outcome is returned only when a lookup could not settle it.
// Every send and lookup goes through a Transport, so none is repeated
// behind our back either.
//
// When a lookup finds several authorizations for the reference (which
// only a resend without lookup could have made), an authorized one is
// preferred: it holds the customer's funds and must be recorded to be
// captured or voided.
//
// The Outcome's class is always set. The error is nil for a success and a
// decline, and otherwise wraps ErrRejected, ErrBusy or ErrUnavailable, or
// context.Canceled when ctx was canceled; a deadline on ctx is an unknown
// outcome (ErrUnavailable and context.DeadlineExceeded).
func (c *Client) AuthorizeOutcome(ctx context.Context, req AuthorizeRequest) (Outcome, error) {
	if req.IdempotencyKey == "" {
		return Outcome{}, errors.New("authorize: idempotency key is required")
	}
	if req.Reference == "" {
		// Without a reference an unknown outcome could never be looked up.
		return Outcome{}, fmt.Errorf("authorize %s: reference is required", req.IdempotencyKey)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Outcome{}, fmt.Errorf("authorize %s: encode request: %w", req.IdempotencyKey, err)
	}
	out, err := c.settle(ctx, req.FirstSend,
		func(ctx context.Context) (Outcome, error) { return c.send(ctx, req, body) },
		func(ctx context.Context) (Outcome, bool, error) {
			list, err := c.Lookup(ctx, req.Reference)
			if err != nil || len(list) == 0 {
				return Outcome{}, false, err
			}
			found := pickAuthorization(list)
			return Outcome{Class: Classify(200, found.Status, nil), Authorization: found}, true, nil
		})
	out.Call, out.Key = CallAuthorize, req.IdempotencyKey
	if err != nil {
		return out, fmt.Errorf("authorize %s: %w", req.IdempotencyKey, err)
	}
	return out, nil
}

// Authorize is AuthorizeOutcome for callers that want an authorization or
// an error: a success or a decline comes back as the Authorization
// (Status says which); every other class as its error (ErrRejected,
// ErrBusy, ErrUnavailable), or context.Canceled.
func (c *Client) Authorize(ctx context.Context, req AuthorizeRequest) (Authorization, error) {
	out, err := c.AuthorizeOutcome(ctx, req)
	if err != nil {
		return Authorization{}, err
	}
	return out.Authorization, nil
}

// pickAuthorization picks the authorization to record among those a lookup
// found: the first authorized one, else the first (a decline).
func pickAuthorization(list []Authorization) Authorization {
	for _, a := range list {
		if a.Status == StatusAuthorized {
			return a
		}
	}
	return list[0]
}

// settle applies the contract's rule for one attempt of one operation (see
// AuthorizeOutcome) to send, which sends the operation once and classifies
// the answer, and look, which looks it up by reference and reports whether
// it was found, with its outcome. The error is not yet wrapped with the
// operation's name.
func (c *Client) settle(
	ctx context.Context,
	firstSend bool,
	send func(context.Context) (Outcome, error),
	look func(context.Context) (Outcome, bool, error),
) (Outcome, error) {
	fail := func(out Outcome, err error) (Outcome, error) {
		return out, fmt.Errorf("after %d sends and %d lookups: %w", out.Sent, out.Lookups, err)
	}
	pauses := &backoff.ExponentialBackOff{
		InitialInterval:     c.cfg.InitialBackoff,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         c.cfg.MaxBackoff,
	}
	pauses.Reset()

	var (
		out     Outcome // the last send's, with the counts of the whole call
		lastErr error
		sent    int
		lookups int
	)
	lookFirst := !firstSend
	for {
		if lookFirst {
			found, ok, err := look(ctx)
			lookups++
			if err != nil {
				out.Class, out.Authorization, out.Operation, out.Reason = ClassUnknown, Authorization{}, Operation{}, err.Error()
				out.Sent, out.Lookups = sent, lookups
				if lastErr != nil && !errors.Is(err, context.Canceled) {
					// Keep what the send saw; the class is the lookup's.
					err = fmt.Errorf("%w (after: %v)", err, lastErr)
				}
				return fail(out, err)
			}
			if ok {
				found.StatusCode, found.FoundByLookup = 200, true
				found.Sent, found.Lookups = sent, lookups
				return found, nil
			}
		}
		if sent == c.cfg.MaxAttempts {
			// Only after a lookup that found nothing: the outcome of the last
			// send is still unknown (it may be in flight at the PSP).
			out.Sent, out.Lookups = sent, lookups
			return fail(out, fmt.Errorf("not found by lookup: %w", lastErr))
		}

		out, lastErr = send(ctx)
		sent++
		out.Sent, out.Lookups = sent, lookups
		var pause time.Duration
		switch out.Class {
		case ClassSuccess, ClassFinalFailure:
			if lastErr != nil {
				return fail(out, lastErr)
			}
			return out, nil
		case ClassBusy:
			if sent == c.cfg.MaxAttempts || out.RetryAfter > c.cfg.MaxBackoff {
				return fail(out, lastErr)
			}
			lookFirst = false
			pause = max(pauses.NextBackOff(), out.RetryAfter)
		default:
			if ctx.Err() != nil {
				return fail(out, lastErr)
			}
			lookFirst = true
			pause = pauses.NextBackOff()
		}
		if err := sleep(ctx, pause); err != nil {
			if errors.Is(err, context.Canceled) {
				// %v: a caller leaving must not look like the PSP's doing.
				return fail(out, fmt.Errorf("%w (last send: %v)", err, lastErr))
			}
			// Out of time: the class stays the last send's.
			return fail(out, fmt.Errorf("%w: %w", lastErr, err))
		}
	}
}

// sleep pauses for d unless ctx ends first, and then says why it ended.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		err := ctx.Err()
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, err) {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		return err
	}
}
