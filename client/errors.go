package client

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Sentinels for the outcomes a caller branches on, matched with errors.Is
// against the *Error a call returns (see Error.Is).
var (
	// ErrDeclined: 402 card_declined. The charge exists with status
	// declined; its id is in Error.Problem.Charge. Final.
	ErrDeclined = errors.New("card declined")
	// ErrMismatch: 422, the key was already used for a different request.
	// Final: a new request needs a new intent.
	ErrMismatch = errors.New("idempotency key used for a different request")
	// ErrInvalidRequest: 400 (invalid body or key) or 413 (body too
	// large). Final; nothing was stored, so a corrected request may reuse
	// the key.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnauthorized: 401, the API key is missing or unknown. Final.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrNotFound: 404, no such charge for this tenant. Final.
	ErrNotFound = errors.New("not found")
	// ErrInProgress: 409, a request with the same key is still running.
	// Retried; seen only wrapped in ErrGaveUp.
	ErrInProgress = errors.New("request with this key in progress")
	// ErrUnavailable: 503. Retried; seen only wrapped in ErrGaveUp.
	ErrUnavailable = errors.New("service unavailable")

	// ErrGaveUp is wrapped, together with the last attempt's error, when
	// the retries of one call used up Config.MaxElapsed. The outcome of a
	// charge is then unknown, and its intent stays in the journal for
	// ResumePending.
	ErrGaveUp = errors.New("gave up retrying")
)

// Problem codes of the contract that the client branches on.
const (
	CodeCardDeclined           = "card_declined"
	CodeIdempotencyKeyMismatch = "idempotency_key_mismatch"
	CodeIdempotencyKeyInUse    = "idempotency_key_in_use"
	CodePSPUnavailable         = "psp_unavailable"
)

// FieldError names one invalid field of a request body.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an RFC 9457 problem document as the API sends it. Code is the
// stable, machine-readable reason; branch on it (or on the sentinels), not
// on Title or Detail.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
	Code     string `json:"code"`
	// Charge is the declined charge's id (card_declined only).
	Charge string `json:"charge,omitempty"`
	// RequestID finds the request in the server's logs.
	RequestID string `json:"request_id,omitempty"`
	// Errors lists the invalid fields (invalid_request only).
	Errors []FieldError `json:"errors,omitempty"`
}

// Error is an answer of the API with an error status. A body that is not a
// problem document still gives an Error, with Problem.Status and Title
// filled from the status line.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Problem is the decoded problem body.
	Problem Problem
	// RetryAfter is the Retry-After header, 0 if absent.
	RetryAfter time.Duration
	// Replayed is true for a stored answer (Idempotent-Replayed: true), e.g.
	// a replayed decline.
	Replayed bool
	// RawBody is the response body as received.
	RawBody []byte
}

// Error returns one line: status, code, detail and, for a decline, the
// charge id.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", e.Status)
	if e.Problem.Code != "" {
		fmt.Fprintf(&b, " %s", e.Problem.Code)
	}
	msg := cmp.Or(e.Problem.Detail, e.Problem.Title, http.StatusText(e.Status))
	if msg != "" {
		fmt.Fprintf(&b, ": %s", msg)
	}
	if e.Problem.Charge != "" {
		fmt.Fprintf(&b, " (charge %s)", e.Problem.Charge)
	}
	// A server's detail is not ours to trust with layout.
	return strings.Join(strings.Fields(b.String()), " ")
}

// Is maps the status and problem code to the package's sentinels, so that
// errors.Is(err, client.ErrDeclined) works through any wrapping. The code
// decides where the server sent one; the status where it did not (a proxy's
// plain-text 503, say).
func (e *Error) Is(target error) bool {
	switch target {
	case ErrDeclined:
		return e.Problem.Code == CodeCardDeclined || (e.Problem.Code == "" && e.Status == http.StatusPaymentRequired)
	case ErrMismatch:
		return e.Problem.Code == CodeIdempotencyKeyMismatch || (e.Problem.Code == "" && e.Status == http.StatusUnprocessableEntity)
	case ErrInvalidRequest:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrInProgress:
		return e.Status == http.StatusConflict
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	}
	return false
}

// retryableStatus reports whether an answer with this status may change on
// a retry with the same key: 409 (still running), 429 (rate limited) and 5xx
// (nothing stored for replay, per the contract). Every other 4xx is final.
func retryableStatus(status int) bool {
	return status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500
}
