// Package psp talks to the payment service provider: an HTTP client that
// retries authorizations under one idempotency key, and an in-memory mock
// PSP (see CONTRACT.md, "The mock PSP") used by tests, `make run` and
// bin/mockpsp.
package psp

import "errors"

// Authorization statuses, as the PSP spells them.
const (
	// StatusAuthorized means the PSP reserved the amount on the payment method.
	StatusAuthorized = "authorized"
	// StatusDeclined means the PSP refused; DeclineCode says why. A decline is
	// a final answer, not an error.
	StatusDeclined = "declined"
)

// DeclineCodeCardDeclined is the decline code of the mock's declining
// payment method.
const DeclineCodeCardDeclined = "card_declined"

// AuthorizeRequest is sent to POST {BaseURL}/v1/authorizations;
// IdempotencyKey goes in the Idempotency-Key header.
type AuthorizeRequest struct {
	// IdempotencyKey is sent on every attempt, unchanged: it is what makes a
	// retry after a lost response return the first authorization instead of
	// making a second one. Required.
	IdempotencyKey string `json:"-"`
	// Amount is a positive integer in the currency's minor unit.
	Amount int64 `json:"amount"`
	// Currency is a lower-case ISO 4217 code.
	Currency string `json:"currency"`
	// PaymentMethod is a pm_... token.
	PaymentMethod string `json:"payment_method"`
	// Reference is the charge id, ch_...
	Reference string `json:"reference"`
}

// Authorization is the PSP's answer to an authorization request.
type Authorization struct {
	// ID is the PSP's id, auth_...; a declined request has one too.
	ID string `json:"id"`
	// Status is StatusAuthorized or StatusDeclined.
	Status string `json:"status"`
	// DeclineCode is nil unless Status is StatusDeclined, e.g. "card_declined".
	DeclineCode *string `json:"decline_code"`
}

// ErrUnavailable means the PSP gave no usable answer: 5xx, a timeout or a
// connection error after all retries, or the caller's deadline passing. The
// authorization may or may not exist at the PSP; retrying later with the same
// idempotency key is safe and is how the caller finds out.
var ErrUnavailable = errors.New("psp unavailable")

// ErrRejected means the PSP answered with a 4xx, e.g. 422 when the
// idempotency key was already used with another body. Retrying the same
// request cannot succeed.
var ErrRejected = errors.New("psp rejected the request")
