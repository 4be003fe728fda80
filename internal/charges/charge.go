package charges

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/text/currency"

	"github.com/phasepay/phasepay/internal/problem"
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

// Limits on a charge request.
const (
	// MaxAmount is 2^53-1: the fingerprint canonicalises JSON numbers as
	// IEEE doubles (RFC 8785), so larger integers could share a fingerprint
	// with a different amount.
	MaxAmount            = 1<<53 - 1
	maxDescription       = 1000
	maxMetadataKeys      = 50
	maxMetadataKeyLength = 40
	maxMetadataValue     = 500
)

// CreateParams is the body of POST /v1/charges.
type CreateParams struct {
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Description   *string           `json:"description"`
	Metadata      map[string]string `json:"metadata"`
}

// ValidationError lists what is wrong with a request body.
type ValidationError struct {
	Fields []problem.FieldError
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		msgs[i] = f.Field + ": " + f.Message
	}
	return "invalid request: " + strings.Join(msgs, "; ")
}

func (e *ValidationError) add(field, format string, args ...any) {
	e.Fields = append(e.Fields, problem.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// ParseCreateParams decodes and validates a charge request body strictly:
// unknown fields, trailing data, wrong types and out-of-range values are
// all rejected with a *ValidationError, before any key is claimed.
func ParseCreateParams(body []byte) (CreateParams, error) {
	var p CreateParams
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return CreateParams{}, decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return CreateParams{}, &ValidationError{Fields: []problem.FieldError{{Field: "", Message: "unexpected data after the JSON object"}}}
	}

	verr := &ValidationError{}
	switch {
	case p.Amount <= 0:
		verr.add("amount", "must be a positive integer in the currency's minor unit")
	case p.Amount > MaxAmount:
		verr.add("amount", "must be at most %d", MaxAmount)
	}
	if !validCurrency(p.Currency) {
		verr.add("currency", "must be a lower-case ISO 4217 currency code, got %q", p.Currency)
	}
	if !strings.HasPrefix(p.PaymentMethod, "pm_") || len(p.PaymentMethod) > 255 {
		verr.add("payment_method", "must be a payment method id (pm_…)")
	}
	if p.Description != nil && len(*p.Description) > maxDescription {
		verr.add("description", "must be at most %d bytes", maxDescription)
	}
	if len(p.Metadata) > maxMetadataKeys {
		verr.add("metadata", "must have at most %d keys", maxMetadataKeys)
	}
	for k, v := range p.Metadata {
		if k == "" || len(k) > maxMetadataKeyLength {
			verr.add("metadata", "keys must be 1 to %d bytes, got %q", maxMetadataKeyLength, k)
		}
		if len(v) > maxMetadataValue {
			verr.add("metadata."+k, "must be at most %d bytes", maxMetadataValue)
		}
	}
	if len(verr.Fields) > 0 {
		return CreateParams{}, verr
	}
	return p, nil
}

func decodeError(err error) error {
	var (
		typeErr   *json.UnmarshalTypeError
		syntaxErr *json.SyntaxError
	)
	verr := &ValidationError{}
	switch {
	case errors.As(err, &typeErr):
		verr.add(typeErr.Field, "must be %s", describeType(typeErr.Type.String()))
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		verr.add("", "body is not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		verr.add(strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "unknown field")
	default:
		verr.add("", "body is not a valid charge request: %v", err)
	}
	return verr
}

func describeType(goType string) string {
	switch goType {
	case "int64":
		return "an integer"
	case "string", "*string":
		return "a string"
	case "map[string]string":
		return "an object of strings"
	}
	return "of another type"
}

// validCurrency accepts the lower-case form of an ISO 4217 code that
// golang.org/x/text knows.
func validCurrency(code string) bool {
	if len(code) != 3 || strings.ToLower(code) != code {
		return false
	}
	_, err := currency.ParseISO(code)
	return err == nil
}
