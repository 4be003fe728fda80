package mockpsp

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func (b *mockBundle) lookup(t *testing.T, reference string) (int, map[string]any) {
	t.Helper()
	return b.call(t, http.MethodGet, "/v1/authorizations?reference="+reference, "", "")
}

// TestMockForgetsKeyAfterTTL: real PSPs remember an idempotency key for
// about a day; after that the same key is a new request, and a resend
// under it authorizes again. The mock must do the same, or no test could
// show what a resend without a lookup costs.
func TestMockForgetsKeyAfterTTL(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setupMockConfig(t, Config{KeyTTL: time.Hour, Now: clock.now})

	_, first := b.authorize(t, "k1", visaBody)
	clock.advance(time.Hour - time.Second)
	status, replay := b.authorize(t, "k1", visaBody)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, first, replay, "remembered within the TTL")
	status, _ = b.authorize(t, "k1", strings.Replace(visaBody, "1000", "2000", 1))
	require.Equal(t, http.StatusUnprocessableEntity, status, "still remembered: another body is a mismatch")

	clock.advance(time.Second)
	status, second := b.authorize(t, "k1", visaBody)
	require.Equal(t, http.StatusOK, status)
	require.NotEqual(t, first["id"], second["id"], "forgotten: the same key is a new authorization")

	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 2)
	require.Equal(t, []string{"k1", "k1"}, []string{ledger[0].IdempotencyKey, ledger[1].IdempotencyKey})
	require.Equal(t, 4, ledger[1].Attempts, "attempts count every request with the key, ever")

	// The TTL runs from the key's first use, not its last: the second
	// authorization's key is forgotten an hour after it was made.
	clock.advance(time.Hour)
	_, third := b.authorize(t, "k1", strings.Replace(visaBody, "1000", "2000", 1))
	require.NotEqual(t, second["id"], third["id"])

	// Lookups are not subject to the TTL.
	status, out := b.lookup(t, "ch_1")
	require.Equal(t, http.StatusOK, status)
	data := out["data"].([]any)
	require.Len(t, data, 3)
	require.Equal(t, first["id"], data[0].(map[string]any)["id"])
}

func TestMockKeyTTLDefaultsToADay(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setupMockConfig(t, Config{Now: clock.now})
	_, first := b.authorize(t, "k1", visaBody)
	clock.advance(KeyTTLDefault - time.Minute)
	_, again := b.authorize(t, "k1", visaBody)
	require.Equal(t, first, again)
	clock.advance(time.Minute)
	_, later := b.authorize(t, "k1", visaBody)
	require.NotEqual(t, first["id"], later["id"])

	_, err := NewFromConfig(Config{KeyTTL: -time.Second})
	require.Error(t, err)
}

func TestMockLookupByReference(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})

	status, out := b.lookup(t, "ch_1")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"data": []any{}}, out, "none: an empty array, not null")

	_, auth := b.authorize(t, "k1", visaBody)
	b.authorize(t, "k2", declinedBody)
	b.authorize(t, "k1", visaBody) // a replay adds nothing

	status, out = b.lookup(t, "ch_1")
	require.Equal(t, http.StatusOK, status)
	data := out["data"].([]any)
	require.Len(t, data, 1)
	entry := data[0].(map[string]any)
	require.NotEmpty(t, entry["created_at"])
	delete(entry, "created_at")
	require.Equal(t, map[string]any{
		"id": auth["id"], "status": "authorized", "decline_code": nil, "reference": "ch_1",
		"amount": 1000.0, "currency": "usd",
	}, entry)

	_, out = b.lookup(t, "ch_2")
	require.Equal(t, "card_declined", out["data"].([]any)[0].(map[string]any)["decline_code"])

	status, out = b.call(t, http.MethodGet, "/v1/authorizations", "", "")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "invalid_request", out["error"].(map[string]any)["code"])
}

func TestMockLookupFaults(t *testing.T) {
	t.Parallel()

	t.Run("LookupErrorRateHitsLookupsOnly", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{LookupErrorRate: 1})
		status, _ := b.authorize(t, "k1", visaBody)
		require.Equal(t, http.StatusOK, status)
		status, out := b.lookup(t, "ch_1")
		require.Equal(t, http.StatusServiceUnavailable, status)
		require.Equal(t, "injected fault (lookup_error_rate)", out["error"].(map[string]any)["message"])
		require.Equal(t, Injected{LookupErrors: 1}, b.mock.Injected())
	})

	t.Run("ErrorRateHitsLookupsToo", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{ErrorRate: 1})
		status, _ := b.lookup(t, "ch_1")
		require.Equal(t, http.StatusServiceUnavailable, status)
		require.Equal(t, Injected{Errors: 1}, b.mock.Injected())
	})

	t.Run("DropAndRejectNeverHitLookups", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{DropRate: 1, RejectRate: 1})
		for range 5 {
			status, _ := b.lookup(t, "ch_1")
			require.Equal(t, http.StatusOK, status)
		}
		require.Equal(t, Injected{}, b.mock.Injected())
	})

	t.Run("LatencyDelaysLookups", func(t *testing.T) {
		t.Parallel()
		const latency = 100 * time.Millisecond
		b := setupMock(t, Faults{LatencyMS: int(latency / time.Millisecond)})
		start := time.Now()
		status, _ := b.lookup(t, "ch_1")
		require.Equal(t, http.StatusOK, status)
		require.GreaterOrEqual(t, time.Since(start), latency)
	})
}

func TestMockRejectRate(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})
	_, first := b.authorize(t, "k1", visaBody)
	require.NoError(t, b.mock.SetFaults(Faults{RejectRate: 1}))

	status, out := b.authorize(t, "k2", declinedBody)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "rejected", out["error"].(map[string]any)["code"])
	require.Len(t, b.mock.Authorizations(), 1, "rejected without acting")

	status, replay := b.authorize(t, "k1", visaBody)
	require.Equal(t, http.StatusOK, status, "a replay is answered with the first result, never rejected")
	require.Equal(t, first, replay)
	require.Equal(t, Injected{Rejects: 1}, b.mock.Injected())
}

func TestMockRequestLog(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})

	status, out := b.call(t, http.MethodGet, "/_admin/requests", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"data": []any{}}, out)

	b.authorize(t, "k1", visaBody)
	b.authorize(t, "k2", `{"amount":0}`)
	b.authorize(t, "", visaBody)
	require.NoError(t, b.mock.SetFaults(Faults{ErrorRate: 1}))
	b.authorize(t, "k3", declinedBody)
	require.NoError(t, b.mock.SetFaults(Faults{DropRate: 1}))
	resp, err := b.send(t, http.MethodPost, "/v1/authorizations", "k4", declinedBody)
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err)
	b.lookup(t, "ch_2")
	b.call(t, http.MethodGet, "/_admin/authorizations", "", "") // admin requests are not logged

	status, out = b.call(t, http.MethodGet, "/_admin/requests", "", "")
	require.Equal(t, http.StatusOK, status)
	type row struct {
		method, key, ref string
		status           float64
	}
	var got []row
	var last time.Time
	for _, d := range out["data"].([]any) {
		e := d.(map[string]any)
		require.Equal(t, "/v1/authorizations", e["path"])
		at, err := time.Parse(time.RFC3339Nano, e["at"].(string))
		require.NoError(t, err)
		require.False(t, at.Before(last), "in the order received")
		last = at
		got = append(got, row{e["method"].(string), e["idempotency_key"].(string), e["reference"].(string), e["status"].(float64)})
	}
	require.Equal(t, []row{
		{"POST", "k1", "ch_1", 200},
		{"POST", "k2", "", 400},
		{"POST", "", "", 400},
		{"POST", "k3", "ch_2", 503},
		{"POST", "k4", "ch_2", 0},
		{"GET", "", "ch_2", 200},
	}, got)
	require.Len(t, b.mock.Requests(), 6)
}

func TestMockNameInAdminFaults(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{"mockpsp": {}, "secondary": {Name: "secondary"}} {
		b := setupMockConfig(t, cfg)
		require.Equal(t, name, b.mock.Name())
		status, out := b.call(t, http.MethodGet, "/_admin/faults", "", "")
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, name, out["name"])
	}
}

// TestRefusedKeyIsRefusedWhenItsLateRequestArrives: a request under a key
// the mock refused (reject_rate) is refused again, even with no fault set,
// as a real PSP refuses the same request again: a late duplicate from a
// stalled worker never acts after phasepay recorded the refusal as final.
func TestRefusedKeyIsRefusedWhenItsLateRequestArrives(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{RejectRate: 1})
	status, _ := b.authorize(t, "k1", visaBody)
	require.Equal(t, http.StatusBadRequest, status)
	require.NoError(t, b.mock.SetFaults(Faults{}))

	status, out := b.authorize(t, "k1", visaBody)
	require.Equal(t, http.StatusBadRequest, status, "the late request under the refused key")
	require.Equal(t, "rejected", out["error"].(map[string]any)["code"])
	require.Empty(t, b.mock.Authorizations(), "nothing acted under a refused key")
	require.Equal(t, Injected{Rejects: 1}, b.mock.Injected())

	status, _ = b.authorize(t, "k2", visaBody)
	require.Equal(t, http.StatusOK, status, "another key acts")
}
