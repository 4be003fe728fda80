package phases

import "github.com/phasepay/phasepay/internal/idempotency"

// The names an operation needs from the key's store, so that it imports
// phases alone.

// Point is a recovery point, the last phase of a request that committed.
type Point = idempotency.RecoveryPoint

// The recovery points every operation has.
const (
	// Start is a request claimed and nothing else committed.
	Start = idempotency.PointStart
	// Done is a request whose response is stored.
	Done = idempotency.PointDone
)

// Response is a request's final answer, stored with its key and replayed
// byte for byte to every retry.
type Response = idempotency.Response

// Request is a request parsed and fingerprinted, as its key stores it.
type Request = idempotency.Canonical

// NewRequest returns the request of params, parsed from a body already. It
// holds their canonical JSON and its fingerprint.
func NewRequest(method, path string, params any) (Request, error) {
	return idempotency.CanonicalizeParams(method, path, params)
}
