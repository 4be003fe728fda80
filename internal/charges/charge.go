package charges

import (
	"crypto/rand"
	"encoding/json"
	"time"
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
}

// chargeJSON is the charge object of the API.
type chargeJSON struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Status        Status            `json:"status"`
	PSPReference  *string           `json:"psp_reference"`
	Description   *string           `json:"description"`
	Metadata      map[string]string `json:"metadata"`
	CreatedAt     string            `json:"created_at"`
}

// MarshalJSON renders the API's charge object.
func (c Charge) MarshalJSON() ([]byte, error) {
	md := c.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return json.Marshal(chargeJSON{
		ID:            c.ID,
		Object:        "charge",
		Amount:        c.Amount,
		Currency:      c.Currency,
		PaymentMethod: c.PaymentMethod,
		Status:        c.Status,
		PSPReference:  c.PSPReference,
		Description:   c.Description,
		Metadata:      md,
		CreatedAt:     c.CreatedAt.UTC().Format(time.RFC3339),
	})
}

// newChargeID returns "ch_" and 24 random base-32 characters (120 bits):
// unique across tenants, which the PSP key derived from it relies on.
func newChargeID() string {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return "ch_" + string(b)
}
