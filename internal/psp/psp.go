package psp

import (
	"errors"
	"time"
)

// Authorization statuses, as the PSP spells them.
const (
	// StatusAuthorized means the PSP reserved the amount on the payment method.
	StatusAuthorized = "authorized"
	// StatusDeclined means the PSP refused; DeclineCode says why. A decline is
	// a final answer, not an error.
	StatusDeclined = "declined"
)

// Statuses of captures, voids and refunds, as the PSP spells them: each
// is the success of its operation.
const (
	StatusCaptured = "captured"
	StatusVoided   = "voided"
	StatusRefunded = "refunded"
)

// DeclineCodeCardDeclined is the decline code of the mock's declining
// payment method.
const DeclineCodeCardDeclined = "card_declined"

// AuthorizeRequest is sent to POST {BaseURL}/v1/authorizations;
// IdempotencyKey goes in the Idempotency-Key header.
type AuthorizeRequest struct {
	// IdempotencyKey is sent on every attempt, unchanged: it is what makes a
	// retry after a lost response return the first authorization instead of
	// making a second one, for as long as the PSP remembers the key (about
	// 24 h at real PSPs). Required.
	IdempotencyKey string `json:"-"`
	// FirstSend says that no earlier call can have sent this key to the PSP:
	// the charge was created in this very run, so there is nothing to look
	// up before the first send. Leave it false whenever an earlier attempt
	// may have sent it (a resume from a recovery point, a takeover): the
	// client then looks the reference up before it sends anything, which is
	// what keeps a resend after the PSP forgot the key from authorizing
	// twice. The zero value is the safe one; it costs one lookup.
	FirstSend bool `json:"-"`
	// PSP names the PSP to send to when a router chooses among several
	// (internal/routing); a Client sends to its own BaseURL and ignores it.
	PSP string `json:"-"`
	// KeyCreatedAt is when the attempt that owns IdempotencyKey was
	// recorded, before its first send: the key is no older at the PSP. A
	// PSP that forgets keys (Stripe, internal/psp/stripepsp) resends under
	// the key only while it is younger than the PSP's key window. Zero
	// means unknown, which such a PSP treats as past the window. The mock's
	// Client ignores it: it looks up before every resend.
	KeyCreatedAt time.Time `json:"-"`
	// Renewed says that an earlier attempt of the charge at this PSP ended
	// with its key spent (Outcome.NewKey): that key may have acted, and a
	// lookup that lags may not show it yet. A PSP whose lookup lags sends
	// under this key only once its lookup can prove the earlier keys did
	// nothing.
	Renewed bool `json:"-"`
	// Hint is the PSP's id of an object the PSP reported for the charge
	// (its own webhook, internal/psp/stripepsp): a PSP whose lookup by
	// reference lags reads the object by id first. It decides nothing by
	// itself; the object is checked to be the charge's.
	Hint string `json:"-"`
	// TenantID is the charge's tenant, sent to PSPs that keep it beside
	// the reference (Stripe's metadata) for their webhooks to name it.
	TenantID int64 `json:"-"`
	// Amount is a positive integer in the currency's minor unit.
	Amount int64 `json:"amount"`
	// Currency is a lower-case ISO 4217 code.
	Currency string `json:"currency"`
	// PaymentMethod is a pm_... token.
	PaymentMethod string `json:"payment_method"`
	// Reference is the charge id, ch_...: what a lookup finds the
	// authorization by, whatever became of the idempotency key.
	Reference string `json:"reference"`
}

// Authorization is the PSP's answer to an authorization request, or one
// entry of a lookup by reference.
type Authorization struct {
	// ID is the PSP's id, auth_...; a declined request has one too.
	ID string `json:"id"`
	// Status is StatusAuthorized or StatusDeclined.
	Status string `json:"status"`
	// DeclineCode is nil unless Status is StatusDeclined, e.g. "card_declined".
	DeclineCode *string `json:"decline_code"`
	// Reference is the charge id the authorization was made for; empty only
	// if the PSP does not echo it.
	Reference string `json:"reference,omitempty"`
}

// Operation is the PSP's answer to a capture, void or refund (POST
// /v1/captures, /v1/voids, /v1/refunds), or one entry of their lookup by
// reference.
type Operation struct {
	// ID is the PSP's id: cap_..., void_... or ref_...
	ID string `json:"id"`
	// Status is StatusCaptured, StatusVoided or StatusRefunded.
	Status string `json:"status"`
	// Authorization is the id of the authorization operated on, auth_...
	Authorization string `json:"authorization"`
	// Amount is what was captured or refunded, in the currency's minor
	// unit; for a void, the authorized amount released.
	Amount int64 `json:"amount"`
	// Currency is the authorization's lower-case ISO 4217 code.
	Currency string `json:"currency"`
	// Reference is the charge id (captures, voids) or the refund id
	// (refunds) the client sent.
	Reference string `json:"reference"`
}

// The sentinels below name the outcome classes that are errors (see Class):
// every error of this package's calls that came from the PSP wraps exactly
// one of them. A success and a decline are answers, not errors.
var (
	// ErrUnavailable is the unknown class: the PSP gave no usable answer (5xx,
	// a timeout, a connection error, an answer lost or malformed) and, where
	// one was tried, a lookup by reference did not settle it. The operation
	// may or may not exist at the PSP; nothing may be sent again before a
	// lookup by reference (AuthorizeRequest.FirstSend false does that).
	ErrUnavailable = errors.New("psp outcome unknown")
	// ErrRejected is the final failure class without a result: the PSP
	// refused the request (400, 404, 422) and did nothing. Sending the same
	// request again cannot succeed; Outcome.Reason holds the PSP's reason.
	ErrRejected = errors.New("psp refused the request")
	// ErrBusy is the busy class: the PSP answered 409 or 429 and did nothing
	// yet; send again under the same key, not before Outcome.RetryAfter.
	ErrBusy = errors.New("psp busy")
)
