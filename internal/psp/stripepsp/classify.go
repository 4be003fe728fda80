package stripepsp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/phasepay/phasepay/internal/psp"
)

// What each of Stripe's answers means to phasepay: the one table, mirrored
// in docs/psps.md, with a recorded answer per row in testdata/answers
// (TestStripeOutcomeTable).
//
//	Stripe's answer                                  class
//	2xx PaymentIntent requires_capture (succeeded)   success: authorized
//	402 card_error (the PaymentIntent declined)      final failure: declined
//	2xx PaymentIntent requires_action                final failure: authentication required
//	2xx PaymentIntent canceled                       final failure
//	400/404 invalid_request_error                    final failure (refused)
//	400 idempotency_error                            final failure (refused)
//	409 (idempotency_key_in_use), 429, lock_timeout  busy
//	401, 403 (our key)                               unknown
//	5xx, api_error                                   unknown
//	5xx replayed (Idempotent-Replayed: true)         unknown, the key spent
//	timeout, connection lost, answer unreadable      unknown
//	2xx PaymentIntent processing, anything else      unknown
//
// Captures, voids and refunds: a 2xx is done (Stripe answers the object if
// the operation succeeded and an error otherwise), and the errors class as
// above, a card_error as a refusal.

// exchange is one request to Stripe, before its outcome is decided.
type exchange struct {
	status int // HTTP status, 0 when no answer came
	// serr is Stripe's error answer, nil for a 2xx or no answer.
	serr *stripe.Error
	// err is what went wrong sending or reading, nil if an answer came.
	err error
	// replayed: Stripe answered with a key's saved answer (the
	// Idempotent-Replayed header).
	replayed   bool
	retryAfter time.Duration
}

// newExchange reads what a stripe-go call returned.
func newExchange(err error) exchange {
	if err == nil {
		return exchange{status: http.StatusOK}
	}
	var serr *stripe.Error
	if errors.As(err, &serr) && serr.HTTPStatusCode != 0 {
		x := exchange{status: serr.HTTPStatusCode, serr: serr}
		if r := serr.LastResponse; r != nil {
			x.replayed = strings.EqualFold(r.Header.Get("Idempotent-Replayed"), "true")
			x.retryAfter = psp.ParseRetryAfter(r.Header.Get("Retry-After"), time.Now())
		}
		return x
	}
	// net/http's *url.Error quotes the URL: the cause names the path only.
	if uerr, ok := errors.AsType[*url.Error](err); ok {
		err = fmt.Errorf("%s %s: %w", uerr.Op, pathOf(uerr.URL), uerr.Err)
	}
	return exchange{err: err}
}

// pathOf is a URL's path, for a raw cause that must not name the host.
func pathOf(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Path
	}
	return "(url)"
}

// class is the exchange's class, when it is an error answer or none.
func (x exchange) class() psp.Class {
	switch {
	case x.err != nil || x.serr == nil:
		return psp.ClassUnknown
	case x.serr.Code == stripe.ErrorCodeLockTimeout:
		return psp.ClassBusy
	case x.status == http.StatusConflict || x.status == http.StatusTooManyRequests:
		return psp.ClassBusy
	case x.status >= 500 || x.serr.Type == stripe.ErrorTypeAPI:
		return psp.ClassUnknown
	case x.status == http.StatusUnauthorized || x.status == http.StatusForbidden:
		// Our key: nothing done, but a configuration fix must not find the
		// charge already failed.
		return psp.ClassUnknown
	case x.serr.Type == stripe.ErrorTypeCard, x.serr.Type == stripe.ErrorTypeInvalidRequest,
		x.serr.Type == stripe.ErrorTypeIdempotency:
		return psp.ClassFinalFailure
	case x.status == http.StatusBadRequest || x.status == http.StatusPaymentRequired || x.status == http.StatusNotFound:
		return psp.ClassFinalFailure
	}
	return psp.ClassUnknown
}

// declined reports whether the exchange is a decline: a card_error.
func (x exchange) declined() bool {
	return x.serr != nil && x.serr.Type == stripe.ErrorTypeCard
}

// spent reports whether the key the exchange was sent under can do
// nothing more: Stripe replayed a 5xx it saved under it.
func (x exchange) spent() bool { return x.replayed && x.status >= 500 }

// reason is Stripe's own explanation of an error answer, on one line, fit
// for a tenant to read: its code and message.
func (x exchange) reason() string {
	if x.serr == nil || x.serr.Msg == "" {
		return ""
	}
	s := x.serr.Msg
	if code := cmp.Or(string(x.serr.DeclineCode), string(x.serr.Code)); code != "" {
		s = code + ": " + s
	}
	return psp.PSPReason([]byte(fmt.Sprintf(`{"error":{"message":%q}}`, s)))
}

// cause is the raw cause of an exchange that gave no result, wrapping the
// class's sentinel.
func (x exchange) cause(class psp.Class) error {
	var what error
	switch {
	case x.err != nil:
		what = x.err
	case x.serr != nil:
		what = fmt.Errorf("status %d %s %s (request %s)%s: %s", x.status, x.serr.Type, x.serr.Code, x.serr.RequestID,
			map[bool]string{true: " replayed", false: ""}[x.replayed], x.serr.Msg)
	default:
		what = fmt.Errorf("status %d", x.status)
	}
	switch class {
	case psp.ClassFinalFailure:
		return fmt.Errorf("%w: %w", psp.ErrRejected, what)
	case psp.ClassBusy:
		return fmt.Errorf("%w: %w", psp.ErrBusy, what)
	}
	return fmt.Errorf("%w: %w", psp.ErrUnavailable, what)
}

// failure is the outcome and error of an exchange that gave no result.
func (x exchange) failure(ctx context.Context, class psp.Class) (psp.Outcome, error) {
	var netErr error
	if x.err != nil {
		netErr = x.err
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		f := &psp.Failure{Class: psp.ClassUnknown, Public: psp.ReasonInterrupted,
			Err: fmt.Errorf("%w (%v)", ctx.Err(), x.cause(class))}
		return psp.Outcome{Class: psp.ClassUnknown, StatusCode: x.status, Reason: f.Public}, f
	}
	f := psp.NewFailure(ctx, class, x.status, netErr, x.cause(class))
	out := psp.Outcome{Class: class, StatusCode: x.status, Reason: f.Public}
	switch class {
	case psp.ClassFinalFailure, psp.ClassBusy:
		out.Reason = cmp.Or(x.reason(), f.Public)
		out.RetryAfter = x.retryAfter
	}
	return out, f
}

// The public words of this connector's own unknown outcomes, besides
// internal/psp's (docs/api.md, "Why a request did not finish").
const (
	// ReasonSearchLag: Stripe's search found nothing, but may not show
	// yet what was done within SearchLag.
	ReasonSearchLag = "PSP search not yet settled"
	// ReasonKeySpent: Stripe replays an error it saved under the key; a
	// new key follows once a lookup proves the old one did nothing.
	ReasonKeySpent = "PSP replays a saved error"
	// ReasonKeyWindow: the key is past Stripe's key window; a new key
	// follows once a lookup proves the old one did nothing.
	ReasonKeyWindow = "PSP key window over"
	// ReasonAuthentication is the reason of an authorization Stripe asks
	// the customer to authenticate (requires_action): phasepay has no
	// customer to ask, so it is a final failure.
	ReasonAuthentication = "authentication_required: the card requires the customer's authentication (3-D Secure), which a server-side charge cannot give"
	// ReasonCanceled is the reason of a PaymentIntent found canceled.
	ReasonCanceled = "the PaymentIntent was canceled at Stripe"
)

// unknownOutcome is an unknown outcome of this connector's own, with its
// public words.
func unknownOutcome(public string, cause error) (psp.Outcome, error) {
	f := &psp.Failure{Class: psp.ClassUnknown, Public: public, Err: fmt.Errorf("%w: %w", psp.ErrUnavailable, cause)}
	return psp.Outcome{Class: psp.ClassUnknown, Reason: public}, f
}

// refusal is a final failure of this connector's own (an answer whose
// result is not an authorization), with its reason.
func refusal(reason string, status int) (psp.Outcome, error) {
	f := &psp.Failure{Class: psp.ClassFinalFailure, Public: reason, Err: fmt.Errorf("%w: %s", psp.ErrRejected, reason)}
	return psp.Outcome{Class: psp.ClassFinalFailure, StatusCode: status, Reason: reason}, f
}

// malformed is the unknown outcome of an answer phasepay cannot record.
func malformed(status int, cause error) (psp.Outcome, error) {
	f := &psp.Failure{Class: psp.ClassUnknown, Public: psp.ReasonMalformed, Err: fmt.Errorf("%w: malformed answer: %w", psp.ErrUnavailable, cause)}
	return psp.Outcome{Class: psp.ClassUnknown, StatusCode: status, Reason: psp.ReasonMalformed}, f
}
