package mockpsp

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
)

// authorized makes an authorization of 1000 usd for ch_1 and returns its id.
func (b *mockBundle) authorized(t *testing.T) string {
	t.Helper()
	status, out := b.authorize(t, "ch_1:authorize", visaBody)
	require.Equal(t, http.StatusOK, status)
	return out["id"].(string)
}

func (b *mockBundle) operate(t *testing.T, kind, key, body string) (int, map[string]any) {
	t.Helper()
	return b.call(t, http.MethodPost, "/v1/"+kind, key, body)
}

func opBody(auth string, amount int64, ref string) string {
	if amount == 0 {
		return fmt.Sprintf(`{"authorization":%q,"reference":%q}`, auth, ref)
	}
	return fmt.Sprintf(`{"authorization":%q,"amount":%d,"reference":%q}`, auth, amount, ref)
}

func errorCode(out map[string]any) any { return out["error"].(map[string]any)["code"] }

func TestMockCapture(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})
	auth := b.authorized(t)

	status, out := b.operate(t, "captures", "ch_1:capture", opBody(auth, 600, "ch_1"))
	require.Equal(t, http.StatusOK, status)
	require.Regexp(t, `^cap_[0-9a-f]+$`, out["id"])
	require.Equal(t, map[string]any{
		"id": out["id"], "status": "captured", "authorization": auth, "amount": 600.0, "currency": "usd", "reference": "ch_1",
	}, out)

	status, replay := b.operate(t, "captures", "ch_1:capture", opBody(auth, 600, "ch_1"))
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, out, replay, "the same key replays the first result")

	status, mismatch := b.operate(t, "captures", "ch_1:capture", opBody(auth, 700, "ch_1"))
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "idempotency_key_mismatch", errorCode(mismatch))

	status, second := b.operate(t, "captures", "other", opBody(auth, 100, "ch_1"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "already_captured", errorCode(second))
	status, void := b.operate(t, "voids", "ch_1:void", opBody(auth, 0, "ch_1"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "already_captured", errorCode(void))

	require.Equal(t, []OperationEntry{{
		ID: out["id"].(string), IdempotencyKey: "ch_1:capture", Reference: "ch_1", Amount: 600, Currency: "usd",
		Status: psp.StatusCaptured, Attempts: 3, Authorization: auth,
	}}, b.mock.Captures())
	require.Empty(t, b.mock.Voids())

	status, list := b.call(t, http.MethodGet, "/_admin/captures", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, list["data"], 1)
	require.Equal(t, auth, list["data"].([]any)[0].(map[string]any)["authorization"])
}

func TestMockOperationInvariants(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		setup  func(t *testing.T, b *mockBundle, auth string)
		kind   string
		body   func(auth string) string
		status int
		code   string
	}{
		{name: "CaptureMoreThanAuthorized", kind: "captures", body: func(a string) string { return opBody(a, 1001, "ch_1") }, status: 400, code: "amount_too_large"},
		{name: "CaptureUnknownAuthorization", kind: "captures", body: func(string) string { return opBody("auth_nope", 1, "ch_1") }, status: 404, code: "authorization_not_found"},
		{name: "CaptureOtherCharge", kind: "captures", body: func(a string) string { return opBody(a, 1, "ch_2") }, status: 400, code: "reference_mismatch"},
		{
			name: "CaptureAfterVoid", kind: "captures", status: 400, code: "already_voided",
			setup: func(t *testing.T, b *mockBundle, a string) {
				status, _ := b.operate(t, "voids", "v", opBody(a, 0, "ch_1"))
				require.Equal(t, http.StatusOK, status)
			},
			body: func(a string) string { return opBody(a, 1, "ch_1") },
		},
		{
			name: "VoidTwice", kind: "voids", status: 400, code: "already_voided",
			setup: func(t *testing.T, b *mockBundle, a string) {
				status, _ := b.operate(t, "voids", "v", opBody(a, 0, "ch_1"))
				require.Equal(t, http.StatusOK, status)
			},
			body: func(a string) string { return opBody(a, 0, "ch_1") },
		},
		{name: "VoidWithAmount", kind: "voids", body: func(a string) string { return opBody(a, 5, "ch_1") }, status: 400, code: "invalid_request"},
		{name: "CaptureWithoutAmount", kind: "captures", body: func(a string) string { return opBody(a, 0, "ch_1") }, status: 400, code: "invalid_request"},
		{name: "CaptureNegativeAmount", kind: "captures", body: func(a string) string { return opBody(a, -5, "ch_1") }, status: 400, code: "invalid_request"},
		{name: "RefundReferenceNotARefund", kind: "refunds", body: func(a string) string { return opBody(a, 1, "ch_1") }, status: 400, code: "invalid_request"},
		{name: "RefundBeforeCapture", kind: "refunds", body: func(a string) string { return opBody(a, 1, "re_1") }, status: 400, code: "not_captured"},
		{
			name: "RefundMoreThanCaptured", kind: "refunds", status: 400, code: "amount_too_large",
			setup: func(t *testing.T, b *mockBundle, a string) {
				status, _ := b.operate(t, "captures", "c", opBody(a, 600, "ch_1"))
				require.Equal(t, http.StatusOK, status)
				status, _ = b.operate(t, "refunds", "r1", opBody(a, 400, "re_1"))
				require.Equal(t, http.StatusOK, status)
			},
			body: func(a string) string { return opBody(a, 201, "re_2") },
		},
		{name: "NotAnAuthorizationID", kind: "refunds", body: func(string) string { return opBody("ch_1", 1, "re_1") }, status: 400, code: "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupMock(t, Faults{})
			auth := b.authorized(t)
			body := tt.body(auth)
			if tt.setup != nil {
				tt.setup(t, b, auth)
			}
			before := len(b.mock.Captures()) + len(b.mock.Voids()) + len(b.mock.Refunds())
			status, out := b.operate(t, tt.kind, "k", body)
			require.Equal(t, tt.status, status)
			require.Equal(t, tt.code, errorCode(out))
			require.Equal(t, before, len(b.mock.Captures())+len(b.mock.Voids())+len(b.mock.Refunds()), "a refusal does nothing")
		})
	}
}

func TestMockVoidAndRefund(t *testing.T) {
	t.Parallel()

	t.Run("NothingOnADecline", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{})
		_, declined := b.authorize(t, "k2", declinedBody)
		for _, kind := range []string{"captures", "voids"} {
			amount := int64(1)
			if kind == "voids" {
				amount = 0
			}
			status, out := b.operate(t, kind, "k", opBody(declined["id"].(string), amount, "ch_2"))
			require.Equal(t, http.StatusBadRequest, status)
			require.Equal(t, "authorization_declined", errorCode(out))
		}
	})

	t.Run("Void", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{})
		auth := b.authorized(t)
		status, out := b.operate(t, "voids", "ch_1:void", opBody(auth, 0, "ch_1"))
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, psp.StatusVoided, out["status"])
		require.InDelta(t, 1000.0, out["amount"], 0, "a void releases the authorized amount")
		require.Len(t, b.mock.Voids(), 1)
	})

	t.Run("RefundsUpToCaptured", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{})
		auth := b.authorized(t)
		status, _ := b.operate(t, "captures", "ch_1:capture", opBody(auth, 600, "ch_1"))
		require.Equal(t, http.StatusOK, status)
		status, first := b.operate(t, "refunds", "re_1:refund", opBody(auth, 400, "re_1"))
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, psp.StatusRefunded, first["status"])
		require.Regexp(t, `^ref_[0-9a-f]+$`, first["id"])
		status, _ = b.operate(t, "refunds", "re_2:refund", opBody(auth, 200, "re_2"))
		require.Equal(t, http.StatusOK, status)
		status, out := b.operate(t, "refunds", "re_3:refund", opBody(auth, 1, "re_3"))
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, "amount_too_large", errorCode(out))

		status, replay := b.operate(t, "refunds", "re_1:refund", opBody(auth, 400, "re_1"))
		require.Equal(t, http.StatusOK, status, "a replay is not a new refund, so no invariant is broken")
		require.Equal(t, first, replay)
		require.Len(t, b.mock.Refunds(), 2)
	})
}

func TestMockOperationLookupAndFaults(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})
	auth := b.authorized(t)

	require.NoError(t, b.mock.SetFaults(Faults{DropRate: 1}))
	resp, err := b.send(t, http.MethodPost, "/v1/captures", "ch_1:capture", opBody(auth, 1000, "ch_1"))
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "captured, then the answer was dropped")
	require.NoError(t, b.mock.SetFaults(Faults{RejectRate: 1, DropRate: 1}))
	status, _ := b.lookup(t, "ch_1")
	require.Equal(t, http.StatusOK, status)
	status, out := b.call(t, http.MethodGet, "/v1/captures?reference=ch_1", "", "")
	require.Equal(t, http.StatusOK, status, "drop and reject never hit lookups")
	data := out["data"].([]any)
	require.Len(t, data, 1)
	require.Equal(t, "captured", data[0].(map[string]any)["status"])
	require.NotEmpty(t, data[0].(map[string]any)["created_at"])

	status, out = b.operate(t, "refunds", "re_1:refund", opBody(auth, 1, "re_1"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "rejected", errorCode(out))
	require.Empty(t, b.mock.Refunds())

	require.NoError(t, b.mock.SetFaults(Faults{LookupErrorRate: 1}))
	status, _ = b.call(t, http.MethodGet, "/v1/refunds?reference=re_1", "", "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.NoError(t, b.mock.SetFaults(Faults{ErrorRate: 1}))
	status, _ = b.operate(t, "voids", "ch_1:void", opBody(auth, 0, "ch_1"))
	require.Equal(t, http.StatusServiceUnavailable, status)

	var kinds []string
	for _, r := range b.mock.Requests() {
		kinds = append(kinds, r.Method+" "+r.Path)
	}
	require.Contains(t, kinds, "POST /v1/captures")
	require.Contains(t, kinds, "GET /v1/refunds")
}

// TestMockForgetsCaptureKeyAfterTTL: a capture resent under a forgotten
// key is a new capture, which the PSP's invariant refuses: only a lookup
// tells the client its first capture happened.
func TestMockForgetsCaptureKeyAfterTTL(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setupMockConfig(t, Config{KeyTTL: time.Hour, Now: clock.now})
	auth := b.authorized(t)
	status, _ := b.operate(t, "captures", "ch_1:capture", opBody(auth, 1000, "ch_1"))
	require.Equal(t, http.StatusOK, status)
	clock.advance(time.Hour)
	status, out := b.operate(t, "captures", "ch_1:capture", opBody(auth, 1000, "ch_1"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "already_captured", errorCode(out))
	status, out = b.call(t, http.MethodGet, "/v1/captures?reference=ch_1", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, out["data"], 1)
}

// TestMockConcurrentCapturesCaptureOnce: captures with different keys race
// for one authorization; the PSP lets exactly one through.
func TestMockConcurrentCapturesCaptureOnce(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})
	auth := b.authorized(t)

	const n = 20
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			kind, body := "captures", opBody(auth, 500, "ch_1")
			if i%2 == 1 {
				kind, body = "voids", opBody(auth, 0, "ch_1")
			}
			resp, err := b.send(t, http.MethodPost, "/v1/"+kind, fmt.Sprintf("k%d", i), body)
			if err != nil {
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	var ok int
	for _, s := range statuses {
		if s == http.StatusOK {
			ok++
		} else {
			require.Equal(t, http.StatusBadRequest, s)
		}
	}
	require.Equal(t, 1, ok)
	require.Equal(t, 1, len(b.mock.Captures())+len(b.mock.Voids()))
}
