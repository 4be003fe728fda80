package stripepsp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/stripepsp"
	"github.com/phasepay/phasepay/internal/testutil/stripemock"
)

// TestEveryCallThroughStripeMock sends every request the connector makes
// (a PaymentIntent created and confirmed, searched, read by id, captured
// and canceled; a Refund created and listed) through Stripe's own mock,
// which validates each against Stripe's OpenAPI specification: a request
// it refused would come back a final failure or unknown, not the classes
// asserted here. stripe-mock keeps no state and echoes no metadata, so
// what its answers mean for the key window and search lag is tested on
// recorded answers instead (authorize_test.go).
func TestEveryCallThroughStripeMock(t *testing.T) {
	t.Parallel()
	m := stripemock.ForTest(t, stripemock.Options{Authorizing: true})
	now := time.Now()
	c, err := stripepsp.New(stripepsp.Config{Name: "stripe", URL: "stripe+" + m.URL,
		Settings: stripepsp.Settings{APIKey: "sk_test_123", KeyWindow: time.Hour, SearchLag: time.Minute}})
	require.NoError(t, err)
	ctx := context.Background()
	req := psp.AuthorizeRequest{IdempotencyKey: "ch_mock1:authorize:1", Amount: 1000, Currency: "usd",
		PaymentMethod: "pm_card_visa", Reference: "ch_mock1", TenantID: 1, KeyCreatedAt: now, FirstSend: true}

	// Create and confirm.
	out, err := c.AuthorizeOutcome(ctx, req)
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.True(t, strings.HasPrefix(out.Authorization.ID, "pi_"), out.Authorization.ID)
	pi := out.Authorization.ID

	// Past the key window: search, and each result read by id. The
	// mock's PaymentIntents carry no metadata: none is the charge's.
	req.FirstSend, req.KeyCreatedAt = false, now.Add(-2*time.Hour)
	out, err = c.AuthorizeOutcome(ctx, req)
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.True(t, out.NewKey, "%v", err)
	require.Positive(t, out.Lookups)
	require.Zero(t, out.Sent)

	// A hint read by id (not the charge's: ignored), then a renewed key
	// waiting out the search lag.
	req.Hint, req.Renewed, req.KeyCreatedAt = pi, true, now
	out, err = c.AuthorizeOutcome(ctx, req)
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.Equal(t, stripepsp.ReasonSearchLag, out.Reason)

	list, err := c.Lookup(ctx, "ch_mock1")
	require.NoError(t, err)
	require.Empty(t, list)

	// Capture, fresh and after a lookup by id; cancel; refund after a list.
	for _, first := range []bool{true, false} {
		out, err = c.OperateOutcome(ctx, psp.OperationRequest{Kind: psp.KindCapture, IdempotencyKey: "ch_mock1:capture",
			FirstSend: first, Authorization: pi, Amount: 600, Reference: "ch_mock1"})
		require.NoError(t, err)
		require.Equal(t, psp.StatusCaptured, out.Operation.Status)
	}
	out, err = c.OperateOutcome(ctx, psp.OperationRequest{Kind: psp.KindVoid, IdempotencyKey: "ch_mock1:void",
		FirstSend: true, Authorization: pi, Reference: "ch_mock1"})
	require.NoError(t, err)
	require.Equal(t, psp.StatusVoided, out.Operation.Status)
	out, err = c.OperateOutcome(ctx, psp.OperationRequest{Kind: psp.KindRefund, IdempotencyKey: "re_mock1:refund",
		Authorization: pi, Amount: 300, Reference: "re_mock1"})
	require.NoError(t, err)
	require.Equal(t, psp.StatusRefunded, out.Operation.Status)
	require.Equal(t, 1, out.Lookups, "the refunds listed before the send")
	require.True(t, strings.HasPrefix(out.Operation.ID, "re_"))
}

// TestStripeMockRefusesWhatStripeWould: stripe-mock checks requests as
// Stripe does (their parameters against Stripe's specification, and a
// secret key that looks like one), so the test above would see a refusal
// if the connector sent what Stripe refuses. Here a key that is not one:
// 401, an unknown outcome (a configuration fix must not find the charge
// failed).
func TestStripeMockRefusesWhatStripeWould(t *testing.T) {
	t.Parallel()
	m := stripemock.ForTest(t, stripemock.Options{})
	c, err := stripepsp.New(stripepsp.Config{Name: "stripe", URL: "stripe+" + m.URL, Settings: stripepsp.Settings{APIKey: "not_a_key"}, MaxAttempts: 1})
	require.NoError(t, err)
	out, err := c.AuthorizeOutcome(context.Background(), psp.AuthorizeRequest{IdempotencyKey: "ch_bad:authorize", Amount: 1000,
		Currency: "usd", PaymentMethod: "pm_card_visa", Reference: "ch_bad", KeyCreatedAt: time.Now(), FirstSend: true})
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.Equal(t, "PSP answered 401", out.Reason)
}
