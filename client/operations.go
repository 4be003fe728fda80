package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
)

// Op is what an intent asks the API for. Every op moves money, so every op
// follows the same discipline: one key per intent, journaled before the
// first attempt, the same key on every retry and every resume.
type Op string

// The ops.
const (
	// OpCharge: POST /v1/charges with Intent.Params.
	OpCharge Op = "charge"
	// OpCapture: POST /v1/charges/{Intent.ChargeID}/capture with
	// Intent.Capture.
	OpCapture Op = "capture"
	// OpVoid: POST /v1/charges/{Intent.ChargeID}/void with {}.
	OpVoid Op = "void"
	// OpRefund: POST /v1/refunds with Intent.Refund.
	OpRefund Op = "refund"
)

// CaptureParams is the body of a capture.
type CaptureParams struct {
	// Amount to capture, at most the authorized amount; nil captures all
	// of it.
	Amount *int64 `json:"amount,omitempty"`
}

// RefundParams is the body of a refund, its fields in the order of their
// names (see encodeBody).
type RefundParams struct {
	// Amount to refund; nil refunds all that is left. The charge's
	// succeeded and pending refunds never sum past its amount_captured
	// (400 amount_too_large).
	Amount *int64 `json:"amount,omitempty"`
	// Charge is the captured charge to refund, "ch_…".
	Charge string `json:"charge"`
}

// RefundStatus is where a refund stands with the PSP; an open set, like
// ChargeStatus.
type RefundStatus string

// The statuses of a refund.
const (
	// RefundPending: the PSP has not answered yet; the amount is reserved
	// on the charge meanwhile.
	RefundPending   RefundStatus = "pending"
	RefundSucceeded RefundStatus = "succeeded"
	// RefundFailed: the PSP refused it (402 payment_failed); the
	// reservation was released.
	RefundFailed RefundStatus = "failed"
)

// Refund is the refund object of the API.
type Refund struct {
	ID           string       `json:"id"`
	Object       string       `json:"object"`
	Charge       string       `json:"charge"`
	Amount       int64        `json:"amount"`
	Status       RefundStatus `json:"status"`
	PSPReference *string      `json:"psp_reference"`
	CreatedAt    time.Time    `json:"created_at"`

	// Replayed and RawBody are as in Charge.
	Replayed bool   `json:"-"`
	RawBody  []byte `json:"-"`
}

func (r *Refund) decode(raw []byte, replayed bool) bool {
	if err := json.Unmarshal(raw, r); err != nil || r.ID == "" {
		return false
	}
	r.Replayed, r.RawBody = replayed, raw
	return true
}

func (*Refund) kind() string { return "a refund" }

// NewCaptureIntent returns an intent to capture the charge, with a fresh
// key (see NewIntent).
func NewCaptureIntent(chargeID string, p CaptureParams) Intent {
	in := Intent{Key: uuid.NewString(), Op: OpCapture, ChargeID: chargeID, Capture: p, CreatedAt: time.Now().UTC()}
	return in.clone()
}

// NewVoidIntent returns an intent to void the charge, with a fresh key.
func NewVoidIntent(chargeID string) Intent {
	return Intent{Key: uuid.NewString(), Op: OpVoid, ChargeID: chargeID, CreatedAt: time.Now().UTC()}
}

// NewRefundIntent returns an intent to refund, with a fresh key.
func NewRefundIntent(p RefundParams) Intent {
	in := Intent{Key: uuid.NewString(), Op: OpRefund, Refund: p, CreatedAt: time.Now().UTC()}
	return in.clone()
}

// Capture captures an authorized charge (all of it when p.Amount is nil)
// for a new intent: key made once, journaled, then sent and retried with
// that key like Charge. A 409 charge_pending (the authorization has no
// outcome yet) is retried no sooner than its Retry-After.
//
// Errors: ErrNotAllowed (400 charge_not_capturable or amount_too_large,
// final and stored), ErrPaymentFailed (the PSP refused the capture),
// ErrNotFound, ErrMismatch, ErrInvalidRequest, ErrUnauthorized (final, as
// *Error); ErrUnresolved, ErrGaveUp or ctx's error (unknown outcome: the
// intent stays journaled for ResumePending); a journal error or an invalid
// charge id (nothing was sent).
func (c *Client) Capture(ctx context.Context, chargeID string, p CaptureParams) (*Charge, error) {
	r := c.Do(ctx, NewCaptureIntent(chargeID, p))
	return r.Charge, r.Err
}

// Void releases an authorized, uncaptured charge for a new intent. Its
// errors are Capture's, with charge_not_voidable for ErrNotAllowed.
func (c *Client) Void(ctx context.Context, chargeID string) (*Charge, error) {
	r := c.Do(ctx, NewVoidIntent(chargeID))
	return r.Charge, r.Err
}

// Refund refunds a captured charge (all that is left when p.Amount is nil)
// for a new intent, and returns the refund, status succeeded. Its errors
// are Capture's, with charge_not_refundable or amount_too_large for
// ErrNotAllowed.
func (c *Client) Refund(ctx context.Context, p RefundParams) (*Refund, error) {
	r := c.Do(ctx, NewRefundIntent(p))
	return r.Refund, r.Err
}

// Do executes an intent of any op that the caller made, with a key of its
// choice: it journals the intent (replacing any entry with the same key)
// before the first attempt, retries with that key, and forgets it once it
// has a final answer. The Result carries the charge (OpCharge, OpCapture,
// OpVoid) or the refund (OpRefund), or the errors of the op's method.
func (c *Client) Do(ctx context.Context, in Intent) Result {
	if in.Key == "" {
		return Result{Intent: in, Err: errors.New("do: intent has no key")}
	}
	in = in.clone()
	if in.CreatedAt.IsZero() {
		in.CreatedAt = time.Now().UTC()
	}
	// A request that cannot be built is refused before it is journaled:
	// journaled, it could never be resumed or settled.
	if _, _, err := c.request(in); err != nil {
		return Result{Intent: in, Err: err}
	}
	if err := c.journal.Put(in); err != nil {
		return Result{Intent: in, Err: fmt.Errorf("journal intent %s before sending it: %w", in.Key, err)}
	}
	return c.drive(ctx, in)
}

// GetRefund reads one refund, retrying like Get. Errors: ErrNotFound and
// ErrUnauthorized as *Error; ErrGaveUp; ctx's error.
func (c *Client) GetRefund(ctx context.Context, id string) (*Refund, error) {
	u, err := c.objectURL("refund", id, "refunds")
	if err != nil {
		return nil, fmt.Errorf("get refund: %w", err)
	}
	var r Refund
	if err := c.read(ctx, u, &r); err != nil {
		return nil, fmt.Errorf("get refund %s: %w", id, err)
	}
	return &r, nil
}

// read GETs u into into, retrying like every call (a read is safe to
// repeat, and sends no key).
func (c *Client) read(ctx context.Context, u string, into answer) error {
	_, err := c.retry(ctx, func(ctx context.Context, _ int) outcome {
		return c.attempt(ctx, http.MethodGet, u, "", nil, into)
	})
	return err
}

// request returns the URL and body an intent sends, the same on every
// attempt and after a restart.
func (c *Client) request(in Intent) (u string, body []byte, err error) {
	var v any
	switch in.op() {
	case OpCharge:
		u, v = c.base.JoinPath("v1", "charges").String(), in.Params
	case OpCapture:
		u, err = c.objectURL("charge", in.ChargeID, "charges", "capture")
		v = in.Capture
	case OpVoid:
		u, err = c.objectURL("charge", in.ChargeID, "charges", "void")
		v = struct{}{}
	case OpRefund:
		if err = checkID("charge", in.Refund.Charge); err == nil {
			u, v = c.base.JoinPath("v1", "refunds").String(), in.Refund
		}
	default:
		return "", nil, fmt.Errorf("intent %s: unknown op %q", in.Key, in.Op)
	}
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", in.op(), err)
	}
	body, err = encodeBody(v)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s params: %w", in.op(), err)
	}
	return u, body, nil
}

func (in Intent) op() Op {
	if in.Op == "" {
		return OpCharge
	}
	return in.Op
}

// objectURL is /v1/<collection>/<id>[/<action>], with id escaped as one
// path segment.
func (c *Client) objectURL(what, id, collection string, action ...string) (string, error) {
	if err := checkID(what, id); err != nil {
		return "", err
	}
	// JoinPath would clean "..": an id is escaped by hand instead, so it
	// can only ever name one segment.
	u := c.base.JoinPath("v1", collection).String() + "/" + url.PathEscape(id)
	for _, a := range action {
		u += "/" + a
	}
	return u, nil
}

// checkID refuses an id that cannot be one path segment even escaped.
// Anything else goes to the server, escaped, which answers 404 for what it
// does not know.
func checkID(what, id string) error {
	switch id {
	case "":
		return fmt.Errorf("empty %s id", what)
	case ".", "..":
		return fmt.Errorf("%s id %q is not an id", what, id)
	}
	return nil
}

// encodeBody encodes a request body deterministically (encoding/json sorts
// map keys), so that a journaled intent sends the same bytes after a
// restart, and, for the bodies this client sends, in the server's canonical
// form (RFC 8785): members in the order of their names (the params structs
// declare their fields so), no white space, and no HTML escaping of <, >
// and &. The server fingerprints what it parsed, so any encoding is the
// same request; but a retry whose bytes are the stored canonical body is
// answered from one read of its key, without being parsed again.
func encodeBody(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
