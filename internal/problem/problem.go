// Package problem writes RFC 9457 problem details, the body of every error
// phasepay answers, with the stable machine-readable code clients branch on.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ContentType is the media type of every error body.
const ContentType = "application/problem+json"

// Code is a stable, machine-readable reason. Clients branch on it, never on
// Title or Detail, which may be reworded.
type Code string

// The codes, each explained in docs/api.md ("Errors") and listed in
// api/openapi.yaml; go test ./docs/ keeps the three in step.
const (
	IdempotencyKeyMissing  Code = "idempotency_key_missing"
	IdempotencyKeyInvalid  Code = "idempotency_key_invalid"
	IdempotencyKeyInUse    Code = "idempotency_key_in_use"
	IdempotencyKeyMismatch Code = "idempotency_key_mismatch"
	InvalidRequest         Code = "invalid_request"
	CardDeclined           Code = "card_declined"
	PSPUnavailable         Code = "psp_unavailable"
	DatabaseUnavailable    Code = "database_unavailable"
	PaymentUnresolved      Code = "payment_unresolved"
	PaymentFailed          Code = "payment_failed"
	Unauthorized           Code = "unauthorized"
	PayloadTooLarge        Code = "payload_too_large"
	UnsupportedMediaType   Code = "unsupported_media_type"
	NotFound               Code = "not_found"
	MethodNotAllowed       Code = "method_not_allowed"
	Internal               Code = "internal"
	ChargePending          Code = "charge_pending"
	ChargeNotCapturable    Code = "charge_not_capturable"
	ChargeNotVoidable      Code = "charge_not_voidable"
	ChargeNotRefundable    Code = "charge_not_refundable"
	AmountTooLarge         Code = "amount_too_large"
	EndpointLimitReached   Code = "endpoint_limit_reached"
)

// FieldError names one invalid field of a request body.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   Code   `json:"code"`
	// Charge is the declined charge's id (card_declined only).
	Charge string `json:"charge,omitempty"`
	// RequestID lets an operator find the request in the logs. Left out of
	// stored responses, which are replayed to later requests.
	RequestID string `json:"request_id,omitempty"`
	// Errors lists the invalid fields (invalid_request only).
	Errors []FieldError `json:"errors,omitempty"`
	// RetryAfter, if set, is sent as the Retry-After header, in seconds.
	RetryAfter int `json:"-"`
}

// New returns a problem with its type and title derived from code.
func New(status int, code Code, detail string) Problem {
	return Problem{
		Type:   "/problems/" + string(code),
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// Body returns the problem as JSON, newline-terminated.
func (p Problem) Body() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // strings and ints only: cannot fail
	}
	return append(b, '\n')
}

// Write sends p as the response.
func Write(w http.ResponseWriter, p Problem) {
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.Body())
}
