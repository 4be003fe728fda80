package stripepsp

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/stripe/stripe-go/v82"

	"github.com/phasepay/phasepay/internal/psp"
)

// How an authorization attempt stays safe under Stripe's semantics. An
// attempt is a key K, recorded (with its time T) before its first send.
//
//  1. While K is younger than KeyWindow, a resend under K is safe without
//     a lookup: Stripe answers it with K's first answer, or executes it if
//     nothing under K ever executed. An unknown outcome (5xx, a timeout, a
//     lost answer) is resent under K, so within the window Stripe's key
//     is the lookup.
//  2. K is spent when Stripe replays a 5xx it saved under it
//     (Idempotent-Replayed): every later send under K gets that 5xx, and
//     none executes. Past KeyWindow, K is never sent again either (Stripe
//     may have forgotten it, and a send would then execute anew). In both
//     cases the PaymentIntent is searched for by the charge id in its
//     metadata: found, it is the answer; not found, the outcome is unknown
//     and NewKey: the charge records a new attempt under a new key
//     (<charge>:authorize:<n+1>) at this PSP, at its time T'.
//  3. A renewed attempt (one after a spent key) sends under its key only
//     once a search at or after T' + SearchLag finds nothing. Every send
//     under an earlier key happened before T' (rule 2 stops them), so by
//     then Stripe's search shows whatever they did: not found means
//     nothing exists. Before that, "not found" is "not found yet": the
//     outcome stays unknown and the attempt waits. After its first send,
//     the renewed key is resent under rule 1 like any.
//
// So at any time at most one key of a charge can still execute at Stripe,
// each key executes at most once, and a key takes over only from one that
// is proved to have done nothing: no path authorizes twice. Webhooks only
// shorten the wait: a PaymentIntent Stripe reported is read by id
// (Hint), which is consistent.

// referenceRE is the shape of a charge id (and a refund id): what is put in
// a search query, quoted, must not be able to close the quote.
var referenceRE = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)

// AuthorizeOutcome is one attempt to get req authorized, by the rules
// above, within MaxAttempts sends. The outcome and error are as
// internal/psp's Client.AuthorizeOutcome's, and NewKey as documented on
// psp.Outcome.
func (c *Client) AuthorizeOutcome(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error) {
	if req.IdempotencyKey == "" {
		return psp.Outcome{}, errors.New("authorize: idempotency key is required")
	}
	if !referenceRE.MatchString(req.Reference) {
		return psp.Outcome{}, fmt.Errorf("authorize %s: reference %q is not a charge id", req.IdempotencyKey, req.Reference)
	}
	out, err := c.authorize(ctx, req)
	out.Call, out.Key = psp.CallAuthorize, req.IdempotencyKey
	if err != nil {
		return out, fmt.Errorf("authorize %s at stripe psp %s: after %d sends and %d lookups: %w",
			req.IdempotencyKey, c.cfg.Name, out.Sent, out.Lookups, err)
	}
	return out, nil
}

// counts are the requests of one call, for the outcome it returns.
type counts struct{ sent, lookups int }

func (n counts) on(out psp.Outcome) psp.Outcome {
	out.Sent, out.Lookups = n.sent, n.lookups
	return out
}

func (c *Client) authorize(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error) {
	var n counts
	if req.Hint != "" {
		// A PaymentIntent Stripe reported for the charge: read by id, which
		// is consistent. A hint that cannot be read or is not the charge's
		// decides nothing; the rules below go on.
		n.lookups++
		if found, ok := c.byHint(ctx, req); ok {
			return n.on(found), nil
		}
	}
	inWindow := c.age(req.KeyCreatedAt) < c.cfg.KeyWindow
	if req.Renewed || !inWindow {
		found, ok, err := c.search(ctx, req.Reference, &n)
		switch {
		case err != nil:
			return n.on(psp.Outcome{Class: psp.ClassUnknown, Reason: publicOf(err)}), err
		case ok:
			return n.on(found), nil
		case !inWindow:
			out, err := unknownOutcome(ReasonKeyWindow, fmt.Errorf("key %s is past the key window (%s) and a search found no PaymentIntent", req.IdempotencyKey, c.cfg.KeyWindow))
			out.NewKey = true
			return n.on(out), err
		case c.age(req.KeyCreatedAt) < c.cfg.SearchLag:
			out, err := unknownOutcome(ReasonSearchLag, fmt.Errorf("a search found no PaymentIntent, and it may lag behind earlier keys' sends for up to %s", c.cfg.SearchLag))
			return n.on(out), err
		}
		// Renewed and past SearchLag: nothing exists under earlier keys.
	}
	return c.sendWithin(ctx, req, &n)
}

// sendWithin sends req under its key, resending (rule 1) while its
// outcome is unknown, the key is in its window and sends are left.
func (c *Client) sendWithin(ctx context.Context, req psp.AuthorizeRequest, n *counts) (psp.Outcome, error) {
	pauses := c.pauses()
	for {
		out, err := c.sendAuthorization(ctx, req)
		n.sent++
		switch out.Class {
		case psp.ClassSuccess, psp.ClassFinalFailure:
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
		if out.NewKey {
			// Spent (rule 2): only a search can tell what it did.
			found, ok, serr := c.search(ctx, req.Reference, n)
			switch {
			case serr != nil:
				out.NewKey = false
				return n.on(out), fmt.Errorf("%w (then: %v)", err, serr)
			case ok:
				return n.on(found), nil
			}
			return n.on(out), err
		}
		if n.sent >= c.cfg.MaxAttempts || ctx.Err() != nil || c.age(req.KeyCreatedAt) >= c.cfg.KeyWindow {
			return n.on(out), err
		}
		if perr := sleep(ctx, pauses.NextBackOff()); perr != nil {
			return n.on(out), fmt.Errorf("%w (%v)", err, perr)
		}
	}
}

// sendAuthorization creates and confirms the PaymentIntent under req's key,
// once, and classifies the answer. A replayed 5xx comes back with NewKey.
func (c *Client) sendAuthorization(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	params := authorizationParams(req)
	pi, err := c.sc.V1PaymentIntents.Create(ctx, params)
	x := newExchange(err)
	if err == nil {
		return c.answered(x.status, pi, req.Reference)
	}
	class := x.class()
	if x.declined() {
		return decline(x, req.Reference)
	}
	out, ferr := x.failure(ctx, class)
	if class == psp.ClassUnknown && x.spent() {
		out.NewKey, out.Reason = true, ReasonKeySpent
		ferr.(*psp.Failure).Public = ReasonKeySpent
	}
	return out, ferr
}

// authorizationParams is the PaymentIntent an attempt creates: a pure
// function of the charge and the key, so that every send under one key
// carries the same parameters (Stripe answers an idempotency_error
// otherwise; TestAuthorizationParamsAreStable pins them).
func authorizationParams(req psp.AuthorizeRequest) *stripe.PaymentIntentCreateParams {
	p := &stripe.PaymentIntentCreateParams{
		Amount:             stripe.Int64(req.Amount),
		Currency:           stripe.String(req.Currency),
		PaymentMethod:      stripe.String(req.PaymentMethod),
		PaymentMethodTypes: stripe.StringSlice([]string{"card"}),
		CaptureMethod:      stripe.String(string(stripe.PaymentIntentCaptureMethodManual)),
		Confirm:            stripe.Bool(true),
	}
	p.IdempotencyKey = stripe.String(req.IdempotencyKey)
	p.AddMetadata(MetaCharge, req.Reference)
	p.AddMetadata(MetaTenant, strconv.FormatInt(req.TenantID, 10))
	p.AddMetadata(MetaKey, req.IdempotencyKey)
	return p
}

// answered classifies a 2xx PaymentIntent answer to an authorization.
func (c *Client) answered(status int, pi *stripe.PaymentIntent, reference string) (psp.Outcome, error) {
	if err := checkPaymentIntent(pi, reference); err != nil {
		return malformed(status, err)
	}
	out, settled := settledPaymentIntent(pi)
	if !settled {
		return malformed(status, fmt.Errorf("PaymentIntent %s is %s, not a result phasepay can record", pi.ID, pi.Status))
	}
	out.StatusCode = status
	if out.Class == psp.ClassFinalFailure && !out.Declined() {
		_, err := refusal(out.Reason, status)
		return out, err
	}
	return out, nil
}

// checkPaymentIntent rejects a PaymentIntent that is not the charge's: one
// without an id, or whose metadata names another charge (stripe-mock
// echoes no metadata, so an absent one passes).
func checkPaymentIntent(pi *stripe.PaymentIntent, reference string) error {
	switch {
	case pi == nil || pi.ID == "":
		return errors.New("PaymentIntent without an id")
	case pi.Metadata[MetaCharge] != "" && pi.Metadata[MetaCharge] != reference:
		return fmt.Errorf("PaymentIntent %s is charge %q's, not %q's", pi.ID, pi.Metadata[MetaCharge], reference)
	}
	return nil
}

// settledPaymentIntent is what a PaymentIntent's status means for its
// charge's authorization, when it means something final: authorized
// (requires_capture, or succeeded once captured), declined (a confirmation
// that failed), or a final failure (requires_action, canceled). processing
// and the statuses before confirmation are not settled.
func settledPaymentIntent(pi *stripe.PaymentIntent) (psp.Outcome, bool) {
	switch pi.Status {
	case stripe.PaymentIntentStatusRequiresCapture, stripe.PaymentIntentStatusSucceeded:
		return psp.Outcome{Class: psp.ClassSuccess, Authorization: psp.Authorization{ID: pi.ID, Status: psp.StatusAuthorized, Reference: pi.Metadata[MetaCharge]}}, true
	case stripe.PaymentIntentStatusRequiresPaymentMethod:
		if pi.LastPaymentError == nil {
			return psp.Outcome{}, false
		}
		code := declineCode(pi.LastPaymentError)
		return psp.Outcome{Class: psp.ClassFinalFailure, Authorization: psp.Authorization{ID: pi.ID, Status: psp.StatusDeclined, DeclineCode: &code}}, true
	case stripe.PaymentIntentStatusRequiresAction:
		return psp.Outcome{Class: psp.ClassFinalFailure, Reason: ReasonAuthentication}, true
	case stripe.PaymentIntentStatusCanceled:
		return psp.Outcome{Class: psp.ClassFinalFailure, Reason: ReasonCanceled}, true
	}
	return psp.Outcome{}, false
}

// declineCode is a decline's code: the issuer's decline_code, else Stripe's
// code, else card_declined.
func declineCode(e *stripe.Error) string {
	switch {
	case e.DeclineCode != "":
		return string(e.DeclineCode)
	case e.Code != "":
		return string(e.Code)
	}
	return psp.DeclineCodeCardDeclined
}

// decline is the outcome of a card_error: the PaymentIntent Stripe made,
// declined. Without one in the answer, Stripe's request id stands for it.
func decline(x exchange, reference string) (psp.Outcome, error) {
	id := x.serr.RequestID
	if pi := x.serr.PaymentIntent; pi != nil && pi.ID != "" {
		if err := checkPaymentIntent(pi, reference); err != nil {
			return malformed(x.status, err)
		}
		id = pi.ID
	}
	if id == "" {
		return malformed(x.status, errors.New("card_error without a PaymentIntent or request id"))
	}
	code := declineCode(x.serr)
	return psp.Outcome{Class: psp.ClassFinalFailure, StatusCode: x.status,
		Authorization: psp.Authorization{ID: id, Status: psp.StatusDeclined, DeclineCode: &code, Reference: reference}}, nil
}

// search looks for the charge's PaymentIntents by their metadata, reads
// each found by id (search shows statuses as they were when indexed), and
// reports the one to record: one holding funds first, else the first
// settled. Not found, or found but none settled, is ok false. It counts its
// requests on n.
func (c *Client) search(ctx context.Context, reference string, n *counts) (psp.Outcome, bool, error) {
	ids, err := c.searchIDs(ctx, reference, n)
	if err != nil {
		return psp.Outcome{}, false, err
	}
	var pick psp.Outcome
	found := false
	for _, id := range ids {
		n.lookups++
		pi, err := c.retrieve(ctx, id)
		if err != nil {
			return psp.Outcome{}, false, err
		}
		if checkPaymentIntent(pi, reference) != nil || pi.Metadata[MetaCharge] != reference {
			continue
		}
		out, settled := settledPaymentIntent(pi)
		if !settled {
			continue
		}
		if out.Class == psp.ClassSuccess {
			return foundOutcome(out), true, nil
		}
		if !found {
			pick, found = out, true
		}
	}
	if found {
		return foundOutcome(pick), true, nil
	}
	return psp.Outcome{}, false, nil
}

// foundOutcome marks an outcome as found by lookup.
func foundOutcome(out psp.Outcome) psp.Outcome {
	out.StatusCode, out.FoundByLookup = 200, true
	return out
}

// searchIDs is the ids of the PaymentIntents whose metadata names the
// charge, by Stripe's search (every page).
func (c *Client) searchIDs(ctx context.Context, reference string, n *counts) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	params := &stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{
		Query: fmt.Sprintf("metadata['%s']:'%s'", MetaCharge, reference),
		Limit: stripe.Int64(100),
	}}
	var ids []string
	n.lookups++
	for pi, err := range c.sc.V1PaymentIntents.Search(ctx, params) {
		if err != nil {
			return nil, lookupFailure(ctx, "search", reference, err)
		}
		ids = append(ids, pi.ID)
		if len(ids) > 100 {
			break // a charge has a handful at most: a mock's fixture repeats
		}
	}
	return ids, nil
}

// retrieve reads a PaymentIntent by id: consistent, unlike search.
func (c *Client) retrieve(ctx context.Context, id string) (*stripe.PaymentIntent, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	pi, err := c.sc.V1PaymentIntents.Retrieve(ctx, id, nil)
	if err != nil {
		return nil, lookupFailure(ctx, "retrieve", id, err)
	}
	return pi, nil
}

// byHint reads the PaymentIntent of req.Hint and reports its outcome when
// it is the charge's and settled.
func (c *Client) byHint(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, bool) {
	if !strings.HasPrefix(req.Hint, "pi_") {
		return psp.Outcome{}, false
	}
	pi, err := c.retrieve(ctx, req.Hint)
	if err != nil || pi.Metadata[MetaCharge] != req.Reference {
		return psp.Outcome{}, false
	}
	out, settled := settledPaymentIntent(pi)
	if !settled {
		return psp.Outcome{}, false
	}
	return foundOutcome(out), true
}

// lookupFailure is the error of a lookup that did not answer: the outcome
// stays unknown.
func lookupFailure(ctx context.Context, what, ref string, err error) error {
	// Whatever Stripe answered (a 404 for an id it gave included), a
	// lookup that did not answer leaves the outcome unknown.
	_, ferr := newExchange(err).failure(ctx, psp.ClassUnknown)
	return fmt.Errorf("%s %s: %w", what, ref, ferr)
}

// publicOf is the public words of the Failure in err's chain.
func publicOf(err error) string {
	if f, ok := errors.AsType[*psp.Failure](err); ok {
		return f.Public
	}
	return ""
}

// Lookup returns the authorizations Stripe's search finds for reference (a
// charge id): its PaymentIntents that are authorized or declined, read by
// id. Search lags: an empty list says nothing about the last SearchLag
// (docs/psps.md, what an operator sees).
func (c *Client) Lookup(ctx context.Context, reference string) ([]psp.Authorization, error) {
	if !referenceRE.MatchString(reference) {
		return nil, fmt.Errorf("lookup: reference %q is not a charge id", reference)
	}
	var n counts
	ids, err := c.searchIDs(ctx, reference, &n)
	if err != nil {
		return nil, err
	}
	var list []psp.Authorization
	for _, id := range ids {
		pi, err := c.retrieve(ctx, id)
		if err != nil {
			return nil, err
		}
		if pi.Metadata[MetaCharge] != reference {
			continue
		}
		if out, ok := settledPaymentIntent(pi); ok && out.Authorization.ID != "" {
			list = append(list, out.Authorization)
		}
	}
	return list, nil
}

// age is how old a key recorded at t is; unknown (zero) is past any window.
func (c *Client) age(t time.Time) time.Duration {
	if t.IsZero() {
		return 1<<63 - 1
	}
	return c.cfg.Now().Sub(t)
}

// pauses is the backoff between sends of one call.
func (c *Client) pauses() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{InitialInterval: c.cfg.InitialBackoff, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: c.cfg.MaxBackoff}
	b.Reset()
	return b
}

// sleep pauses for d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
