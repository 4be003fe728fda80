package idempotency

import (
	"crypto/sha256"
	"fmt"

	"github.com/gowebpki/jcs"
)

// Fingerprint identifies a request for the purpose of its key: two requests
// with the same key are "the same request" exactly when their fingerprints are
// equal.
type Fingerprint [sha256.Size]byte

// Canonical is a request reduced to what its fingerprint covers. Body is the
// RFC 8785 canonical form of the JSON body: the form that is stored, so that a
// takeover resumes from exactly what was fingerprinted.
type Canonical struct {
	Method      string
	Path        string
	Body        []byte
	Fingerprint Fingerprint
}

// Canonicalize computes the fingerprint of a request: SHA-256 over the method,
// the path and the RFC 8785 canonical JSON body (sorted keys, normalised
// numbers and strings, no insignificant white space), so that re-ordered or
// re-indented JSON is the same request. Headers are not part of it.
//
// Note what canonical JSON implies: numbers are IEEE 754 doubles, so two
// integers above 2^53 may canonicalise alike. Callers that carry such numbers
// must bound them (charges caps amounts at 2^53-1).
func Canonicalize(method, path string, body []byte) (Canonical, error) {
	canon, err := jcs.Transform(body)
	if err != nil {
		return Canonical{}, fmt.Errorf("%w: canonical JSON: %w", ErrBodyInvalid, err)
	}
	h := sha256.New()
	// Length-prefixed, so no choice of method and path can collide with another.
	fmt.Fprintf(h, "%d:%s%d:%s", len(method), method, len(path), path)
	h.Write(canon)
	var fp Fingerprint
	h.Sum(fp[:0])
	return Canonical{Method: method, Path: path, Body: canon, Fingerprint: fp}, nil
}
