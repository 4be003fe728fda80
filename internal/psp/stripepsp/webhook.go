package stripepsp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/stripe/stripe-go/v82/webhook"
)

// Stripe's webhooks (POST /v1/psp_webhooks/{psp}): a payment_intent.*
// event names a PaymentIntent phasepay made, by the metadata it wrote. It
// settles nothing by itself. The charge's open attempt records the
// PaymentIntent's id as a hint and its request is made due at once
// (internal/charges, PSPReport); the run that resumes it reads the
// PaymentIntent by id, which is consistent, instead of waiting for search
// to catch up, and records what it finds through the engine, fenced, like
// any recovery point. A webhook that arrives twice, late or out of order
// changes nothing the engine would not do anyway.

// ErrWebhookSignature is a webhook whose Stripe-Signature does not verify
// with the PSP's secret (or is too old: Stripe's default 5 minutes).
var ErrWebhookSignature = errors.New("stripe webhook signature does not verify")

// Report is what a verified payment_intent.* event tells about a charge.
type Report struct {
	// EventID and Type are the event's (evt_…, payment_intent.succeeded).
	EventID, Type string
	// PaymentIntent is the PaymentIntent's id, pi_….
	PaymentIntent string
	// Charge, TenantID and Key are the PaymentIntent's metadata: the
	// charge, its tenant and the attempt's key.
	Charge   string
	TenantID int64
	Key      string
}

// ParseWebhook verifies payload with the Stripe-Signature header and
// secret (stripe-go's webhook package) and reads it. It reports false for
// a verified event phasepay has nothing to do with (another type, or a
// PaymentIntent phasepay did not make). The event's API version is not
// required to match stripe-go's: only id, type and metadata are read.
func ParseWebhook(payload []byte, signature, secret string) (Report, bool, error) {
	if secret == "" {
		return Report{}, false, fmt.Errorf("%w: no webhook secret configured", ErrWebhookSignature)
	}
	ev, err := webhook.ConstructEventWithOptions(payload, signature, secret, webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	if err != nil {
		if errors.Is(err, webhook.ErrNotSigned) || errors.Is(err, webhook.ErrInvalidHeader) ||
			errors.Is(err, webhook.ErrNoValidSignature) || errors.Is(err, webhook.ErrTooOld) {
			return Report{}, false, fmt.Errorf("%w: %w", ErrWebhookSignature, err)
		}
		return Report{}, false, fmt.Errorf("stripe webhook: %w", err)
	}
	if !strings.HasPrefix(string(ev.Type), "payment_intent.") || ev.Data == nil {
		return Report{}, false, nil
	}
	var pi struct {
		ID       string            `json:"id"`
		Object   string            `json:"object"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil || pi.Object != "payment_intent" || !strings.HasPrefix(pi.ID, "pi_") {
		return Report{}, false, fmt.Errorf("stripe webhook %s: data.object is not a PaymentIntent", ev.ID)
	}
	r := Report{EventID: ev.ID, Type: string(ev.Type), PaymentIntent: pi.ID, Charge: pi.Metadata[MetaCharge], Key: pi.Metadata[MetaKey]}
	tenant, err := strconv.ParseInt(pi.Metadata[MetaTenant], 10, 64)
	if err != nil || !referenceRE.MatchString(r.Charge) || !strings.HasPrefix(r.Charge, "ch_") {
		return Report{}, false, nil // not one of phasepay's PaymentIntents
	}
	r.TenantID = tenant
	return r, true, nil
}
