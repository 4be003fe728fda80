package idempotency

import "errors"

// Sentinel errors for the outcomes callers branch on.
var (
	// ErrKeyMissing: the request carries no Idempotency-Key.
	ErrKeyMissing = errors.New("idempotency key missing")
	// ErrKeyInvalid: the key is not 1 to 255 visible ASCII characters.
	ErrKeyInvalid = errors.New("idempotency key invalid")
	// ErrBodyInvalid: the body is not JSON that can be canonicalised.
	ErrBodyInvalid = errors.New("request body invalid")
	// ErrMismatch: the key was used before for a different request.
	ErrMismatch = errors.New("idempotency key reused with a different request")
	// ErrInProgress: another worker holds a valid lease on the key.
	ErrInProgress = errors.New("idempotency key in use by a request in progress")
	// ErrLeaseLost: this worker's lease was taken over (its lock_version is
	// stale) or the key was finished by someone else; it must roll back and
	// stop without answering from its own work.
	ErrLeaseLost = errors.New("idempotency lease lost")
	// ErrNotFound: no such key.
	ErrNotFound = errors.New("idempotency key not found")
)
