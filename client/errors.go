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
	// ErrPaymentFailed: 402 payment_failed. The PSP refused the request for
	// good; the charge exists with status failed, its id in
	// Error.Problem.Charge and the PSP's reason in Error.Problem.Detail.
	// Final: a new attempt to pay is a new intent.
	ErrPaymentFailed = errors.New("payment failed")
	// ErrUnresolved: 503 payment_unresolved. The server gave up finishing
	// the request by itself and waits for an operator. Not retried (no
	// retry can help until then), but not settled either: the outcome is
	// unknown, so the intent stays in the journal, and a ResumePending after
	// the operator resolved it gets the final answer.
	ErrUnresolved = errors.New("payment unresolved: waiting for an operator")
	// ErrMismatch: 422, the key was already used for a different request.
	// Final: a new request needs a new intent.
	ErrMismatch = errors.New("idempotency key used for a different request")
	// ErrInvalidRequest: 400 (invalid body or key), 405 (method not
	// allowed), 413 (body too large) or 415 (body not JSON). Final; nothing
	// was stored, so a corrected request may reuse the key. A 400 that
	// ErrNotAllowed matches is not an ErrInvalidRequest.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrNotAllowed: 400 charge_not_capturable, charge_not_voidable,
	// charge_not_refundable or amount_too_large: the charge's state does
	// not allow the capture, void or refund (it may have lost a race to
	// another request). Final, and stored for replay under the key; the
	// charge's id is in Error.Problem.Charge.
	ErrNotAllowed = errors.New("not allowed in the charge's state")
	// ErrChargePending: 409 charge_pending, the charge's authorization has
	// no outcome yet. Retried no sooner than Retry-After; seen only
	// wrapped in ErrGaveUp.
	ErrChargePending = errors.New("charge pending")
	// ErrUnauthorized: 401, the API key is missing or unknown. Final.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrNotFound: 404, no such charge for this tenant. Final.
	ErrNotFound = errors.New("not found")
	// ErrInProgress: 409 (but charge_pending), a request with the same
	// key is still running. Retried; seen only wrapped in ErrGaveUp.
	ErrInProgress = errors.New("request with this key in progress")
	// ErrUnavailable: 503 psp_unavailable or database_unavailable (or a
	// 503 without a code, from a proxy), and 429. Retried no sooner than
	// Retry-After; seen only wrapped in ErrGaveUp.
	ErrUnavailable = errors.New("service unavailable")

	// ErrGaveUp is wrapped, together with the last attempt's error, when
	// the retries of one call used up Config.MaxElapsed. The outcome of a
	// charge is then unknown, and its intent stays in the journal for
	// ResumePending.
	ErrGaveUp = errors.New("gave up retrying")
)

// Problem codes the client branches on. The API's codes are an open set:
// a code not listed here is handled by its HTTP status.
const (
	CodeCardDeclined           = "card_declined"
	CodePaymentFailed          = "payment_failed"
	CodeIdempotencyKeyMismatch = "idempotency_key_mismatch"
	CodeIdempotencyKeyInUse    = "idempotency_key_in_use"
	CodePSPUnavailable         = "psp_unavailable"
	CodeDatabaseUnavailable    = "database_unavailable"
	CodePaymentUnresolved      = "payment_unresolved"
	CodeChargePending          = "charge_pending"
	CodeChargeNotCapturable    = "charge_not_capturable"
	CodeChargeNotVoidable      = "charge_not_voidable"
	CodeChargeNotRefundable    = "charge_not_refundable"
	CodeAmountTooLarge         = "amount_too_large"
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
	// Charge is the id of the charge the request created or acted on,
	// when the body is a problem (card_declined, payment_failed,
	// psp_unavailable, charge_pending, charge_not_capturable, ...).
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
	case ErrPaymentFailed:
		return e.Problem.Code == CodePaymentFailed
	case ErrMismatch:
		return e.Problem.Code == CodeIdempotencyKeyMismatch || (e.Problem.Code == "" && e.Status == http.StatusUnprocessableEntity)
	case ErrInvalidRequest:
		if e.notAllowed() {
			return false
		}
		switch e.Status {
		case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
			return true
		}
		return false
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrNotAllowed:
		return e.notAllowed()
	case ErrChargePending:
		return e.Problem.Code == CodeChargePending
	case ErrInProgress:
		return e.Status == http.StatusConflict && e.Problem.Code != CodeChargePending
	case ErrUnavailable:
		return (e.Status == http.StatusServiceUnavailable && e.Problem.Code != CodePaymentUnresolved) ||
			e.Status == http.StatusTooManyRequests
	case ErrUnresolved:
		return e.Problem.Code == CodePaymentUnresolved
	}
	return false
}

func (e *Error) notAllowed() bool {
	switch e.Problem.Code {
	case CodeChargeNotCapturable, CodeChargeNotVoidable, CodeChargeNotRefundable, CodeAmountTooLarge:
		return true
	}
	return false
}

// retryable reports whether an answer may change on a retry with the same
// key soon: 409 (still running, or the charge's authorization is), 429 (rate limited) and 5xx (nothing stored
// for replay), except payment_unresolved, which only an operator changes.
// Every other 4xx is final.
func retryable(status int, code string) bool {
	if code == CodePaymentUnresolved {
		return false
	}
	return status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500
}
