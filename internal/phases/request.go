package phases

import (
	"fmt"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Request is one request as Do receives it: parsed already (Parsed), or as
// it came (AsSent), which Do parses only when its key cannot answer it as
// it is.
type Request struct {
	parsed idempotency.Canonical
	raw    *Raw
}

// Parsed is a request already parsed and fingerprinted
// (idempotency.CanonicalizeParams).
func Parsed(req idempotency.Canonical) Request { return Request{parsed: req} }

// AsSent is a request as it came. A retry of a finished request, the bytes
// of its first attempt, is then answered by one read, without the strict
// decoding, validation and canonicalisation that cost a replay as much as
// that read (see Do).
func AsSent(raw Raw) Request { return Request{raw: &raw} }

// Raw is a request as it came: its method and path, its body unparsed, and
// how to parse it.
type Raw struct {
	// Method and Path are those Parse fingerprints the request under (Do
	// checks it whenever it parses).
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

// parse returns the parsed request. A raw one is parsed, and refused when
// it was fingerprinted under another method or path than it came with:
// its raw fingerprint would then be compared with another request's.
func (r Request) parse() (idempotency.Canonical, error) {
	if r.raw == nil {
		return r.parsed, nil
	}
	req, err := r.raw.Parse(r.raw.Body)
	if err != nil {
		return idempotency.Canonical{}, &ParseError{Err: err}
	}
	if req.Method != r.raw.Method || req.Path != r.raw.Path {
		return idempotency.Canonical{}, fmt.Errorf("phases: a request to %s %s was fingerprinted as %s %s",
			r.raw.Method, r.raw.Path, req.Method, req.Path)
	}
	return req, nil
}
