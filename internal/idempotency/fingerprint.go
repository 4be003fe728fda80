package idempotency

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
)

// Fingerprint identifies a request for the purpose of its key: two requests
// with the same key are "the same request" exactly when their fingerprints are
// equal.
type Fingerprint [sha256.Size]byte

// Canonical is a request reduced to what its fingerprint covers. Body is the
// RFC 8785 canonical form of the request as parsed: the form that is stored,
// so that a takeover resumes from exactly what was fingerprinted.
type Canonical struct {
	Method      string
	Path        string
	Body        []byte
	Fingerprint Fingerprint
	// Params is what the operation parsed Body from, when the request is
	// this process's own (CanonicalizeParams sets it): its first phase
	// need not decode and validate the body again. It is nil for a request
	// read back from storage (a takeover), which parses Body.
	Params any
}

// CanonicalizeParams is how a request is fingerprinted: params is the
// request's body as parsed and validated (a struct, never the client's
// bytes), and its JSON encoding is what Canonicalize fingerprints and what is
// stored.
//
// Fingerprinting the client's bytes instead is a hole: a decoder and a
// canonicaliser that read one body differently (encoding/json keeps the last
// of "amount" and "AMOUNT", a canonicaliser keeps both) let one fingerprint
// stand for two different executions. Encoding what was parsed closes it by
// construction: two requests share a fingerprint only if they encode alike,
// and the stored body decodes back to the very parameters that ran. So the
// encoding must be injective on what executes: an optional member that is
// absent and one that is null or empty but executes the same must encode
// alike (omitempty), and two that execute differently must not.
func CanonicalizeParams(method, path string, params any) (Canonical, error) {
	switch params.(type) {
	case []byte, json.RawMessage, string:
		return Canonical{}, fmt.Errorf("canonicalize %s %s: takes the parsed request, not raw JSON (%T)", method, path, params)
	}
	body, err := json.Marshal(params)
	if err != nil {
		return Canonical{}, fmt.Errorf("canonicalize %s %s: %w", method, path, err)
	}
	if len(body) == 0 || body[0] != '{' {
		return Canonical{}, fmt.Errorf("canonicalize %s %s: %T does not encode as a JSON object", method, path, params)
	}
	c, err := Canonicalize(method, path, body)
	c.Params = params
	return c, err
}

// Canonicalize computes the fingerprint of a request: SHA-256 over the method,
// the path and the RFC 8785 canonical JSON body (sorted keys, normalised
// numbers and strings, no insignificant white space), so that re-ordered or
// re-indented JSON is the same request. Headers are not part of it.
//
// body must be the encoding of the request as parsed, never the bytes a
// client sent: see CanonicalizeParams, which request handlers use.
//
// Note what canonical JSON implies: numbers are IEEE 754 doubles, so two
// integers above 2^53 may canonicalise alike. Callers that carry such numbers
// must bound them (charges caps amounts at 2^53-1).
func Canonicalize(method, path string, body []byte) (Canonical, error) {
	canon, err := jcs.Transform(body)
	if err != nil {
		return Canonical{}, fmt.Errorf("%w: canonical JSON: %w", ErrBodyInvalid, err)
	}
	return Canonical{Method: method, Path: path, Body: canon, Fingerprint: fingerprint(method, path, canon)}, nil
}

// RawFingerprint is the fingerprint a request would have if body, as it
// came, were already its canonical form: the hash Canonicalize computes,
// over the client's bytes untransformed.
//
// It may only ever confirm equality, never decide anything else. Equal to a
// stored key's fingerprint, it says (SHA-256) that method, path and body
// are byte for byte the stored request's, whose canonical body was parsed,
// validated and encoded by CanonicalizeParams when the key was claimed: the
// same request, whose answer the key holds, however its parser would read
// it now. Fingerprinting the client's bytes is a hole only where it decides
// what runs or that two requests differ (pitfall H1 "One body, read two
// ways"): a raw fingerprint that differs from the stored one says nothing,
// since another encoding of the same request is legal, so the request must
// then be parsed and fingerprinted as always, and no raw fingerprint is
// ever stored.
func RawFingerprint(method, path string, body []byte) Fingerprint {
	return fingerprint(method, path, body)
}

// fingerprint is the one hash of every fingerprint, canonical or raw, so
// that the two can never drift apart.
func fingerprint(method, path string, body []byte) Fingerprint {
	h := sha256.New()
	// Length-prefixed, so no choice of method and path can collide with another.
	fmt.Fprintf(h, "%d:%s%d:%s", len(method), method, len(path), path)
	h.Write(body)
	var fp Fingerprint
	h.Sum(fp[:0])
	return fp
}
