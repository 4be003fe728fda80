package psp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

// authorizedBy authorizes ch_1 for 1000 through the client.
func authorizedBy(t *testing.T, b *clientBundle) string {
	t.Helper()
	out, err := b.client.AuthorizeOutcome(t.Context(), visaRequest("ch_1:authorize"))
	require.NoError(t, err)
	return out.Authorization.ID
}

func captureRequest(auth string) psp.OperationRequest {
	return psp.OperationRequest{Kind: psp.KindCapture, IdempotencyKey: "ch_1:capture", FirstSend: true, Authorization: auth, Amount: 1000, Reference: "ch_1"}
}

func TestOperate(t *testing.T) {
	t.Parallel()

	t.Run("CaptureVoidRefund", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		auth := authorizedBy(t, b)
		out, err := b.client.OperateOutcome(t.Context(), captureRequest(auth))
		require.NoError(t, err)
		require.Equal(t, psp.ClassSuccess, out.Class)
		require.Equal(t, psp.Operation{ID: b.mock.Captures()[0].ID, Status: psp.StatusCaptured, Authorization: auth, Amount: 1000, Currency: "usd", Reference: "ch_1"}, out.Operation)

		out, err = b.client.OperateOutcome(t.Context(), psp.OperationRequest{Kind: psp.KindRefund, IdempotencyKey: "re_1:refund", Authorization: auth, Amount: 300, Reference: "re_1"})
		require.NoError(t, err)
		require.Equal(t, psp.StatusRefunded, out.Operation.Status)
		require.Equal(t, 1, out.Lookups, "not a first send: looked up first")

		found, err := b.client.LookupOperations(t.Context(), psp.KindRefund, "re_1")
		require.NoError(t, err)
		require.Equal(t, []psp.Operation{out.Operation}, found)
		require.Equal(t, []string{"POST ch_1:authorize", "POST ch_1:capture", "GET re_1", "POST re_1:refund", "GET re_1"}, b.wire.all())
	})

	t.Run("InvariantRefusalIsFinal", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		auth := authorizedBy(t, b)
		_, err := b.client.OperateOutcome(t.Context(), captureRequest(auth))
		require.NoError(t, err)
		void := psp.OperationRequest{Kind: psp.KindVoid, IdempotencyKey: "ch_1:void", FirstSend: true, Authorization: auth, Reference: "ch_1"}
		out, err := b.client.OperateOutcome(t.Context(), void)
		require.ErrorIs(t, err, psp.ErrRejected)
		require.Equal(t, psp.ClassFinalFailure, out.Class)
		require.Contains(t, out.Reason, "already_captured")
	})

	t.Run("InvalidRequestsSendNothing", func(t *testing.T) {
		t.Parallel()
		b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
		for _, req := range []psp.OperationRequest{
			{Kind: "payouts", IdempotencyKey: "k", Authorization: "auth_1", Amount: 1, Reference: "ch_1"},
			{Kind: psp.KindVoid, IdempotencyKey: "k", Authorization: "auth_1", Amount: 1, Reference: "ch_1"},
			{Kind: psp.KindCapture, IdempotencyKey: "k", Authorization: "auth_1", Reference: "ch_1"},
			{Kind: psp.KindCapture, Authorization: "auth_1", Amount: 1, Reference: "ch_1"},
			{Kind: psp.KindCapture, IdempotencyKey: "k", Amount: 1, Reference: "ch_1"},
			{Kind: psp.KindCapture, IdempotencyKey: "k", Authorization: "auth_1", Amount: 1},
		} {
			_, err := b.client.OperateOutcome(t.Context(), req)
			require.Error(t, err)
			_, err = b.client.OperateOnce(t.Context(), req)
			require.Error(t, err)
		}
		_, err := b.client.LookupOperations(t.Context(), "payouts", "ch_1")
		require.Error(t, err)
		require.Empty(t, b.wire.all())
	})

	t.Run("MalformedIsUnknown", func(t *testing.T) {
		t.Parallel()
		for name, body := range map[string]string{
			"WrongStatus":        `{"id":"cap_1","status":"voided","authorization":"auth_1","reference":"ch_1"}`,
			"OtherAuthorization": `{"id":"cap_1","status":"captured","authorization":"auth_2","reference":"ch_1"}`,
			"NoID":               `{"status":"captured","authorization":"auth_1","reference":"ch_1"}`,
			"NotJSON":            `captured`,
		} {
			b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, postsOnly(func(w http.ResponseWriter) { _, _ = w.Write([]byte(body)) }))
			out, err := b.client.OperateOnce(t.Context(), captureRequest("auth_1"))
			require.ErrorIs(t, err, psp.ErrUnavailable, name)
			require.ErrorIs(t, err, psp.ErrMalformed, name)
			require.Equal(t, psp.ClassUnknown, out.Class, name)
			require.Zero(t, out.Operation, name)
		}
	})
}

// TestLostCaptureAnswerIsResolvedByLookup: as for authorizations, a lost
// answer is looked up, and a lookup that finds the capture settles it.
func TestLostCaptureAnswerIsResolvedByLookup(t *testing.T) {
	t.Parallel()
	b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, nil)
	auth := authorizedBy(t, b)
	require.NoError(t, b.mock.SetFaults(mockpsp.Faults{DropRate: 1}))

	out, err := b.client.OperateOutcome(t.Context(), captureRequest(auth))
	require.NoError(t, err)
	require.True(t, out.FoundByLookup)
	require.Equal(t, b.mock.Captures()[0].ID, out.Operation.ID)
	require.Equal(t, []string{"POST ch_1:authorize", "POST ch_1:capture", "GET ch_1"}, b.wire.all())
}

// TestCaptureAfterKeyForgottenIsFoundNotRefused: resent under a key the PSP
// forgot, a capture would be refused as a second capture (400), and the
// charge wrongly failed; the lookup a resumed attempt starts with finds
// the first capture instead.
func TestCaptureAfterKeyForgottenIsFoundNotRefused(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setupClient(t, mockpsp.Config{KeyTTL: time.Hour, Now: clock.now}, psp.ClientConfig{}, nil)
	auth := authorizedBy(t, b)
	require.NoError(t, b.mock.SetFaults(mockpsp.Faults{DropRate: 1, LookupErrorRate: 1}))
	out, err := b.client.OperateOutcome(t.Context(), captureRequest(auth))
	require.ErrorIs(t, err, psp.ErrUnavailable)
	require.Equal(t, psp.ClassUnknown, out.Class)

	clock.advance(2 * time.Hour)
	require.NoError(t, b.mock.SetFaults(mockpsp.Faults{}))
	req := captureRequest(auth)
	req.FirstSend = false
	out, err = b.client.OperateOutcome(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, psp.ClassSuccess, out.Class)
	require.True(t, out.FoundByLookup)
	require.Len(t, b.mock.Captures(), 1)

	// Without the lookup: the PSP no longer knows the key, and refuses.
	blind, err := b.client.OperateOnce(t.Context(), captureRequest(auth))
	require.ErrorIs(t, err, psp.ErrRejected)
	require.Contains(t, blind.Reason, "already_captured")
}

func TestOperationLookupIgnoresOtherAuthorizations(t *testing.T) {
	t.Parallel()
	b := setupClient(t, mockpsp.Config{}, psp.ClientConfig{}, func(_ int, w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte(`{"data":[{"id":"cap_9","status":"captured","authorization":"auth_9","reference":"ch_1"}]}`))
			return true
		}
		return false
	})
	auth := authorizedBy(t, b)
	req := captureRequest(auth)
	req.FirstSend = false
	out, err := b.client.OperateOutcome(t.Context(), req)
	require.NoError(t, err)
	require.False(t, out.FoundByLookup, "a capture of another authorization is not this one")
	require.Equal(t, b.mock.Captures()[0].ID, out.Operation.ID)
}
