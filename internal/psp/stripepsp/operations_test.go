package stripepsp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/stripepsp"
)

func capture(first bool) psp.OperationRequest {
	return psp.OperationRequest{Kind: psp.KindCapture, IdempotencyKey: recCharge + ":capture", FirstSend: first,
		Authorization: recPI, Amount: 600, Reference: recCharge}
}

// TestCaptureAndVoidAndRefundAnswers: a 2xx to a capture, cancel or refund
// is the operation done (Stripe answers the object when it succeeded, an
// error otherwise), each under its derived key.
func TestCaptureAndVoidAndRefundAnswers(t *testing.T) {
	t.Parallel()
	r := newReplay(t,
		step{match: "POST /v1/payment_intents/" + recPI + "/capture", answer: "pi_succeeded"},
		step{match: "POST /v1/payment_intents/" + recPI + "/cancel", answer: "pi_canceled"},
		step{match: "POST /v1/refunds", answer: "refund_succeeded"})
	c := testClient(t, r, &clock{now: t0})
	out, err := c.OperateOutcome(context.Background(), capture(true))
	require.NoError(t, err)
	require.Equal(t, psp.Operation{ID: recPI, Status: psp.StatusCaptured, Authorization: recPI, Amount: 600, Currency: "usd", Reference: recCharge}, out.Operation)

	out, err = c.OperateOutcome(context.Background(), psp.OperationRequest{Kind: psp.KindVoid, IdempotencyKey: recCharge + ":void", FirstSend: true, Authorization: recPI, Reference: recCharge})
	require.NoError(t, err)
	require.Equal(t, psp.StatusVoided, out.Operation.Status)

	out, err = c.OperateOutcome(context.Background(), psp.OperationRequest{Kind: psp.KindRefund, IdempotencyKey: "re_recorded:refund", FirstSend: true, Authorization: recPI, Amount: 300, Reference: "re_recorded"})
	require.NoError(t, err)
	require.Equal(t, psp.Operation{ID: "re_3Q0recorded0001", Status: psp.StatusRefunded, Authorization: recPI, Amount: 300, Currency: "usd", Reference: "re_recorded"}, out.Operation)

	reqs := r.requests()
	require.Equal(t, []string{recCharge + ":capture", recCharge + ":void", "re_recorded:refund"}, []string{reqs[0].Key, reqs[1].Key, reqs[2].Key})
	require.Equal(t, "600", reqs[0].Form.Get("amount_to_capture"))
	require.Equal(t, recPI, reqs[2].Form.Get("payment_intent"))
	require.Equal(t, "re_recorded", reqs[2].Form.Get("metadata[phasepay_refund]"))
}

// TestCaptureLostAnswerIsReadFromThePaymentIntent: a capture whose answer
// was lost is settled by reading the PaymentIntent (consistent): captured.
func TestCaptureLostAnswerIsReadFromThePaymentIntent(t *testing.T) {
	t.Parallel()
	r := newReplay(t,
		step{match: "POST /v1/payment_intents/" + recPI + "/capture", drop: true},
		step{match: "GET /v1/payment_intents/" + recPI, answer: "pi_succeeded"})
	out, err := testClient(t, r, &clock{now: t0}).OperateOutcome(context.Background(), capture(true))
	require.NoError(t, err)
	require.True(t, out.FoundByLookup)
	require.Equal(t, int64(600), out.Operation.Amount)
	r.done()
}

// TestCaptureRefusedForItsStateIsReadBack: a capture refused because the
// PaymentIntent is already captured (by an earlier send of ours whose key
// Stripe forgot) is the capture done, not a failure.
func TestCaptureRefusedForItsStateIsReadBack(t *testing.T) {
	t.Parallel()
	r := newReplay(t,
		step{match: "GET /v1/payment_intents/" + recPI, answer: "pi_requires_capture"},
		step{match: "POST /v1/payment_intents/" + recPI + "/capture", answer: "unexpected_state"},
		step{match: "GET /v1/payment_intents/" + recPI, answer: "pi_succeeded"})
	out, err := testClient(t, r, &clock{now: t0}).OperateOutcome(context.Background(), capture(false))
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	r.done()

	r = newReplay(t,
		step{match: "POST /v1/payment_intents/" + recPI + "/capture", answer: "unexpected_state"},
		step{match: "GET /v1/payment_intents/" + recPI, answer: "pi_canceled"})
	out, err = testClient(t, r, &clock{now: t0}).OperateOutcome(context.Background(), capture(true))
	require.ErrorIs(t, err, psp.ErrRejected)
	require.Contains(t, out.Reason, "payment_intent_unexpected_state")
}

// TestSpentRefundKeyMovesToTheNextKeyOfTheChain: a refund key Stripe
// replays a saved 500 under is left for the next of its chain only after
// the refunds' (consistent) list shows nothing was refunded under it.
func TestSpentRefundKeyMovesToTheNextKeyOfTheChain(t *testing.T) {
	t.Parallel()
	refund := psp.OperationRequest{Kind: psp.KindRefund, IdempotencyKey: "re_recorded:refund", Authorization: recPI, Amount: 300, Reference: "re_recorded"}
	r := newReplay(t,
		step{match: "GET /v1/refunds", answer: "refunds_empty"},
		step{match: "POST /v1/refunds", answer: "api_error_replayed"},
		step{match: "GET /v1/refunds", answer: "refunds_empty"},
		step{match: "POST /v1/refunds", answer: "refund_succeeded"})
	out, err := testClient(t, r, &clock{now: t0}).OperateOutcome(context.Background(), refund)
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.False(t, out.NewKey)
	reqs := r.requests()
	require.Equal(t, "re_recorded:refund", reqs[1].Key)
	require.Equal(t, "re_recorded:refund:2", reqs[3].Key)
	require.Equal(t, recPI, reqs[0].Form.Get("payment_intent"))

	// The next call starts the chain again and finds the second key's
	// refund by its metadata: nothing is sent.
	r = newReplay(t, step{match: "GET /v1/refunds", answer: "refunds_list"})
	out, err = testClient(t, r, &clock{now: t0}).OperateOutcome(context.Background(), refund)
	require.NoError(t, err)
	require.True(t, out.FoundByLookup)
	require.Zero(t, out.Sent)
}

// TestStripeWebhookIsVerified: stripe-go's webhook package verifies the
// Stripe-Signature header; a payment_intent.* event of one of phasepay's
// PaymentIntents is reported, anything else is not.
func TestStripeWebhookIsVerified(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_recorded"
	payload := []byte(`{"id":"evt_1","object":"event","api_version":"2020-08-27","type":"payment_intent.amount_capturable_updated",
 "data":{"object":{"id":"` + recPI + `","object":"payment_intent","status":"requires_capture",
 "metadata":{"phasepay_charge":"ch_recorded","phasepay_tenant":"7","phasepay_key":"ch_recorded:authorize:1"}}}}`)
	sign := func(secret string, at time.Time) string {
		return fmt.Sprintf("t=%d,v1=%x", at.Unix(), webhook.ComputeSignature(at, payload, secret))
	}
	rep, ours, err := stripepsp.ParseWebhook(payload, sign(secret, time.Now()), secret)
	require.NoError(t, err)
	require.True(t, ours)
	require.Equal(t, stripepsp.Report{EventID: "evt_1", Type: "payment_intent.amount_capturable_updated", PaymentIntent: recPI,
		Charge: recCharge, TenantID: 7, Key: recKey}, rep)

	for name, header := range map[string]string{
		"wrong secret": sign("whsec_other", time.Now()),
		"too old":      sign(secret, time.Now().Add(-time.Hour)),
		"unsigned":     "",
	} {
		_, _, err := stripepsp.ParseWebhook(payload, header, secret)
		require.ErrorIs(t, err, stripepsp.ErrWebhookSignature, name)
	}
	_, _, err = stripepsp.ParseWebhook(payload, sign("", time.Now()), "")
	require.ErrorIs(t, err, stripepsp.ErrWebhookSignature, "no secret configured verifies nothing")

	other := []byte(`{"id":"evt_2","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_x","object":"charge"}}}`)
	_, ours, err = stripepsp.ParseWebhook(other, fmt.Sprintf("t=%d,v1=%x", time.Now().Unix(), webhook.ComputeSignature(time.Now(), other, secret)), secret)
	require.NoError(t, err)
	require.False(t, ours)
}
