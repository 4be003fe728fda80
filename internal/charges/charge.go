package charges

import (
	"crypto/rand"
	"encoding/json"
	"time"

	"github.com/phasepay/phasepay/internal/psp"
)

// Status is where a charge stands with the PSP.
type Status string

// The statuses of a charge.
const (
	// StatusPending: created, the PSP has not answered yet (or its answer is
	// not committed yet).
	StatusPending    Status = "pending"
	StatusAuthorized Status = "authorized"
	StatusDeclined   Status = "declined"
	// StatusFailed: the PSP refused the request (a final failure other than
	// a decline: nothing was done there), or an operator settled it so.
	StatusFailed Status = "failed"
	// StatusCaptured and StatusVoided: the PSP captured (part of) the
	// authorized amount, or released it. Each is final; only one of them
	// ever happens to a charge.
	StatusCaptured Status = "captured"
	StatusVoided   Status = "voided"
)

// settlement is the one capture or void a charge may have, claimed under
// the charge's row lock by the request that won it (see capture.go).
type settlement string

const (
	settleCapture settlement = "capture"
	settleVoid    settlement = "void"
)

// Charge is a payment authorized (or declined) once per idempotency key.
type Charge struct {
	TenantID      int64
	ID            string
	Amount        int64
	Currency      string
	PaymentMethod string
	Status        Status
	PSPReference  *string
	DeclineCode   *string
	// FailureReason says why a failed charge failed (the PSP's reason, or
	// the operator's).
	FailureReason *string
	Description   *string
	Metadata      map[string]string
	CreatedAt     time.Time
	// AmountCaptured and AmountRefunded are what the PSP captured and
	// refunded (succeeded refunds only), in the currency's minor unit.
	AmountCaptured int64
	AmountRefunded int64
	// PSP names the PSP that holds the authorization ("default" with one).
	PSP string

	settlement      *settlement
	amountRefunding int64 // the sum of the pending refunds
	// attempts are the authorization's attempts, one per PSP, in order
	// (attempts.go); loaded by the authorization only.
	attempts []attempt
	// answer is the PSP's answer to this run's call, for the phase that
	// records it.
	answer psp.Outcome
}

// chargeJSON is the charge object of the API.
type chargeJSON struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	PaymentMethod  string            `json:"payment_method"`
	Status         Status            `json:"status"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	PSP            string            `json:"psp"`
	PSPReference   *string           `json:"psp_reference"`
	Description    *string           `json:"description"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      string            `json:"created_at"`
}

// MarshalJSON renders the API's charge object.
func (c Charge) MarshalJSON() ([]byte, error) {
	md := c.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return json.Marshal(chargeJSON{
		ID:             c.ID,
		Object:         "charge",
		Amount:         c.Amount,
		Currency:       c.Currency,
		PaymentMethod:  c.PaymentMethod,
		Status:         c.Status,
		AmountCaptured: c.AmountCaptured,
		AmountRefunded: c.AmountRefunded,
		PSP:            c.PSP,
		PSPReference:   c.PSPReference,
		Description:    c.Description,
		Metadata:       md,
		CreatedAt:      c.CreatedAt.UTC().Format(time.RFC3339),
	})
}

// newID returns prefix and 24 random base-32 characters (120 bits): unique
// across tenants, which the PSP keys derived from ids rely on.
func newID(prefix string) string {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return prefix + string(b)
}
