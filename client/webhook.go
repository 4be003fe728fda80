package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// WebhookSignatureHeader is the header a phasepay webhook delivery is
// signed in.
const WebhookSignatureHeader = "Phasepay-Signature"

// WebhookToleranceDefault is how far a delivery's timestamp may be from
// the receiver's clock: enough for clock skew and a slow network, short
// enough that a recorded delivery cannot be replayed days later.
const WebhookToleranceDefault = 5 * time.Minute

// Errors of VerifyWebhook.
var (
	// ErrWebhookSignature: the header is missing or malformed, or no v1
	// signature matches the body and timestamp.
	ErrWebhookSignature = errors.New("phasepay: webhook signature does not match")
	// ErrWebhookTimestamp: the signed timestamp is further from now than
	// the tolerance: an old delivery replayed, or a clock far off.
	ErrWebhookTimestamp = errors.New("phasepay: webhook timestamp outside the tolerance")
	// ErrWebhookSecretMissing: VerifyWebhook was given an empty secret,
	// which verifies nothing (anyone can compute an HMAC with an empty
	// key): the receiver's configuration is missing its whsec_… value.
	ErrWebhookSecretMissing = errors.New("phasepay: webhook secret is empty: configure the endpoint's whsec_… secret")
)

// Event is a phasepay event as a webhook delivers it. Receivers
// deduplicate by ID: a delivery may arrive more than once.
type Event struct {
	ID        string    `json:"id"`
	Object    string    `json:"object"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      struct {
		// Object is the object as it was when the event was written (a
		// charge, a refund, an idempotency key), to decode by Type.
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// VerifyOptions tunes VerifyWebhook. The zero value is the default.
type VerifyOptions struct {
	// Tolerance is the largest difference allowed between the signed
	// timestamp and Now, either way. Default WebhookToleranceDefault.
	Tolerance time.Duration
	// Now is the receiver's clock; default time.Now.
	Now func() time.Time
}

// VerifyWebhook checks a delivery and returns its event. body must be the
// raw bytes received, before any parsing; header the Phasepay-Signature
// value ("t=<unix seconds>,v1=<hex>", several v1 allowed while a secret is
// being changed); secret the endpoint's whole whsec_… string. The HMAC is
// compared in constant time, and a timestamp outside the tolerance is
// refused even with a valid signature, so a recorded delivery cannot be
// replayed later (within the tolerance, deduplicate by event id). An
// empty secret is refused (ErrWebhookSecretMissing) before anything else,
// so that a receiver whose secret variable is unset accepts no forgery.
func VerifyWebhook(body []byte, header, secret string, opts *VerifyOptions) (Event, error) {
	if strings.TrimSpace(secret) == "" {
		return Event{}, ErrWebhookSecretMissing
	}
	var o VerifyOptions
	if opts != nil {
		o = *opts
	}
	if o.Tolerance <= 0 {
		o.Tolerance = WebhookToleranceDefault
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var (
		ts   string
		sigs [][]byte
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return Event{}, fmt.Errorf("%w: malformed %s header", ErrWebhookSignature, WebhookSignatureHeader)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	want := mac.Sum(nil)
	matched := false
	for _, s := range sigs {
		matched = hmac.Equal(s, want) || matched
	}
	if !matched {
		return Event{}, ErrWebhookSignature
	}
	if d := o.Now().Sub(time.Unix(unix, 0)); d > o.Tolerance || d < -o.Tolerance {
		return Event{}, fmt.Errorf("%w: signed %s ago", ErrWebhookTimestamp, d.Round(time.Second))
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return Event{}, fmt.Errorf("phasepay: webhook body: %w", err)
	}
	return ev, nil
}
