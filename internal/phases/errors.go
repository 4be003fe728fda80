package phases

import (
	"errors"
	"fmt"
)

// ErrPSPUnavailable: the PSP did not answer after the client's retries (or
// was busy). The key was released at its last recovery point and resumes on
// retry.
var ErrPSPUnavailable = errors.New("payment service provider unavailable")

// ErrObjectIDTaken: the object id Operation.ObjectID derived for a new
// object is held by an object of an earlier incarnation of the key (the
// same key and request, claimed again after retention forgot the key). The
// operation's storage returns it (wrapped) from the arrow that inserts the
// object; the engine rolls the transaction back and derives the next
// incarnation's id (ObjectIDAttempts).
var ErrObjectIDTaken = errors.New("object id taken by an earlier incarnation of the key")

// UnavailableError is ErrPSPUnavailable with what the client is told: the
// object that exists (if any) and when its next attempt is due. The key was
// released at its last recovery point and its next attempt scheduled.
type UnavailableError struct {
	ObjectID   string
	RetryAfter int
	Cause      error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v: %v (next attempt in %ds)", ErrPSPUnavailable, e.Cause, e.RetryAfter)
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrPSPUnavailable, e.Cause} }

// RetryAfterSeconds is what the client is told to wait (Retry-After).
func (e *UnavailableError) RetryAfterSeconds() int { return max(e.RetryAfter, 1) }

// Object names the object (a charge), once it exists.
func (e *UnavailableError) Object() string { return e.ObjectID }
