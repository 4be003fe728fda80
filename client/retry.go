package client

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The retry loop is written by hand rather than with
// github.com/cenkalti/backoff/v5, whose Retry does not fit three rules of
// this client:
//   - full jitter: its ExponentialBackOff randomizes around the interval
//     (interval ± factor·interval), so the draw is never uniform over
//     [0, cap] and, with factor 1, exceeds the cap;
//   - Retry-After as a lower bound: its RetryAfterError replaces the next
//     sleep and resets the backoff, and carries no cause, so the last
//     answer (the typed *Error callers need) would be lost;
//   - the final error: it returns the bare last error or the context's
//     cause, where we want ErrGaveUp and the last answer together.
// The loop below is short enough to read in one go.

// outcome is what one attempt came to.
type outcome struct {
	// status is the HTTP status, 0 when no answer arrived.
	status int
	// err is nil on success.
	err error
	// retry says that the same request may still succeed or be answered
	// differently: a network error, 409, 429 or 5xx.
	retry bool
	// unsettled says that an answer that is not retried is not final
	// either: the outcome is unknown until someone else acts
	// (payment_unresolved), so the intent must stay journaled.
	unsettled bool
	// retryAfter is the server's Retry-After, a lower bound for the sleep.
	retryAfter time.Duration
}

// retry calls attempt until it succeeds or fails finally, sleeping between
// attempts with full jitter, within Config.MaxElapsed and ctx. Attempts are
// numbered from 1. settled reports that the last attempt was final (success
// or an answer that retrying cannot change) rather than the loop giving up,
// ctx ending, or an answer that stops the retries without being final
// (payment_unresolved).
//
// Whatever attempt sends, it sends it again: retry knows nothing of keys,
// and is handed no way to make one.
func (c *Client) retry(ctx context.Context, attempt func(ctx context.Context, n int) outcome) (settled bool, err error) {
	start := time.Now()
	deadline := start.Add(c.cfg.MaxElapsed)
	// An attempt still running at the deadline is cut off: the deadline is
	// the total budget, not a point after which no new attempt starts.
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	var prev error
	for n := 1; ; n++ {
		o := attempt(actx, n)
		if o.err == nil || !o.retry {
			return !o.unsettled, o.err
		}
		last := o.err
		if actx.Err() != nil && ctx.Err() == nil && prev != nil {
			// The deadline cut this attempt short; its "context deadline
			// exceeded" says less than the answer before it (a 503, a
			// refused connection), so report both.
			last = fmt.Errorf("%w; before that: %w", o.err, prev)
		}
		prev = o.err
		if ctx.Err() != nil {
			return false, fmt.Errorf("%w after %d attempts (last: %w)", context.Cause(ctx), n, last)
		}
		wait := max(c.jitter(n-1), o.retryAfter)
		// Sleeping past the deadline only to give up after it would be
		// pointless, so give up now.
		if time.Until(deadline) < wait {
			return false, fmt.Errorf("%w after %d attempts in %s: %w",
				ErrGaveUp, n, time.Since(start).Round(time.Millisecond), last)
		}
		if err := c.sleep(ctx, wait); err != nil {
			return false, fmt.Errorf("%w after %d attempts (last: %w)", err, n, last)
		}
	}
}

// jitter draws the sleep before retry number n (0 for the first retry).
func (c *Client) jitter(n int) time.Duration {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return fullJitter(c.rng, c.cfg.InitialBackoff, c.cfg.MaxBackoff, n)
}

// fullJitter returns a duration drawn uniformly from [0, min(ceiling,
// initial·2^n)] ("full jitter"): clients that failed together spread out over
// the whole window instead of returning together at its end.
func fullJitter(r *rand.Rand, initial, ceiling time.Duration, n int) time.Duration {
	window := initial
	// Doubling step by step, stopping at the ceiling, cannot overflow the
	// way initial<<n would for large n.
	for i := 0; i < n && window < ceiling; i++ {
		if window > ceiling/2 {
			window = ceiling
			break
		}
		window *= 2
	}
	window = min(window, ceiling)
	if window <= 0 {
		return 0
	}
	if window == math.MaxInt64 {
		return time.Duration(r.Int64N(int64(window))) // +1 would overflow
	}
	return time.Duration(r.Int64N(int64(window) + 1))
}

// sleepCtx waits for d or until ctx ends, returning ctx's cause then.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// parseRetryAfter reads a Retry-After header: delay-seconds as the contract
// sends it, or an HTTP-date as RFC 9110 also allows. Anything else is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		// Cap far beyond any MaxElapsed rather than overflow.
		return time.Duration(min(s, 1<<30)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
