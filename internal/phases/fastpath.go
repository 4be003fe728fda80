package phases

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// The fast paths, in front of the claim.
//
// A key this process has seen (keyHints) is probably a retry, and is read
// first with a plain read of its row. That read answers a replay, a
// mismatch, an attempt not yet due and a request waiting for an operator,
// without the claim's lock and its failed check. Anything else goes on to
// the claim, which reads the whole row again.
//
// A body AsSent whose key was seen is read before it is even parsed. When
// its raw fingerprint is the stored one (idempotency.RawFingerprint), the
// body is byte for byte the canonical body the claim stored, parsed and
// validated then. So the read answers it as it would the parsed request.
// Any other body is parsed and fingerprinted as always. Reordered members
// or white space are the same request, and only the canonical fingerprint
// decides that a request differs. The raw hash never decides a mismatch,
// and is never stored.
//
// Either path is correct. A wrong guess costs one read more, never another
// answer.

// fastPath answers a probable retry from one read. Otherwise it returns the
// parsed request for the claim (answered false). It never reads a key
// twice before its claim.
func fastPath[S any](ctx context.Context, e *Engine, op *Operation[S], tenantID int64, key, path string, body Body) (parsed Request, res Result, answered bool, err error) {
	day, seen := e.hints.seen(tenantID, key)
	if !seen {
		// Most likely new: parsed first, as always, and its claim reads
		// the key if it exists.
		parsed, err = op.parse(path, body)
		return parsed, Result{}, err != nil, err
	}
	peek := e.peek(ctx, tenantID, key, day)
	if peek.err == nil && body.parsed == nil {
		fp := idempotency.RawFingerprint(op.Method, path, body.sent)
		if peek.rec.Request.Fingerprint == fp {
			switch idempotency.Decide(peek.rec, fp) {
			case idempotency.Replay, idempotency.NotDue, idempotency.Unresolved:
				res, err = answer(ctx, e, op, peek.rec, fp)
				return Request{}, res, true, err
			}
		}
	}
	// A read that failed is the request's error once the request is known
	// valid: an invalid body is a 400 whatever the database.
	if parsed, err = op.parse(path, body); err != nil {
		return Request{}, Result{}, true, err
	}
	switch {
	case peek.err == nil:
		switch idempotency.Decide(peek.rec, parsed.Fingerprint) {
		case idempotency.Replay, idempotency.Mismatch, idempotency.NotDue, idempotency.Unresolved:
			res, err = answer(ctx, e, op, peek.rec, parsed.Fingerprint)
			return parsed, res, true, err
		}
	case !errors.Is(peek.err, idempotency.ErrNotFound):
		return parsed, Result{}, true, fmt.Errorf("%s: %w", op.Name, peek.err)
	}
	return parsed, Result{}, false, nil
}

// peeked is the read of a seen key before its claim. It holds the record,
// or why there was none.
type peeked struct {
	rec idempotency.Record
	err error
}

// peek reads the key in the partition of day, the day its hint knows, or
// else through its heads (idempotency.PeekDay). It corrects the hint's day
// for the next retry when the day was missing or wrong.
func (e *Engine) peek(ctx context.Context, tenantID int64, key string, day time.Time) peeked {
	rec, fromDay, err := e.keys.PeekDay(ctx, e.pool, tenantID, key, day)
	if err == nil && !fromDay {
		if !day.IsZero() && dayOf(rec.CreatedAt) == dayOf(day) {
			e.hints.noDay(tenantID, key)
		} else {
			e.hints.add(tenantID, key, rec.CreatedAt)
		}
	}
	return peeked{rec: rec, err: err}
}
