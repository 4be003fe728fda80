package client

import (
	"encoding/json"
	"maps"
	"time"
)

// ChargeParams is the body of POST /v1/charges, with the contract's JSON
// names, its fields in the order of their names (see encodeBody). The server validates it (amount positive and at most 2^53-1, a
// known lower-case currency, at most 50 metadata keys…); the client does not
// repeat those rules, so that they cannot drift apart.
type ChargeParams struct {
	// Amount is a positive integer in the currency's minor unit.
	Amount int64 `json:"amount"`
	// Currency is a lower-case ISO 4217 code, e.g. "usd".
	Currency string `json:"currency"`
	// Description is optional free text; nil leaves it out of the body.
	Description *string `json:"description,omitempty"`
	// Metadata is an optional string map. Empty and nil are both left out
	// of the body, so that a journaled intent replays the same fingerprint
	// whichever of the two it was decoded as.
	Metadata map[string]string `json:"metadata,omitempty"`
	// PaymentMethod is the payment method to charge, e.g. "pm_card_visa".
	PaymentMethod string `json:"payment_method"`
}

// clone returns a deep copy, so that a journal or an intent never shares a
// map or a pointer with the caller.
func (p ChargeParams) clone() ChargeParams {
	if p.Description != nil {
		d := *p.Description
		p.Description = &d
	}
	p.Metadata = maps.Clone(p.Metadata)
	return p
}

// ChargeStatus is where a charge stands with the payment service provider.
// An open set, like the API's problem codes: a later API may add a status,
// which a client should treat as "not authorized", not as an error.
type ChargeStatus string

// The statuses of a charge.
const (
	// StatusPending: the PSP has not answered yet (e.g. after a 503, until a
	// retry or the reaper resumes it).
	StatusPending    ChargeStatus = "pending"
	StatusAuthorized ChargeStatus = "authorized"
	StatusDeclined   ChargeStatus = "declined"
	// StatusFailed: the PSP refused the request for good (402
	// payment_failed); no money moved.
	StatusFailed ChargeStatus = "failed"
	// StatusCaptured: captured (AmountCaptured of Amount); refunds may
	// follow.
	StatusCaptured ChargeStatus = "captured"
	// StatusVoided: the authorization was released; no money moved.
	StatusVoided ChargeStatus = "voided"
)

// Charge is the charge object of the API.
type Charge struct {
	ID            string       `json:"id"`
	Object        string       `json:"object"`
	Amount        int64        `json:"amount"`
	Currency      string       `json:"currency"`
	PaymentMethod string       `json:"payment_method"`
	Status        ChargeStatus `json:"status"`
	// AmountCaptured is what a capture took, 0 before one.
	AmountCaptured int64 `json:"amount_captured"`
	// AmountRefunded is the sum of the succeeded refunds.
	AmountRefunded int64 `json:"amount_refunded"`
	// PSP names the payment service provider that holds the charge.
	PSP          string            `json:"psp"`
	PSPReference *string           `json:"psp_reference"`
	Description  *string           `json:"description"`
	Metadata     map[string]string `json:"metadata"`
	CreatedAt    time.Time         `json:"created_at"`

	// Replayed is true when the server answered with a stored response of
	// an earlier request with the same key (Idempotent-Replayed: true).
	Replayed bool `json:"-"`
	// RawBody is the final response body exactly as received, so that a
	// caller can compare a replay with the first answer byte for byte.
	RawBody []byte `json:"-"`
}

func (ch *Charge) decode(raw []byte, replayed bool) bool {
	if err := json.Unmarshal(raw, ch); err != nil || ch.ID == "" {
		return false
	}
	ch.Replayed, ch.RawBody = replayed, raw
	return true
}

func (*Charge) kind() string { return "a charge" }

// Intent is one user intent that moves money (to charge, capture, void or
// refund): the idempotency key it will use on every attempt, for as long as
// it takes and across process restarts, and the request that key was made
// for.
type Intent struct {
	// Key is the Idempotency-Key sent on every attempt.
	Key string `json:"key"`
	// Op is what the intent asks for. Empty means OpCharge: journals
	// written before capture, void and refund existed hold no op.
	Op Op `json:"op,omitempty"`
	// Params is the request body of a charge (OpCharge).
	Params ChargeParams `json:"params,omitzero"`
	// ChargeID is the charge captured or voided (OpCapture, OpVoid); a
	// refund names its charge in Refund.Charge.
	ChargeID string `json:"charge_id,omitempty"`
	// Capture is the request body of a capture (OpCapture).
	Capture CaptureParams `json:"capture,omitzero"`
	// Refund is the request body of a refund (OpRefund).
	Refund RefundParams `json:"refund,omitzero"`
	// CreatedAt is when the intent was made; ResumePending replays oldest
	// first.
	CreatedAt time.Time `json:"created_at"`
}

func (in Intent) clone() Intent {
	in.Params = in.Params.clone()
	in.Capture.Amount = cloneInt(in.Capture.Amount)
	in.Refund.Amount = cloneInt(in.Refund.Amount)
	return in
}

func cloneInt(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Result is what ResumePending (or Do) did with one intent: on success
// Charge (a charge, capture or void) or Refund (a refund), else Err (the
// errors of Charge, Capture, Void or Refund).
type Result struct {
	Intent Intent
	Charge *Charge
	Refund *Refund
	Err    error
}
