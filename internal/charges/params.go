package charges

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/currency"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/jsonbody"
	"github.com/phasepay/phasepay/internal/problem"
)

// Limits on a charge request. api/openapi.yaml publishes each of them in
// the ChargeCreateRequest schema (TestChargeLimitsMatchOpenAPI keeps the two
// equal). Lengths count Unicode characters, as JSON Schema's maxLength does,
// not bytes.
const (
	// MaxAmount is 2^53-1: the fingerprint canonicalises JSON numbers as
	// IEEE doubles (RFC 8785), so larger integers could share a fingerprint
	// with a different amount.
	MaxAmount             = 1<<53 - 1
	maxDescription        = 1000
	maxMetadataKeys       = 50
	maxMetadataKeyLength  = 40
	maxMetadataValue      = 500
	maxPaymentMethodChars = 100
)

// The contract's patterns, verbatim as api/openapi.yaml has them.
const (
	currencyPattern      = `^[a-z]{3}$`
	paymentMethodPattern = `^pm_[A-Za-z0-9_]{1,100}$`
)

var (
	currencyRE      = regexp.MustCompile(currencyPattern)
	paymentMethodRE = regexp.MustCompile(paymentMethodPattern)
)

// CreateParams is the body of POST /v1/charges, as parsed and validated.
//
// Its JSON encoding is what the fingerprint covers and what the key stores
// (see ParseCreateRequest), so it must encode two bodies alike exactly when
// they execute alike: an absent description and a null one are both nil and
// omitted; a description of "" is kept, since it is stored and shown as "";
// an empty metadata object is normalised to nil, as the charge shows it as
// {} either way.
type CreateParams struct {
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Description   *string           `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
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

// ParseCreateRequest parses and validates a charge request body and
// fingerprints what was parsed, not the bytes that came: the canonical
// body, which the key stores and a takeover resumes from, is the encoding of
// the returned params, so equal fingerprints always mean equal params
// (FuzzEqualFingerprintsParseToEqualParams). Errors are *ValidationError,
// before any key is claimed.
func ParseCreateRequest(body []byte) (idempotency.Canonical, CreateParams, error) {
	params, err := ParseCreateParams(body)
	if err != nil {
		return idempotency.Canonical{}, CreateParams{}, err
	}
	req, err := idempotency.CanonicalizeParams(http.MethodPost, Path, params)
	if err != nil {
		return idempotency.Canonical{}, CreateParams{}, fmt.Errorf("parse charge request: %w", err)
	}
	return req, params, nil
}

// requestParams is the parameters of a charge request: those parsed by
// ParseCreateRequest in this process, or, for a request read back from
// storage, its stored body parsed again.
func requestParams(req idempotency.Canonical) (CreateParams, error) {
	if p, ok := req.Params.(CreateParams); ok {
		return p, nil
	}
	return ParseCreateParams(req.Body)
}

// ParseCreateParams decodes a charge request body strictly (package
// jsonbody: unknown, repeated or wrong-case members, U+0000, invalid UTF-8,
// wrong types and trailing data are refused) and validates its values
// against the contract. Errors are *ValidationError. A takeover reads the
// stored canonical body back with it.
func ParseCreateParams(body []byte) (CreateParams, error) {
	var p CreateParams
	if err := jsonbody.Decode(body, &p); err != nil {
		var jerr *jsonbody.Error
		if !errors.As(err, &jerr) {
			return CreateParams{}, err
		}
		return CreateParams{}, &ValidationError{Fields: []problem.FieldError{{Field: jerr.Field, Message: jerr.Message}}}
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
	if !paymentMethodRE.MatchString(p.PaymentMethod) {
		verr.add("payment_method", "must be pm_ followed by 1 to %d of A-Z, a-z, 0-9 and _", maxPaymentMethodChars)
	}
	if p.Description != nil && utf8.RuneCountInString(*p.Description) > maxDescription {
		verr.add("description", "must be at most %d characters", maxDescription)
	}
	if len(p.Metadata) > maxMetadataKeys {
		verr.add("metadata", "must have at most %d keys", maxMetadataKeys)
	}
	for k, v := range p.Metadata {
		if n := utf8.RuneCountInString(k); n == 0 || n > maxMetadataKeyLength {
			verr.add("metadata", "keys must be 1 to %d characters, got %q", maxMetadataKeyLength, k)
		}
		if utf8.RuneCountInString(v) > maxMetadataValue {
			verr.add("metadata."+k, "must be at most %d characters", maxMetadataValue)
		}
	}
	if len(verr.Fields) > 0 {
		return CreateParams{}, verr
	}
	if len(p.Metadata) == 0 {
		p.Metadata = nil
	}
	return p, nil
}

// validCurrency accepts the lower-case form of an ISO 4217 code that
// golang.org/x/text knows.
func validCurrency(code string) bool {
	if !currencyRE.MatchString(code) {
		return false
	}
	_, err := currency.ParseISO(code)
	return err == nil
}
