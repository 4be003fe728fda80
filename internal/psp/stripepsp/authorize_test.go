package stripepsp_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/stripepsp"
)

var t0 = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

const createPath = "POST /v1/payment_intents"

// TestStripeOutcomeTable: every row of the outcome table (classify.go,
// docs/psps.md), one recorded Stripe answer to an authorization each,
// classified as the table says.
func TestStripeOutcomeTable(t *testing.T) {
	t.Parallel()
	send := func(answer string) step { return step{match: createPath, answer: answer} }
	for _, tt := range []struct {
		name     string
		steps    []step
		class    psp.Class
		declined string // the decline code of a decline
		sentinel error
		reason   string
		newKey   bool
	}{
		{name: "requires_capture is authorized", steps: []step{send("pi_requires_capture")}, class: psp.ClassSuccess},
		{name: "succeeded is authorized", steps: []step{send("pi_succeeded")}, class: psp.ClassSuccess},
		{name: "card_error is a decline", steps: []step{send("card_declined")}, class: psp.ClassFinalFailure, declined: "generic_decline"},
		{name: "card_error authentication_required is a decline", steps: []step{send("authentication_required")}, class: psp.ClassFinalFailure, declined: "authentication_required"},
		{name: "requires_payment_method with an error is a decline", steps: []step{send("pi_declined")}, class: psp.ClassFinalFailure, declined: "insufficient_funds"},
		{name: "requires_action is a final failure", steps: []step{send("pi_requires_action")}, class: psp.ClassFinalFailure, sentinel: psp.ErrRejected, reason: stripepsp.ReasonAuthentication},
		{name: "canceled is a final failure", steps: []step{send("pi_canceled")}, class: psp.ClassFinalFailure, sentinel: psp.ErrRejected, reason: stripepsp.ReasonCanceled},
		{name: "invalid_request_error is a final failure", steps: []step{send("invalid_request")}, class: psp.ClassFinalFailure, sentinel: psp.ErrRejected, reason: "resource_missing: No such PaymentMethod"},
		{name: "a 404 is a final failure", steps: []step{send("not_found")}, class: psp.ClassFinalFailure, sentinel: psp.ErrRejected},
		{name: "idempotency_error is a final failure", steps: []step{send("idempotency_error")}, class: psp.ClassFinalFailure, sentinel: psp.ErrRejected, reason: "Keys for idempotent requests"},
		{name: "409 idempotency_key_in_use is busy", steps: []step{send("key_in_use")}, class: psp.ClassBusy, sentinel: psp.ErrBusy},
		{name: "429 rate_limit is busy", steps: []step{send("rate_limit")}, class: psp.ClassBusy, sentinel: psp.ErrBusy},
		{name: "lock_timeout is busy", steps: []step{send("lock_timeout")}, class: psp.ClassBusy, sentinel: psp.ErrBusy},
		{name: "401 is unknown", steps: []step{send("unauthorized")}, class: psp.ClassUnknown, sentinel: psp.ErrUnavailable, reason: "PSP answered 401"},
		{name: "500 api_error is unknown", steps: []step{send("api_error")}, class: psp.ClassUnknown, sentinel: psp.ErrUnavailable, reason: "PSP answered 500"},
		{name: "a replayed 500 is unknown, the key spent", steps: []step{send("api_error_replayed"), {match: "GET /v1/payment_intents/search", answer: "search_empty"}},
			class: psp.ClassUnknown, sentinel: psp.ErrUnavailable, reason: stripepsp.ReasonKeySpent, newKey: true},
		{name: "processing is unknown", steps: []step{send("pi_processing")}, class: psp.ClassUnknown, sentinel: psp.ErrUnavailable, reason: psp.ReasonMalformed},
		{name: "a lost answer is unknown", steps: []step{{match: createPath, drop: true}}, class: psp.ClassUnknown, sentinel: psp.ErrUnavailable, reason: psp.ReasonConnectionLost},
		{name: "a timeout is unknown", steps: []step{{match: createPath, hang: true}}, class: psp.ClassUnknown, sentinel: psp.ErrUnavailable, reason: psp.ReasonTimedOut},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newReplay(t, tt.steps...)
			clk := &clock{now: t0}
			c, err := stripepsp.New(stripepsp.Config{Name: "stripe", URL: "stripe+" + r.srv.URL,
				Settings:       stripepsp.Settings{APIKey: "sk_test_recorded"},
				AttemptTimeout: 100 * time.Millisecond, MaxAttempts: 1, Now: clk.Now})
			require.NoError(t, err)
			req := authorizeReq(t0)
			req.FirstSend = true
			out, err := c.AuthorizeOutcome(context.Background(), req)
			r.done()
			require.Equal(t, tt.class, out.Class, "%v", err)
			require.Equal(t, tt.newKey, out.NewKey)
			if tt.declined != "" {
				require.NoError(t, err)
				require.True(t, out.Declined())
				require.Equal(t, tt.declined, *out.Authorization.DeclineCode)
				require.Equal(t, recPI, out.Authorization.ID)
			} else {
				require.False(t, out.Declined())
			}
			if tt.class == psp.ClassSuccess {
				require.NoError(t, err)
				require.Equal(t, psp.Authorization{ID: recPI, Status: psp.StatusAuthorized, Reference: recCharge}, out.Authorization)
			}
			if tt.sentinel != nil {
				require.ErrorIs(t, err, tt.sentinel)
			}
			if tt.reason != "" {
				require.Contains(t, out.Reason, tt.reason)
			}
			require.Equal(t, recKey, r.requests()[0].Key, "sent under the attempt's derived key")
		})
	}
}

// TestAuthorizationParamsAreStable pins what an authorization sends: every
// send under one key must carry the same parameters, or Stripe answers an
// idempotency_error (a final failure) to a resend of a request that may
// have authorized.
func TestAuthorizationParamsAreStable(t *testing.T) {
	t.Parallel()
	r := newReplay(t, step{match: createPath, answer: "pi_requires_capture"})
	c := testClient(t, r, &clock{now: t0})
	req := authorizeReq(t0)
	req.FirstSend = true
	_, err := c.AuthorizeOutcome(context.Background(), req)
	require.NoError(t, err)
	got := r.requests()[0]
	require.Equal(t, recKey, got.Key)
	require.Equal(t, url.Values{
		"amount": {"1000"}, "currency": {"usd"}, "payment_method": {"pm_card_visa"},
		"payment_method_types[0]": {"card"}, "capture_method": {"manual"}, "confirm": {"true"},
		"metadata[phasepay_charge]": {recCharge}, "metadata[phasepay_tenant]": {"7"}, "metadata[phasepay_key]": {recKey},
	}, got.Form)
}

// TestLostAnswerWithinKeyWindowIsResentUnderTheSameKey: within Stripe's
// key window a lost answer is resent under the same key, without a
// lookup: Stripe answers the resend with the first request's answer.
func TestLostAnswerWithinKeyWindowIsResentUnderTheSameKey(t *testing.T) {
	t.Parallel()
	r := newReplay(t, step{match: createPath, drop: true}, step{match: createPath, answer: "pi_requires_capture"})
	clk := &clock{now: t0.Add(23*time.Hour - time.Minute)}
	out, err := testClient(t, r, clk).AuthorizeOutcome(context.Background(), authorizeReq(t0))
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.Equal(t, 2, out.Sent)
	reqs := r.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, reqs[0].Key, reqs[1].Key)
	require.Equal(t, reqs[0].Form, reqs[1].Form)
}

// TestLostAnswerBeyondKeyWindowIsLookedUpNotResent: past the key window
// Stripe may have forgotten the key, and a resend would be a new
// PaymentIntent: the charge is searched for and read by id instead.
func TestLostAnswerBeyondKeyWindowIsLookedUpNotResent(t *testing.T) {
	t.Parallel()
	r := newReplay(t,
		step{match: "GET /v1/payment_intents/search", answer: "search_found"},
		step{match: "GET /v1/payment_intents/" + recPI, answer: "pi_requires_capture"})
	clk := &clock{now: t0.Add(25 * time.Hour)}
	out, err := testClient(t, r, clk).AuthorizeOutcome(context.Background(), authorizeReq(t0))
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.True(t, out.FoundByLookup)
	require.Zero(t, out.Sent)
	require.Equal(t, recPI, out.Authorization.ID)
	r.done()
	require.Equal(t, "metadata['phasepay_charge']:'ch_recorded'", r.requests()[0].Form.Get("query"))
}

// TestBeyondKeyWindowNotFoundRenewsTheKey: past the window, a search that
// finds nothing sends nothing under the old key; the outcome is unknown
// and asks for a new key.
func TestBeyondKeyWindowNotFoundRenewsTheKey(t *testing.T) {
	t.Parallel()
	r := newReplay(t, step{match: "GET /v1/payment_intents/search", answer: "search_empty"})
	out, err := testClient(t, r, &clock{now: t0.Add(25 * time.Hour)}).AuthorizeOutcome(context.Background(), authorizeReq(t0))
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.Equal(t, psp.ClassUnknown, out.Class)
	require.True(t, out.NewKey)
	require.Equal(t, stripepsp.ReasonKeyWindow, out.Reason)
	require.Zero(t, out.Sent)
	r.done()
}

// TestSavedServerErrorIsResolvedByLookup: Stripe replays a 500 it saved
// under the key; a resend could never complete, so the charge is searched
// for: found, it is the answer.
func TestSavedServerErrorIsResolvedByLookup(t *testing.T) {
	t.Parallel()
	r := newReplay(t,
		step{match: createPath, answer: "api_error"},
		step{match: createPath, answer: "api_error_replayed"},
		step{match: "GET /v1/payment_intents/search", answer: "search_found"},
		step{match: "GET /v1/payment_intents/" + recPI, answer: "pi_requires_capture"})
	out, err := testClient(t, r, &clock{now: t0.Add(time.Minute)}).AuthorizeOutcome(context.Background(), authorizeReq(t0))
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.True(t, out.FoundByLookup)
	require.Equal(t, 2, out.Sent)
	r.done()
	reqs := r.requests()
	require.Equal(t, reqs[0].Key, reqs[1].Key, "the saved 500 was replayed under the same key")
}

// TestSavedServerErrorWithNothingFoundAsksForANewKey: the lookup after a
// replayed 500 finds nothing (yet): nothing more is sent under the spent
// key; the outcome asks for a new one (the charge records it, and the new
// key waits out the search lag: TestRenewedKeyWaitsOutTheSearchLag).
func TestSavedServerErrorWithNothingFoundAsksForANewKey(t *testing.T) {
	t.Parallel()
	r := newReplay(t,
		step{match: createPath, answer: "api_error_replayed"},
		step{match: "GET /v1/payment_intents/search", answer: "search_empty"})
	out, err := testClient(t, r, &clock{now: t0.Add(time.Minute)}).AuthorizeOutcome(context.Background(), authorizeReq(t0))
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.True(t, out.NewKey)
	require.Equal(t, 1, out.Sent)
	r.done()
}

// TestRenewedKeyWaitsOutTheSearchLag: a renewed key is sent only once a
// search made at least SearchLag after it was recorded finds nothing; before
// that, "not found" is "not found yet", an unknown outcome that sends
// nothing.
func TestRenewedKeyWaitsOutTheSearchLag(t *testing.T) {
	t.Parallel()
	renewed := authorizeReq(t0)
	renewed.IdempotencyKey, renewed.Renewed, renewed.FirstSend = "ch_recorded:authorize:2", true, true

	r := newReplay(t, step{match: "GET /v1/payment_intents/search", answer: "search_empty"})
	clk := &clock{now: t0.Add(59 * time.Minute)}
	out, err := testClient(t, r, clk).AuthorizeOutcome(context.Background(), renewed)
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.Equal(t, stripepsp.ReasonSearchLag, out.Reason)
	require.False(t, out.NewKey)
	require.Zero(t, out.Sent)
	r.done()

	r = newReplay(t,
		step{match: "GET /v1/payment_intents/search", answer: "search_empty"},
		step{match: createPath, answer: "pi_requires_capture"})
	clk = &clock{now: t0.Add(time.Hour)}
	out, err = testClient(t, r, clk).AuthorizeOutcome(context.Background(), renewed)
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.Equal(t, "ch_recorded:authorize:2", r.requests()[1].Key)
	r.done()
}

// TestSearchLagFoundIsTheAnswer: a renewed key's search that finds the
// PaymentIntent of the spent key records it, whatever its age.
func TestSearchLagFoundIsTheAnswer(t *testing.T) {
	t.Parallel()
	renewed := authorizeReq(t0)
	renewed.IdempotencyKey, renewed.Renewed = "ch_recorded:authorize:2", true
	r := newReplay(t,
		step{match: "GET /v1/payment_intents/search", answer: "search_found"},
		step{match: "GET /v1/payment_intents/" + recPI, answer: "pi_declined"})
	out, err := testClient(t, r, &clock{now: t0.Add(time.Minute)}).AuthorizeOutcome(context.Background(), renewed)
	require.NoError(t, err)
	require.True(t, out.Declined(), "the PaymentIntent read by id is the answer, not the search's stale copy")
	require.True(t, out.FoundByLookup)
	r.done()
}

// TestRateLimitIsRetriedUnderTheSameKey: 429s are busy: sent again, under
// the same key, after the pause.
func TestRateLimitIsRetriedUnderTheSameKey(t *testing.T) {
	t.Parallel()
	r := newReplay(t, step{match: createPath, answer: "lock_timeout"}, step{match: createPath, answer: "pi_requires_capture"})
	c, err := stripepsp.New(stripepsp.Config{Name: "stripe", URL: "stripe+" + r.srv.URL,
		Settings: stripepsp.Settings{APIKey: "sk_test_recorded"}, InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Second,
		Now: (&clock{now: t0}).Now})
	require.NoError(t, err)
	out, err := c.AuthorizeOutcome(context.Background(), authorizeReq(t0))
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	reqs := r.requests()
	require.Equal(t, reqs[0].Key, reqs[1].Key)

	r = newReplay(t, step{match: createPath, answer: "rate_limit"})
	c, err = stripepsp.New(stripepsp.Config{Name: "stripe", URL: "stripe+" + r.srv.URL,
		Settings: stripepsp.Settings{APIKey: "sk_test_recorded"}, MaxBackoff: 100 * time.Millisecond, Now: (&clock{now: t0}).Now})
	require.NoError(t, err)
	out, err = c.AuthorizeOutcome(context.Background(), authorizeReq(t0))
	require.ErrorIs(t, err, psp.ErrBusy)
	require.Equal(t, time.Second, out.RetryAfter, "a Retry-After past MaxBackoff goes to the caller's schedule")
}

// TestHintIsReadByID: a PaymentIntent Stripe's webhook reported is read by
// id, consistent, and settles the attempt without a search or a send; a
// hint that is not the charge's is ignored.
func TestHintIsReadByID(t *testing.T) {
	t.Parallel()
	req := authorizeReq(t0)
	req.Hint, req.Renewed = recPI, true
	r := newReplay(t, step{match: "GET /v1/payment_intents/" + recPI, answer: "pi_requires_capture"})
	out, err := testClient(t, r, &clock{now: t0.Add(time.Minute)}).AuthorizeOutcome(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.Zero(t, out.Sent)
	r.done()

	req.Reference = "ch_another"
	r = newReplay(t,
		step{match: "GET /v1/payment_intents/" + recPI, answer: "pi_requires_capture"},
		step{match: "GET /v1/payment_intents/search", answer: "search_empty"})
	out, err = testClient(t, r, &clock{now: t0.Add(time.Minute)}).AuthorizeOutcome(context.Background(), req)
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.Equal(t, stripepsp.ReasonSearchLag, out.Reason)
	r.done()
}

// TestLookupFailureLeavesTheOutcomeUnknown: a search that fails sends
// nothing.
func TestLookupFailureLeavesTheOutcomeUnknown(t *testing.T) {
	t.Parallel()
	r := newReplay(t, step{match: "GET /v1/payment_intents/search", answer: "api_error"})
	out, err := testClient(t, r, &clock{now: t0.Add(25 * time.Hour)}).AuthorizeOutcome(context.Background(), authorizeReq(t0))
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.False(t, out.NewKey)
	require.Zero(t, out.Sent)
	require.Equal(t, "PSP answered 500", out.Reason)
}

// TestCanceledCallIsInterrupted: a caller that leaves is not the PSP's
// failure.
func TestCanceledCallIsInterrupted(t *testing.T) {
	t.Parallel()
	r := newReplay(t, step{match: createPath, hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	out, err := testClient(t, r, &clock{now: t0}).AuthorizeOutcome(ctx, authorizeReq(t0))
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, psp.ErrUnavailable)
	require.Equal(t, psp.ReasonInterrupted, out.Reason)
}

// TestLibraryNeverResendsByItself: stripe-go resends a 5xx, a 409, a
// lock_timeout and a lost answer by itself, under the same key, up to its
// MaxNetworkRetries (2 by default): right within Stripe's key window, a
// second PaymentIntent past it. The connector turns that off: every send
// is its own decision, one request per send.
func TestLibraryNeverResendsByItself(t *testing.T) {
	t.Parallel()
	for _, s := range []step{
		{match: createPath, answer: "api_error"},
		{match: createPath, answer: "lock_timeout"},
		{match: createPath, answer: "key_in_use"},
		{match: createPath, drop: true},
	} {
		r := newReplay(t, s)
		c, err := stripepsp.New(stripepsp.Config{Name: "stripe", URL: "stripe+" + r.srv.URL,
			Settings: stripepsp.Settings{APIKey: "sk_test_recorded"}, MaxAttempts: 1, Now: (&clock{now: t0}).Now})
		require.NoError(t, err)
		out, _ := c.AuthorizeOutcome(context.Background(), authorizeReq(t0))
		require.Equal(t, 1, out.Sent)
		require.Len(t, r.requests(), 1, "%s %s: one request per send", s.answer, map[bool]string{true: "dropped"}[s.drop])
	}
}
