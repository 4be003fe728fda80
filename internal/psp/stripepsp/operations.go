package stripepsp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/stripe/stripe-go/v82"

	"github.com/phasepay/phasepay/internal/psp"
)

// Captures, voids and refunds. Their lookups, unlike an authorization's,
// are consistent: the PaymentIntent is read by its id (a capture or void
// done shows in its status), and a PaymentIntent's refunds are listed
// (lists are not subject to search's lag) and matched by the refund id in
// their metadata. So the rule is internal/psp's: look up before any resend
// (unless FirstSend), send, and after an unknown outcome look up again.
//
// A key Stripe replays a saved 5xx under is spent; the next send goes under
// the next key of a chain derived from it (<key>, <key>:2, <key>:3, …),
// after a lookup that found nothing. Each call walks the chain from its
// start (a spent key costs one replayed answer, never an execution), so
// a key is only left for the next once it is proved spent and the lookup
// found nothing. A capture or cancel is at most once by the PaymentIntent's
// own state besides; a refund is not, which is why the chain is
// deterministic: a second send under a key whose answer was lost is
// answered by Stripe, not executed again.

// OperateOutcome is one attempt to get a capture, void or refund done.
func (c *Client) OperateOutcome(ctx context.Context, req psp.OperationRequest) (psp.Outcome, error) {
	if err := validateOperation(req); err != nil {
		return psp.Outcome{}, err
	}
	out, err := c.operate(ctx, req)
	// A spent key of an operation is this package's to replace (the
	// chain): the caller has no new key to record.
	out.NewKey = false
	out.Call, out.Key = req.Kind.Call(), req.IdempotencyKey
	if err != nil {
		return out, fmt.Errorf("%s %s at stripe psp %s: after %d sends and %d lookups: %w",
			req.Kind.Call(), req.IdempotencyKey, c.cfg.Name, out.Sent, out.Lookups, err)
	}
	return out, nil
}

func validateOperation(req psp.OperationRequest) error {
	switch {
	case req.Kind != psp.KindCapture && req.Kind != psp.KindVoid && req.Kind != psp.KindRefund:
		return fmt.Errorf("operation %q: unknown kind", req.Kind)
	case req.IdempotencyKey == "":
		return fmt.Errorf("%s: idempotency key is required", req.Kind)
	case !referenceRE.MatchString(req.Reference):
		return fmt.Errorf("%s %s: reference %q is not an id", req.Kind, req.IdempotencyKey, req.Reference)
	case !strings.HasPrefix(req.Authorization, "pi_"):
		return fmt.Errorf("%s %s: authorization %q is not a PaymentIntent", req.Kind, req.IdempotencyKey, req.Authorization)
	case req.Kind == psp.KindVoid && req.Amount != 0:
		return fmt.Errorf("%s %s: a void takes no amount", req.Kind, req.IdempotencyKey)
	case req.Kind != psp.KindVoid && req.Amount <= 0:
		return fmt.Errorf("%s %s: amount %d must be positive", req.Kind, req.IdempotencyKey, req.Amount)
	}
	return nil
}

// chainKey is the i-th key of the chain derived from key.
func chainKey(key string, i int) string {
	if i == 0 {
		return key
	}
	return key + ":" + strconv.Itoa(i+1)
}

func (c *Client) operate(ctx context.Context, req psp.OperationRequest) (psp.Outcome, error) {
	var n counts
	look := func() (psp.Outcome, bool, error) {
		n.lookups++
		return c.lookOperation(ctx, req)
	}
	if !req.FirstSend {
		found, ok, err := look()
		if err != nil {
			return n.on(psp.Outcome{Class: psp.ClassUnknown, Reason: publicOf(err)}), err
		}
		if ok {
			return n.on(found), nil
		}
	}
	pauses := c.pauses()
	for link := 0; ; {
		out, err := c.sendOperation(ctx, req, chainKey(req.IdempotencyKey, link))
		n.sent++
		switch out.Class {
		case psp.ClassSuccess:
			return n.on(out), nil
		case psp.ClassFinalFailure:
			if req.Kind == psp.KindRefund {
				return n.on(out), err
			}
			// A capture or cancel refused for the PaymentIntent's state
			// (payment_intent_unexpected_state) may be one an earlier send
			// of ours did: the PaymentIntent's state says.
			found, ok, lerr := look()
			if lerr == nil && ok {
				return n.on(found), nil
			}
			return n.on(out), err
		case psp.ClassBusy:
			if n.sent >= c.cfg.MaxAttempts || out.RetryAfter > c.cfg.MaxBackoff {
				return n.on(out), err
			}
			if perr := sleep(ctx, max(pauses.NextBackOff(), out.RetryAfter)); perr != nil {
				return n.on(out), fmt.Errorf("%w (%v)", err, perr)
			}
			continue
		}
		if ctx.Err() != nil {
			return n.on(out), err
		}
		found, ok, lerr := look()
		switch {
		case lerr != nil:
			return n.on(psp.Outcome{Class: psp.ClassUnknown, StatusCode: out.StatusCode, Reason: publicOf(lerr)}),
				fmt.Errorf("%w (after: %v)", lerr, err)
		case ok:
			return n.on(found), nil
		}
		if out.NewKey {
			link++ // spent, and the lookup found nothing it did
		}
		if n.sent >= c.cfg.MaxAttempts {
			return n.on(out), err
		}
		if perr := sleep(ctx, pauses.NextBackOff()); perr != nil {
			return n.on(out), fmt.Errorf("%w (%v)", err, perr)
		}
	}
}

// sendOperation sends req under key once and classifies the answer; a
// replayed 5xx comes back with NewKey.
func (c *Client) sendOperation(ctx context.Context, req psp.OperationRequest, key string) (psp.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	var (
		op  psp.Operation
		err error
	)
	switch req.Kind {
	case psp.KindCapture:
		p := &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(req.Amount)}
		p.IdempotencyKey = stripe.String(key)
		p.AddMetadata(MetaKey, key)
		var pi *stripe.PaymentIntent
		if pi, err = c.sc.V1PaymentIntents.Capture(ctx, req.Authorization, p); err == nil {
			op, err = captured(pi, req)
		}
	case psp.KindVoid:
		p := &stripe.PaymentIntentCancelParams{}
		p.IdempotencyKey = stripe.String(key)
		var pi *stripe.PaymentIntent
		if pi, err = c.sc.V1PaymentIntents.Cancel(ctx, req.Authorization, p); err == nil {
			op, err = voided(pi, req)
		}
	case psp.KindRefund:
		p := &stripe.RefundCreateParams{PaymentIntent: stripe.String(req.Authorization), Amount: stripe.Int64(req.Amount)}
		p.IdempotencyKey = stripe.String(key)
		p.AddMetadata(MetaRefund, req.Reference)
		p.AddMetadata(MetaKey, key)
		var r *stripe.Refund
		if r, err = c.sc.V1Refunds.Create(ctx, p); err == nil {
			var settled bool
			if op, settled, err = refunded(r, req); err == nil && !settled {
				err = errNotSettled
			}
		}
	}
	var bad *answerError
	if errors.As(err, &bad) {
		if errors.Is(err, errRefundFailed) {
			return refusal(bad.Error(), 200)
		}
		return malformed(200, err)
	}
	x := newExchange(err)
	if err == nil {
		return psp.Outcome{Class: psp.ClassSuccess, StatusCode: x.status, Operation: op}, nil
	}
	class := x.class()
	out, ferr := x.failure(ctx, class)
	if class == psp.ClassUnknown && x.spent() {
		out.NewKey, out.Reason = true, ReasonKeySpent
		ferr.(*psp.Failure).Public = ReasonKeySpent
	}
	return out, ferr
}

// answerError is a 2xx answer phasepay cannot record as the operation's
// success.
type answerError struct{ msg string }

func (e *answerError) Error() string { return e.msg }

var (
	errNotSettled   = &answerError{"refund not settled (requires_action)"}
	errRefundFailed = &answerError{"the refund failed at Stripe"}
)

func (e *answerError) Is(target error) bool { return target == e }

// captured is the capture a 2xx answer reports. Stripe answers the
// PaymentIntent when the capture succeeded and an error otherwise; its
// amount_received is what was captured, or, where it reports none
// (stripe-mock's fixtures), the amount asked.
func captured(pi *stripe.PaymentIntent, req psp.OperationRequest) (psp.Operation, error) {
	if pi == nil || pi.ID != req.Authorization {
		return psp.Operation{}, &answerError{fmt.Sprintf("capture answered for another PaymentIntent than %s", req.Authorization)}
	}
	amount := req.Amount
	if pi.Status == stripe.PaymentIntentStatusSucceeded && pi.AmountReceived > 0 {
		amount = pi.AmountReceived
	}
	return psp.Operation{ID: pi.ID, Status: psp.StatusCaptured, Authorization: pi.ID, Amount: amount,
		Currency: string(pi.Currency), Reference: req.Reference}, nil
}

// voided is the void a 2xx answer to a cancel reports.
func voided(pi *stripe.PaymentIntent, req psp.OperationRequest) (psp.Operation, error) {
	if pi == nil || pi.ID != req.Authorization {
		return psp.Operation{}, &answerError{fmt.Sprintf("cancel answered for another PaymentIntent than %s", req.Authorization)}
	}
	return psp.Operation{ID: pi.ID, Status: psp.StatusVoided, Authorization: pi.ID, Amount: pi.Amount,
		Currency: string(pi.Currency), Reference: req.Reference}, nil
}

// refunded is the refund a Refund reports: settled when it succeeded or is
// pending (it holds its amount either way), an errRefundFailed when it
// failed or was canceled.
func refunded(r *stripe.Refund, req psp.OperationRequest) (psp.Operation, bool, error) {
	if r == nil || r.ID == "" {
		return psp.Operation{}, false, &answerError{"a Refund without an id"}
	}
	if ref := r.Metadata[MetaRefund]; ref != "" && ref != req.Reference {
		return psp.Operation{}, false, &answerError{fmt.Sprintf("Refund %s is %q's, not %q's", r.ID, ref, req.Reference)}
	}
	switch r.Status {
	case stripe.RefundStatusSucceeded, stripe.RefundStatusPending:
		return psp.Operation{ID: r.ID, Status: psp.StatusRefunded, Authorization: req.Authorization, Amount: r.Amount,
			Currency: string(r.Currency), Reference: req.Reference}, true, nil
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		return psp.Operation{}, true, errRefundFailed
	}
	return psp.Operation{}, false, nil
}

// lookOperation reads whether the operation is done at Stripe: the
// PaymentIntent's status for a capture or void, its refunds for a refund.
func (c *Client) lookOperation(ctx context.Context, req psp.OperationRequest) (psp.Outcome, bool, error) {
	if req.Kind == psp.KindRefund {
		return c.lookRefund(ctx, req)
	}
	pi, err := c.retrieve(ctx, req.Authorization)
	if err != nil {
		return psp.Outcome{}, false, err
	}
	var op psp.Operation
	switch {
	case req.Kind == psp.KindCapture && pi.Status == stripe.PaymentIntentStatusSucceeded:
		op, err = captured(pi, req)
	case req.Kind == psp.KindVoid && pi.Status == stripe.PaymentIntentStatusCanceled:
		op, err = voided(pi, req)
	default:
		return psp.Outcome{}, false, nil
	}
	if err != nil {
		out, merr := malformed(200, err)
		return out, false, merr
	}
	return foundOutcome(psp.Outcome{Class: psp.ClassSuccess, Operation: op}), true, nil
}

// FindOperation reads whether the capture, void or refund req names is done
// at Stripe (lookOperation), for an operator's resolution: found reports
// whether Stripe holds it.
func (c *Client) FindOperation(ctx context.Context, req psp.OperationRequest) (psp.Operation, bool, error) {
	out, found, err := c.lookOperation(ctx, req)
	if err != nil || !found {
		return psp.Operation{}, false, err
	}
	return out.Operation, true, nil
}

// lookRefund lists the PaymentIntent's refunds (consistent) for the one
// whose metadata names req's refund and that succeeded or is pending.
func (c *Client) lookRefund(ctx context.Context, req psp.OperationRequest) (psp.Outcome, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	params := &stripe.RefundListParams{PaymentIntent: stripe.String(req.Authorization)}
	params.Limit = stripe.Int64(100)
	seen := 0
	for r, err := range c.sc.V1Refunds.List(ctx, params) {
		if err != nil {
			return psp.Outcome{}, false, lookupFailure(ctx, "list refunds of", req.Authorization, err)
		}
		if seen++; seen > 1000 {
			break
		}
		if r.Metadata[MetaRefund] != req.Reference {
			continue
		}
		// A failed refund refunded nothing: it is not the one asked for,
		// and a new one may be made.
		op, settled, err := refunded(r, req)
		if err != nil || !settled {
			continue
		}
		return foundOutcome(psp.Outcome{Class: psp.ClassSuccess, Operation: op}), true, nil
	}
	return psp.Outcome{}, false, nil
}
