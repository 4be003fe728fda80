package psp

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Class is what a PSP answer means for the operation that got it: the
// section "How a PSP answer ends a request" of docs/api.md. Callers
// branch on the class alone, so the api and the reaper, which drive the
// same state machine, can never treat one answer two ways.
type Class int

const (
	// ClassUnknown: no usable answer (5xx, a timeout, a connection error, an
	// answer lost or malformed, any status the contract does not name). The
	// PSP may or may not have acted, so before anything is sent again the
	// operation is looked up by reference. It is the zero value on purpose:
	// an Outcome nobody filled in is never mistaken for an answer, and
	// unknown is the one class that is always safe to assume, since it
	// looks before it resends and ends in needs_attention, never in a wrong
	// final answer.
	ClassUnknown Class = iota
	// ClassSuccess: a 2xx with a result (authorized, captured, voided,
	// refunded); record it with the next recovery point.
	ClassSuccess
	// ClassFinalFailure: a 2xx decline (Outcome.Declined), or a request the
	// PSP refused without doing anything (400, 404, 422). Stored as the
	// operation's end; never sent again.
	ClassFinalFailure
	// ClassBusy: 409 or 429. Nothing was done yet; send again later under
	// the same key, honouring Outcome.RetryAfter.
	ClassBusy
)

// String is the class as the contract names it, for logs and metrics.
func (c Class) String() string {
	switch c {
	case ClassSuccess:
		return "success"
	case ClassFinalFailure:
		return "final_failure"
	case ClassBusy:
		return "busy"
	default:
		return "unknown"
	}
}

// successResults are the 2xx results that mean the PSP did what was asked.
// Anything else in a 2xx, "pending" say, is not a result this service
// knows how to record, so it is unknown rather than a guess.
var successResults = map[string]bool{
	StatusAuthorized: true,
	StatusCaptured:   true,
	StatusVoided:     true,
	StatusRefunded:   true,
	"succeeded":      true,
}

// Classify is the one place a PSP answer gets its class. status is the HTTP
// status (0 when no answer arrived), result the status field of a 2xx
// body ("authorized", "declined", ...; empty if it had none) and err what
// went wrong sending the request or reading and decoding the answer.
//
// Any error makes the outcome unknown, whatever the status: an answer that
// cannot be read completely may have been a success.
func Classify(status int, result string, err error) Class {
	switch {
	case err != nil:
		return ClassUnknown
	case status >= 200 && status < 300:
		switch {
		case result == StatusDeclined:
			return ClassFinalFailure
		case successResults[result]:
			return ClassSuccess
		default:
			return ClassUnknown
		}
	}
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity:
		return ClassFinalFailure
	case http.StatusConflict, http.StatusTooManyRequests:
		return ClassBusy
	default:
		// 5xx, and also 401/403 (our credentials: nothing done, but a
		// configuration fix must not find the charge already failed), 408,
		// 1xx and 3xx.
		return ClassUnknown
	}
}

// ParseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date, relative to now. Absent, malformed or past values are 0, which
// callers read as "no advice".
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Capped well below overflow; a PSP asking for more than a day
		// is asking for the retry schedule's maximum anyway.
		return time.Duration(min(secs, 7*24*3600)) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// Outcome is the result of one call of this package's client: its class
// and what the caller needs to act on it.
type Outcome struct {
	// Class decides what the caller does; see Class.
	Class Class
	// Authorization is the PSP's result of an authorization: set for
	// ClassSuccess and for a decline (ClassFinalFailure with Declined()
	// true), zero otherwise.
	Authorization Authorization
	// Operation is the PSP's result of a capture, void or refund: set for
	// ClassSuccess, zero otherwise.
	Operation Operation
	// StatusCode is the HTTP status of the last answer the PSP gave for the
	// operation, 0 if none arrived.
	StatusCode int
	// Reason is, for a refusal (a final failure without a result) or a
	// busy answer, the PSP's own reason field, fit for the detail of a 402
	// payment_failed, or the public words of the answer when it gave none;
	// for an unknown outcome, its public words. Never an answer body or an
	// address (see Failure).
	Reason string
	// RetryAfter is, for ClassBusy, the PSP's Retry-After: the earliest the
	// caller should send again (0 if the PSP gave none).
	RetryAfter time.Duration
	// Sent counts the operation's requests sent during the call (resends
	// under the same key included); Lookups the lookups by reference.
	Sent, Lookups int
	// FoundByLookup reports that Authorization came from a lookup by
	// reference, after an unknown outcome, rather than from an answer.
	FoundByLookup bool
	// NewKey, with ClassUnknown, says the attempt's key can do nothing
	// more at the PSP (the PSP saved a 5xx under it and replays it, or the
	// key is past the PSP's key window) and a lookup found nothing yet. The
	// outcome stays unknown, but unlike any other unknown outcome it is
	// committed (internal/phases): the charge records a new attempt at the
	// same PSP under a new derived key (internal/charges), which the PSP's
	// connector sends only once its lookup proves the old key did nothing.
	// Only an authorization sets it.
	NewKey bool
	// PSP names the PSP that gave the outcome, when a router chose among
	// several (internal/routing); empty from a Client alone.
	PSP string
	// Call names the operation (CallAuthorize, or an OperationKind's Call:
	// capture, void, refund) and Key the idempotency key it was sent
	// under, for the request's timeline; empty when the call was not made
	// through AuthorizeOutcome or OperateOutcome.
	Call, Key string
}

// CallAuthorize is Outcome.Call for an authorization.
const CallAuthorize = "authorize"

// Declined reports whether the outcome is a decline: a final failure that
// carries the PSP's result (and its id), unlike a refusal.
func (o Outcome) Declined() bool {
	return o.Class == ClassFinalFailure && o.Authorization.Status == StatusDeclined
}
