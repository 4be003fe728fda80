package mockpsp

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
)

const (
	visaBody     = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","reference":"ch_1"}`
	declinedBody = `{"amount":1000,"currency":"usd","payment_method":"pm_card_chargeDeclined","reference":"ch_2"}`
)

type mockBundle struct {
	mock *Mock
	srv  *httptest.Server
}

// setupMock serves a mock with a fixed random source, so fault rolls and ids
// are the same on every run.
func setupMock(t *testing.T, f Faults) *mockBundle {
	t.Helper()
	return setupMockConfig(t, Config{Faults: f})
}

func setupMockConfig(t *testing.T, cfg Config) *mockBundle {
	t.Helper()
	cfg.Source = rand.NewPCG(1, 2)
	mock, err := NewFromConfig(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	return &mockBundle{mock: mock, srv: srv}
}

// send makes one request on a fresh connection: with keep-alive, net/http
// may itself resend an idempotent request after a dropped connection, which
// would blur what a test counts.
func (b *mockBundle) send(t *testing.T, method, path, key, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return client.Do(req)
}

// call is send for requests that must get an answer; it returns the status
// and the decoded JSON body.
func (b *mockBundle) call(t *testing.T, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	resp, err := b.send(t, method, path, key, body)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if resp.Header.Get("Content-Type") == "application/json" {
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out
}

func (b *mockBundle) authorize(t *testing.T, key, body string) (int, map[string]any) {
	t.Helper()
	return b.call(t, http.MethodPost, "/v1/authorizations", key, body)
}

func TestMockAuthorizes(t *testing.T) {
	t.Parallel()

	t.Run("Authorized", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{})
		status, out := b.authorize(t, "k1", visaBody)
		require.Equal(t, http.StatusOK, status)
		require.Regexp(t, `^auth_[0-9a-f]+$`, out["id"])
		require.Equal(t, psp.StatusAuthorized, out["status"])
		require.Contains(t, out, "decline_code")
		require.Nil(t, out["decline_code"])
	})

	t.Run("Declined", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{})
		status, out := b.authorize(t, "k1", declinedBody)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, psp.StatusDeclined, out["status"])
		require.Equal(t, "card_declined", out["decline_code"])

		ledger := b.mock.Authorizations()
		require.Len(t, ledger, 1)
		require.Equal(t, psp.StatusDeclined, ledger[0].Status)
	})
}

func TestMockReplayReturnsFirstResult(t *testing.T) {
	t.Parallel()

	for _, body := range []string{visaBody, declinedBody} {
		t.Run(body, func(t *testing.T) {
			t.Parallel()
			b := setupMock(t, Faults{})
			_, first := b.authorize(t, "k1", body)
			// The same request reformatted, with its keys in another order.
			var fields map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &fields))
			again, err := json.MarshalIndent(fields, "", "  ")
			require.NoError(t, err)

			status, second := b.authorize(t, "k1", string(again))
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, first, second)

			ledger := b.mock.Authorizations()
			require.Len(t, ledger, 1)
			require.Equal(t, 2, ledger[0].Attempts)
		})
	}
}

func TestMockKeyReusedWithOtherBodyIs422(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})
	status, _ := b.authorize(t, "k1", visaBody)
	require.Equal(t, http.StatusOK, status)

	status, out := b.authorize(t, "k1", strings.Replace(visaBody, "1000", "2000", 1))
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "idempotency_key_mismatch", out["error"].(map[string]any)["code"])

	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 1)
	require.Equal(t, int64(1000), ledger[0].Amount)
	require.Equal(t, 2, ledger[0].Attempts)
}

func TestMockRejectsInvalidRequests(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name, key, body, code string
	}{
		{"MissingKey", "", visaBody, "idempotency_key_missing"},
		{"KeyTooLong", strings.Repeat("k", 256), visaBody, "invalid_request"},
		{"NotJSON", "k", `amount=1000`, "invalid_request"},
		{"Empty", "k", ``, "invalid_request"},
		{"TrailingData", "k", visaBody + `{}`, "invalid_request"},
		{"UnknownField", "k", `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","reference":"ch_1","x":1}`, "invalid_request"},
		{"ZeroAmount", "k", `{"amount":0,"currency":"usd","payment_method":"pm_card_visa","reference":"ch_1"}`, "invalid_request"},
		{"AmountAsString", "k", `{"amount":"1000","currency":"usd","payment_method":"pm_card_visa","reference":"ch_1"}`, "invalid_request"},
		{"UpperCaseCurrency", "k", `{"amount":1000,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`, "invalid_request"},
		{"PaymentMethodWithoutPrefix", "k", `{"amount":1000,"currency":"usd","payment_method":"card_visa","reference":"ch_1"}`, "invalid_request"},
		{"BarePaymentMethodPrefix", "k", `{"amount":1000,"currency":"usd","payment_method":"pm_","reference":"ch_1"}`, "invalid_request"},
		{"ReferenceNotACharge", "k", `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","reference":"order_1"}`, "invalid_request"},
		{"MissingReference", "k", `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`, "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupMock(t, Faults{})
			status, out := b.authorize(t, tt.key, tt.body)
			require.Equal(t, http.StatusBadRequest, status)
			require.Equal(t, tt.code, out["error"].(map[string]any)["code"])
			require.Empty(t, b.mock.Authorizations())
		})
	}
}

func TestMockWrongMethodIs405(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})
	status, _ := b.call(t, http.MethodDelete, "/v1/authorizations", "k", "")
	require.Equal(t, http.StatusMethodNotAllowed, status)
}

func TestConcurrentSameKeyAuthorizesOnce(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})

	const n = 50
	// require must not be called off the test goroutine, so the goroutines
	// only record what they saw.
	type result struct {
		status int
		auth   psp.Authorization
		err    error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := b.send(t, http.MethodPost, "/v1/authorizations", "k1", visaBody)
			if err != nil {
				results[i].err = err
				return
			}
			defer resp.Body.Close()
			results[i].status = resp.StatusCode
			results[i].err = json.NewDecoder(resp.Body).Decode(&results[i].auth)
		})
	}
	wg.Wait()

	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 1)
	require.Equal(t, n, ledger[0].Attempts)
	for _, r := range results {
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, ledger[0].ID, r.auth.ID)
	}
}

func TestMockErrorRate(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{ErrorRate: 1})

	status, out := b.authorize(t, "k1", visaBody)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "unavailable", out["error"].(map[string]any)["code"])
	require.Empty(t, b.mock.Authorizations())

	require.NoError(t, b.mock.SetFaults(Faults{}))
	status, _ = b.authorize(t, "k1", visaBody)
	require.Equal(t, http.StatusOK, status)
	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 1)
	require.Equal(t, 2, ledger[0].Attempts, "the 503 counts as an attempt")
}

func TestMockDropRate(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{DropRate: 1})

	resp, err := b.send(t, http.MethodPost, "/v1/authorizations", "k1", visaBody)
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "the connection must be dropped without an answer")

	ledger := b.mock.Authorizations()
	require.Len(t, ledger, 1, "the authorization was made before the drop")
	require.Equal(t, 1, ledger[0].Attempts)
}

func TestMockLatency(t *testing.T) {
	t.Parallel()
	const latency = 100 * time.Millisecond
	b := setupMock(t, Faults{LatencyMS: int(latency / time.Millisecond)})

	start := time.Now()
	status, _ := b.authorize(t, "k1", visaBody)
	require.Equal(t, http.StatusOK, status)
	require.GreaterOrEqual(t, time.Since(start), latency)

	// The admin endpoints are how a test turns latency off: never delayed.
	start = time.Now()
	status, _ = b.call(t, http.MethodGet, "/_admin/authorizations", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Less(t, time.Since(start), latency)
}

func TestMockAdminFaults(t *testing.T) {
	t.Parallel()

	t.Run("SetAndReset", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{})
		status, out := b.call(t, http.MethodPut, "/_admin/faults", "", `{"error_rate":0.5,"drop_rate":0.25,"reject_rate":0.125,"lookup_error_rate":0.75,"latency_ms":7}`)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, map[string]any{"error_rate": 0.5, "drop_rate": 0.25, "reject_rate": 0.125, "lookup_error_rate": 0.75, "latency_ms": 7.0}, out)
		require.Equal(t, Faults{ErrorRate: 0.5, DropRate: 0.25, RejectRate: 0.125, LookupErrorRate: 0.75, LatencyMS: 7}, b.mock.Faults())

		status, _ = b.call(t, http.MethodPut, "/_admin/faults", "", `{}`)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, Faults{}, b.mock.Faults())
	})

	t.Run("ResetLetsAuthorizationsThrough", func(t *testing.T) {
		t.Parallel()
		b := setupMock(t, Faults{ErrorRate: 1})
		status, _ := b.call(t, http.MethodPut, "/_admin/faults", "", `{}`)
		require.Equal(t, http.StatusOK, status)
		status, _ = b.authorize(t, "k1", visaBody)
		require.Equal(t, http.StatusOK, status)
	})

	for name, body := range map[string]string{
		"ErrorRateAboveOne":       `{"error_rate":1.5}`,
		"NegativeDropRate":        `{"drop_rate":-0.1}`,
		"RejectRateAboveOne":      `{"reject_rate":2}`,
		"NegativeLookupErrorRate": `{"lookup_error_rate":-1}`,
		"NegativeLatency":         `{"latency_ms":-1}`,
		"FractionalLatency":       `{"latency_ms":1.5}`,
		"UnknownField":            `{"error_rat":0.5}`,
		"NotJSON":                 `error_rate=1`,
		"Empty":                   ``,
		"RateAsString":            `{"error_rate":"1"}`,
		"TwoObjects":              `{}{}`,
		"ArrayInsteadOfObj":       `[]`,
	} {
		t.Run("Invalid"+name, func(t *testing.T) {
			t.Parallel()
			f := Faults{ErrorRate: 0.1}
			b := setupMock(t, f)
			status, out := b.call(t, http.MethodPut, "/_admin/faults", "", body)
			require.Equal(t, http.StatusBadRequest, status)
			require.Equal(t, "invalid_request", out["error"].(map[string]any)["code"])
			require.Equal(t, f, b.mock.Faults(), "a rejected update changes nothing")
		})
	}
}

func TestMockAdminListsAuthorizations(t *testing.T) {
	t.Parallel()
	b := setupMock(t, Faults{})

	resp, err := b.send(t, http.MethodGet, "/_admin/authorizations", "", "")
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.JSONEq(t, `{"data":[]}`, string(raw), "an empty ledger is an empty array, not null")

	_, first := b.authorize(t, "k1", visaBody)
	_, second := b.authorize(t, "k2", declinedBody)
	b.authorize(t, "k1", visaBody)

	status, out := b.call(t, http.MethodGet, "/_admin/authorizations", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"data": []any{
		map[string]any{
			"id": first["id"], "idempotency_key": "k1", "reference": "ch_1",
			"amount": 1000.0, "currency": "usd", "status": "authorized", "attempts": 2.0,
		},
		map[string]any{
			"id": second["id"], "idempotency_key": "k2", "reference": "ch_2",
			"amount": 1000.0, "currency": "usd", "status": "declined", "attempts": 1.0,
		},
	}}, out)
}

func TestNewMockValidatesFaults(t *testing.T) {
	t.Parallel()
	for _, f := range []Faults{{ErrorRate: -0.5}, {DropRate: 2}, {RejectRate: 1.5}, {LookupErrorRate: -0.1}, {LatencyMS: -1}} {
		_, err := New(f)
		require.Error(t, err)
	}
	m, err := New(Faults{ErrorRate: 1, DropRate: 1, LatencyMS: 1})
	require.NoError(t, err)
	require.Error(t, m.SetFaults(Faults{ErrorRate: 1.01}))
}

func TestInjectedFaultsAreCounted(t *testing.T) {
	t.Parallel()
	m, err := New(Faults{ErrorRate: 1})
	require.NoError(t, err)
	srv := httptest.NewServer(m)
	defer srv.Close()
	for i := range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/authorizations",
			strings.NewReader(`{"amount":1,"currency":"usd","payment_method":"pm_card_visa","reference":"ch_1"}`))
		req.Header.Set("Idempotency-Key", "k"+string(rune('a'+i)))
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	}
	resp, err := srv.Client().Get(srv.URL + "/_admin/faults")
	require.NoError(t, err)
	defer resp.Body.Close()
	var got struct {
		ErrorRate float64 `json:"error_rate"`
		Injected  Injected
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	require.InDelta(t, 1.0, got.ErrorRate, 0)
	require.Equal(t, Injected{Errors: 3}, got.Injected)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
