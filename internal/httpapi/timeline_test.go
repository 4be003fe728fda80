package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testsignal"
)

// timelineReply is GET /v1/idempotency_keys/{key}/timeline's body, each
// entry kept whole to check what it shows.
type timelineReply struct {
	Object  string                       `json:"object"`
	HasMore bool                         `json:"has_more"`
	Data    []map[string]json.RawMessage `json:"data"`
}

func (b *apiBundle) timeline(t *testing.T, key string) (reply, timelineReply) {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/idempotency_keys/"+url.PathEscape(key)+"/timeline", "", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var tl timelineReply
	require.NoError(t, json.Unmarshal(r.body, &tl))
	return r, tl
}

func str(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	require.NoError(t, json.Unmarshal(raw, &s))
	return s
}

// Pitfall: a timeline that shows tenants the internals. The stored
// timeline names processes (host, pid), the PSP's keys and each release's
// raw cause, which names the PSP's address and repeats its answer; the
// tenant's timeline shows the contract's kinds and fields only, the
// release's reason in stable words, and another tenant's key is not found.
// Every answer is checked against api/openapi.yaml on the way.
func TestTenantTimelineShowsNoInternals(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	charge := `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

	// The PSP is down: the attempt is released with its raw cause.
	require.NoError(t, b.mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	requireStatus(t, b.do(t, http.MethodPost, "/v1/charges", "order-1", charge), http.StatusServiceUnavailable, "psp_unavailable")
	var detail string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT e->>'detail' FROM idempotency_keys, jsonb_array_elements(timeline) e WHERE key = 'order-1' AND e->>'kind' = 'released'`).
		Scan(&detail))
	require.Contains(t, detail, "injected fault", "the stored cause repeats the PSP's raw answer (for operators)")

	// It comes back; the retry, once due, finishes the charge.
	require.NoError(t, b.mock.SetFaults(mockpsp.Faults{}))
	testsignal.WaitFor(t, 5*time.Second, func() bool { // RETRY_BASE 1s, ±25% jitter
		var due bool
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`SELECT next_attempt_at <= phasepay_now() FROM idempotency_keys WHERE key = 'order-1'`).Scan(&due))
		return due
	}, "the retry never came due")
	requireStatus(t, b.do(t, http.MethodPost, "/v1/charges", "order-1", charge), http.StatusCreated, "")

	r, tl := b.timeline(t, "order-1")
	require.Equal(t, "list", tl.Object)
	require.False(t, tl.HasMore)
	var got []string
	for _, e := range tl.Data {
		got = append(got, str(t, e["kind"]))
	}
	require.Equal(t, []string{"claimed", "reached", "psp_call", "released", "taken_over", "psp_call", "finished"}, got)
	released, retried, done := tl.Data[3], tl.Data[5], tl.Data[6]
	require.Equal(t, "PSP answered 503", str(t, released["reason"]))
	require.NotEqual(t, "null", string(released["next_attempt_at"]))
	require.Equal(t, "api", str(t, tl.Data[4]["by"]))
	require.Equal(t, "authorize", str(t, retried["operation"]))
	require.Equal(t, "success", str(t, retried["outcome"]))
	require.Equal(t, "default", str(t, retried["psp"]))
	require.Equal(t, "201", string(done["response_status"]))

	body := string(r.body)
	host, err := os.Hostname()
	require.NoError(t, err)
	for _, internal := range []string{"127.0.0.1", host, "holder", "detail", "lock_version", "psp_key", ":authorize",
		"sends", "lookups", "api:", "injected fault", "status 503"} {
		require.NotContains(t, body, internal)
	}

	// Another tenant's key, and an unknown one, are not found.
	other := b.asOther(t, http.MethodGet, "/v1/idempotency_keys/order-1/timeline", "", "")
	requireStatus(t, other, http.StatusNotFound, "not_found")
	requireStatus(t, b.do(t, http.MethodGet, "/v1/idempotency_keys/nope/timeline", "", ""), http.StatusNotFound, "not_found")

	// A key holding "/" is one percent-encoded segment. (Not through the
	// validator, whose router matches the decoded path.)
	requireStatus(t, b.do(t, http.MethodPost, "/v1/charges", "order/2", charge), http.StatusCreated, "")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url+"/v1/idempotency_keys/order%2F2/timeline", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+b.key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var slashed timelineReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&slashed))
	require.Len(t, slashed.Data, 4, "claimed, reached, psp_call, finished")
}

// An operator's acts and a move to another PSP reach the tenant's timeline
// as the contract's kinds, with by: operator and how it was resolved, never
// the operator's name, reason or process.
func TestTenantTimelineShowsOperatorActsWithoutNames(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/charges", "acts", `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`).status)
	_, err := b.pool.Exec(t.Context(), `UPDATE idempotency_keys SET timeline = timeline || $1::jsonb WHERE key = 'acts'`, `[
 {"at":"2026-12-04T21:06:50.000001Z","lock_version":2,"kind":"moved","holder":"api:vm:1:0badcafe","psp":"secondary"},
 {"at":"2026-12-04T21:06:51.000001Z","lock_version":2,"kind":"retried","holder":"operator:vm:2:0badcafe","by":"operator","operator":"alice"},
 {"at":"2026-12-04T21:06:52.000001Z","lock_version":3,"kind":"resolution_refused","holder":"operator:vm:2:0badcafe","by":"operator","operator":"alice","as":"succeeded","detail":"the PSP could not be asked: dial 10.1.2.3"},
 {"at":"2026-12-04T21:06:53.000001Z","lock_version":4,"kind":"resolved","holder":"operator:vm:2:0badcafe","by":"operator","operator":"alice","as":"failed","detail":"ticket 5521"}]`)
	require.NoError(t, err)
	r, tl := b.timeline(t, "acts")
	for _, secret := range []string{"alice", "5521", "10.1.2.3", "operator:vm", "detail", "holder"} {
		require.NotContains(t, string(r.body), secret)
	}
	n := len(tl.Data)
	require.GreaterOrEqual(t, n, 4)
	want := []map[string]string{
		{"kind": "moved", "psp": "secondary"},
		{"kind": "retried", "by": "operator"},
		{"kind": "resolution_refused", "by": "operator", "as": "succeeded"},
		{"kind": "resolved", "by": "operator", "as": "failed"},
	}
	for i, w := range want {
		e := tl.Data[n-4+i]
		require.Len(t, e, len(w)+1, "%v: at and the kind's members only", e)
		for k, v := range w {
			require.Equal(t, v, str(t, e[k]), "%s of %v", k, w)
		}
	}
}
