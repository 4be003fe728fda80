package phases

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Raw is a request as it came: its method and path, its body unparsed, and
// how to parse it.
type Raw struct {
	// Method and Path are those Parse fingerprints the request under
	// (DoRaw checks it whenever it parses).
	Method, Path string
	Body         []byte
	// Parse decodes and validates body and fingerprints what it parsed
	// (idempotency.CanonicalizeParams). Its error refuses the request
	// before its key decides anything.
	Parse func(body []byte) (idempotency.Canonical, error)
}

// ParseError is Raw.Parse's refusal of a request (a 400): nothing was
// decided about its key, nothing stored.
type ParseError struct{ Err error }

func (e *ParseError) Error() string { return e.Err.Error() }
func (e *ParseError) Unwrap() error { return e.Err }

// DoRaw is Do for a request as it came, which it parses only when its key
// cannot answer it as it is: a retry of a finished request, the bytes of
// its first attempt, is answered by one read, without the strict decoding,
// validation and canonicalisation that cost a replay as much as that read.
//
// A key this process has seen (keyHints: probably a retry) is read first,
// before its request is parsed. When the body's raw fingerprint is the
// stored fingerprint (idempotency.RawFingerprint), the body is the stored
// canonical body, byte for byte, of a request that was parsed and validated
// when the key was claimed: the same request, so the read answers what it
// answers for Do (a replay, an attempt not yet due, a request waiting for
// an operator; not a mismatch, which equal fingerprints cannot be). In
// every other case the request is parsed and fingerprinted as always, and
// goes on as Do with the read already made: another encoding of the same
// request (reordered members, white space) is the same request, and only
// the canonical fingerprint may decide that a request differs or runs.
//
// Besides Do's errors, a *ParseError holding Parse's.
func DoRaw[S any](ctx context.Context, e *Engine, op *Operation[S], tenantID int64, key string, raw Raw) (_ Result, err error) {
	day, ok := e.hints.seen(tenantID, key)
	if !ok {
		// Most likely new: parsed first, as always, and its claim reads
		// the key if it exists.
		req, err := raw.parse()
		if err != nil {
			return Result{}, err
		}
		return Do(ctx, e, op, tenantID, key, req)
	}
	ctx, span := e.tel.tracer.Start(ctx, op.Span, trace.WithAttributes(attrTenant.Int64(tenantID)))
	defer func() { endSpan(span, err) }()
	nameRequest(span, op.Span, key, "")
	seen := e.peek(ctx, tenantID, key, day)
	if seen.err == nil {
		fp := idempotency.RawFingerprint(raw.Method, raw.Path, raw.Body)
		if seen.rec.Request.Fingerprint == fp {
			switch idempotency.Decide(seen.rec, fp) {
			case idempotency.Replay, idempotency.NotDue, idempotency.Unresolved:
				return existing(ctx, e, op, seen.rec, fp)
			}
		}
	}
	// A read that failed is Do's error once the request is known valid:
	// an invalid body is a 400 whatever the database, as it always was.
	req, err := raw.parse()
	if err != nil {
		return Result{}, err
	}
	return do(ctx, e, op, tenantID, key, req, seen)
}

// parse parses the request, and refuses one fingerprinted under another
// method or path than it came with: its raw fingerprint would then be
// compared with another request's.
func (r Raw) parse() (idempotency.Canonical, error) {
	req, err := r.Parse(r.Body)
	if err != nil {
		return idempotency.Canonical{}, &ParseError{Err: err}
	}
	if req.Method != r.Method || req.Path != r.Path {
		return idempotency.Canonical{}, fmt.Errorf("phases: a request to %s %s was fingerprinted as %s %s", r.Method, r.Path, req.Method, req.Path)
	}
	return req, nil
}
