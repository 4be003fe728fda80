package phases

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Class is what a foreign call's answer means to the engine.
//
// The class alone decides what comes next, so the api and the reaper can
// never treat one answer two ways. An operation maps its service's answer
// into a class (charges maps a PSP's with psp.Classify).
type Class int

const (
	// Unknown is no usable answer. The service may or may not have acted.
	// The run is released, and its next call starts with a lookup. It is
	// the zero value, so an outcome nobody filled in is never an answer.
	Unknown Class = iota
	// Success is the service having done what was asked. The phase commits it.
	Success
	// Final is a refusal or a decline. The service did nothing and never
	// will under this call. The phase commits it.
	Final
	// Busy is the service asking to be called later. It did nothing yet.
	// The run is released until RetryAfter at the soonest.
	Busy
)

// String is the class as the request's timeline and the metrics name it.
func (c Class) String() string {
	switch c {
	case Success:
		return "success"
	case Final:
		return "final_failure"
	case Busy:
		return "busy"
	}
	return "unknown"
}

// CallOutcome is what a phase's foreign call returns. It holds the class,
// and what the engine records of the call.
type CallOutcome struct {
	Class Class
	// RetryAfter is, for Busy, the earliest the call may be made again (the
	// service's Retry-After). Zero is no advice.
	RetryAfter time.Duration
	// Renew, with Unknown, says the call cannot be made again as it was,
	// because the service spent its key. The phase commits instead of the run being
	// released. It records how the next call differs and returns Again.
	Renew bool
	// Result names the answer on the call duration metric ("authorized",
	// "declined"). Empty is the class's name.
	Result string
	// Service, Call and Key name the call on the request's timeline. They
	// are the service, what was asked of it, and the key it was sent under.
	Service, Call, Key string
	// Status is the HTTP status of the service's last answer, or 0.
	// Sends and Lookups count the requests and lookups the call made.
	Status, Sends, Lookups int
}

// ErrUnavailable is the called service not answering, or busy. The run
// was released at its last recovery point and resumes on a retry.
var ErrUnavailable = errors.New("the called service is unavailable")

// Unavailable marks a call's error as the service being unavailable. A
// run released after it answers with an *UnavailableError. The text stays
// err's.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return unavailable{err}
}

type unavailable struct{ error }

func (u unavailable) Unwrap() []error { return []error{ErrUnavailable, u.error} }

// UnavailableError is ErrUnavailable with what the client is told. That is
// the object that exists, if any, and when the next attempt is due.
type UnavailableError struct {
	ObjectID   string
	RetryAfter int
	Cause      error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v: %v (next attempt in %ds)", ErrUnavailable, e.Cause, e.RetryAfter)
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Cause} }

// RetryAfterSeconds is what the client is told to wait (Retry-After).
func (e *UnavailableError) RetryAfterSeconds() int { return max(e.RetryAfter, 1) }

// Object names the object (a charge), once it exists.
func (e *UnavailableError) Object() string { return e.ObjectID }

// call makes a foreign call under the lease, kept alive by a heartbeat.
//
// A heartbeat that finds the lease taken over stops the call with
// ErrLeaseLost. Whatever is still in flight is the new holder's to find
// out. The heartbeat stops before call returns, so it never renews a lease
// the caller then releases.
func (e *Engine) call(ctx context.Context, lease *idempotency.Lease, fn func(context.Context) (CallOutcome, error)) (CallOutcome, error) {
	callCtx, stopCall := context.WithCancelCause(ctx)
	hbCtx, stop := context.WithCancel(ctx)
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		lease.Heartbeat(hbCtx, e.pool, func(err error) { stopCall(err) })
	}()
	defer func() { stop(); <-beat; stopCall(nil) }()
	start := time.Now()
	out, err := fn(callCtx)
	e.recordCall(ctx, start, out)
	noteCall(lease, out, time.Since(start))
	if cause := context.Cause(callCtx); errors.Is(cause, idempotency.ErrLeaseLost) {
		return out, fmt.Errorf("call stopped: %w", cause)
	}
	return out, err
}

// noteCall notes a foreign call on the lease for the request's timeline.
// The holder's next write, its commit or its release, records it.
func noteCall(lease *idempotency.Lease, out CallOutcome, took time.Duration) {
	ms := took.Round(time.Millisecond).Milliseconds()
	e := idempotency.Entry{
		Kind: idempotency.KindPSPCall, PSP: out.Service, Operation: out.Call, PSPKey: out.Key,
		Outcome: out.Class.String(), DurationMS: &ms, Sends: &out.Sends, Lookups: &out.Lookups,
	}
	if out.Status != 0 {
		e.Status = &out.Status
	}
	lease.Note(e)
}
