package idempotency

import (
	"errors"
	"fmt"
)

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
	// ErrNotDue: the key is unfinished and its next scheduled attempt is
	// not due yet (see NotDue).
	ErrNotDue = errors.New("idempotency key's next attempt is not due yet")
	// ErrUnresolved: the key needs an operator's attention (see Unresolved).
	ErrUnresolved = errors.New("idempotency key needs attention")
	// ErrFinished: an operator asked to retry a key that is done.
	ErrFinished = errors.New("idempotency key is finished")
	// ErrNotNeedsAttention: an operator asked to resolve a key that does not
	// need attention.
	ErrNotNeedsAttention = errors.New("idempotency key does not need attention")
)

// WaitError answers a request whose key is unfinished and free but whose
// next scheduled attempt is not due: the client is told when to come back,
// and nothing is sent anywhere meanwhile. It wraps ErrNotDue.
type WaitError struct {
	// RetryAfter is the number of whole seconds until the attempt is due
	// (at least 1).
	RetryAfter int
	// ObjectID is what the request created so far (a charge id), if any.
	ObjectID string
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("%v: due in %ds", ErrNotDue, e.RetryAfter)
}

func (e *WaitError) Unwrap() error { return ErrNotDue }

// RetryAfterSeconds is what the client is told to wait (Retry-After).
func (e *WaitError) RetryAfterSeconds() int { return max(e.RetryAfter, 1) }

// Object names what the request created, for the answer.
func (e *WaitError) Object() string { return e.ObjectID }
