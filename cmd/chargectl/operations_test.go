package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// opsAPI answers capture, void, refund, get-refund and the lists from a
// per-test script: answer decides each POST's reply from its route and the
// number of times that route was posted to.
type opsAPI struct {
	srv    *httptest.Server
	answer func(route string, n int, body []byte) (status int, reply []byte)

	mu    sync.Mutex
	posts []post // in order
	count map[string]int
}

type post struct{ route, key, body string }

func newOpsAPI(t *testing.T, answer func(route string, n int, body []byte) (int, []byte)) *opsAPI {
	t.Helper()
	a := &opsAPI{answer: answer, count: map[string]int{}}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *opsAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+apiKey {
		problem(w, http.StatusUnauthorized, "unauthorized", "A valid API key is required.", nil)
		return
	}
	if r.Method == http.MethodGet {
		a.serveGet(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	route := r.Method + " " + r.URL.Path
	a.mu.Lock()
	a.posts = append(a.posts, post{route, r.Header.Get("Idempotency-Key"), string(body)})
	a.count[route]++
	n := a.count[route]
	a.mu.Unlock()
	status, reply := a.answer(route, n, body)
	if status == http.StatusConflict || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "0")
	}
	writeAnswer(w, status, reply)
}

// serveGet lists ch_5..ch_1 (or re_3..re_1 of ?charge=) newest first with
// keyset pagination, and reads re_1.
func (a *opsAPI) serveGet(w http.ResponseWriter, r *http.Request) {
	var ids []string
	switch r.URL.Path {
	case "/v1/refunds/re_1":
		writeAnswer(w, http.StatusOK, refundJSON("re_1", "ch_1", 300))
		return
	case "/v1/charges":
		ids = []string{"ch_5", "ch_4", "ch_3", "ch_2", "ch_1"}
	case "/v1/refunds":
		if r.URL.Query().Get("charge") != "ch_1" {
			problem(w, http.StatusNotFound, "not_found", "No such charge.", nil)
			return
		}
		ids = []string{"re_3", "re_2", "re_1"}
	default:
		problem(w, http.StatusNotFound, "not_found", "No such resource.", nil)
		return
	}
	q := r.URL.Query()
	limit := 10
	if v := q.Get("limit"); v != "" {
		limit, _ = strconv.Atoi(v)
	}
	start := 0
	for i, id := range ids {
		if id == q.Get("starting_after") {
			start = i + 1
		}
	}
	end := min(start+limit, len(ids))
	data := []json.RawMessage{}
	for _, id := range ids[start:end] {
		if strings.HasPrefix(id, "re_") {
			data = append(data, refundJSON(id, "ch_1", 100))
		} else {
			data = append(data, chargeJSON(id, "authorized", 0))
		}
	}
	b, _ := json.Marshal(map[string]any{"object": "list", "data": data, "has_more": end < len(ids), "url": r.URL.Path})
	writeAnswer(w, http.StatusOK, append(b, '\n'))
}

// postsTo returns the POSTs to route, or every POST for "".
func (a *opsAPI) postsTo(route string) []post {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []post
	for _, p := range a.posts {
		if route == "" || p.route == route {
			out = append(out, p)
		}
	}
	return out
}

func chargeJSON(id, status string, captured int64) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "object": "charge", "amount": 1000, "currency": "usd",
		"payment_method": "pm_card_visa", "status": status, "amount_captured": captured, "amount_refunded": 0,
		"psp": "mock", "psp_reference": "auth_" + id, "description": nil, "metadata": map[string]string{},
		"created_at": "2025-01-31T12:00:00Z"})
	return b
}

func refundJSON(id, charge string, amount int64) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "object": "refund", "charge": charge, "amount": amount,
		"status": "succeeded", "psp_reference": "rf_" + id, "created_at": "2025-01-31T12:00:01Z"})
	return b
}

func opsEnv(t *testing.T, a *opsAPI) map[string]string {
	return map[string]string{"PHASEPAY_API_URL": a.srv.URL, "PHASEPAY_API_KEY": apiKey, "PHASEPAY_JOURNAL": t.TempDir()}
}

func TestChargectlOperations(t *testing.T) {
	t.Parallel()

	// Each command prints the server's object, sends its wire shape and
	// leaves nothing journaled once answered; a refusal for the charge's
	// state is one line and exit 1.
	t.Run("AnsweredOperations", func(t *testing.T) {
		t.Parallel()
		api := newOpsAPI(t, func(route string, _ int, _ []byte) (int, []byte) {
			switch route {
			case "POST /v1/charges/ch_1/capture":
				return http.StatusOK, chargeJSON("ch_1", "captured", 500)
			case "POST /v1/refunds":
				return http.StatusCreated, refundJSON("re_1", "ch_1", 300)
			case "POST /v1/charges/ch_1/void":
				return http.StatusBadRequest, problemBody(http.StatusBadRequest, "charge_not_voidable",
					"Charge ch_1 is captured and cannot be voided.", map[string]any{"charge": "ch_1"})
			}
			return http.StatusNotFound, problemBody(http.StatusNotFound, "not_found", "No such resource.", nil)
		})
		env := opsEnv(t, api)

		res := runCLI(t, env, "capture", "ch_1", "--amount", "500")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, string(chargeJSON("ch_1", "captured", 500))+"\n", res.stdout)
		require.JSONEq(t, `{"amount":500}`, api.postsTo("POST /v1/charges/ch_1/capture")[0].body)

		res = runCLI(t, env, "refund", "--amount", "300", "ch_1")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, string(refundJSON("re_1", "ch_1", 300))+"\n", res.stdout)
		require.JSONEq(t, `{"charge":"ch_1","amount":300}`, api.postsTo("POST /v1/refunds")[0].body)

		res = runCLI(t, env, "void", "ch_1")
		require.Equal(t, 1, res.code)
		require.Empty(t, res.stdout)
		require.Equal(t, "chargectl: charge_not_voidable: Charge ch_1 is captured and cannot be voided. (charge ch_1)\n", res.stderr)
		require.JSONEq(t, `{}`, api.postsTo("POST /v1/charges/ch_1/void")[0].body)

		res = runCLI(t, env, "get-refund", "re_1")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, string(refundJSON("re_1", "ch_1", 300))+"\n", res.stdout)

		keys := map[string]bool{}
		for _, p := range api.postsTo("") {
			require.NotEmpty(t, p.key)
			keys[p.key] = true
		}
		require.Len(t, keys, 3, "one key per intent")
		require.Zero(t, journalFiles(t, env["PHASEPAY_JOURNAL"]), "answered intents leave the journal")
	})

	// UnknownThenResume: a capture that stays 409 charge_pending past
	// --max-elapsed and a refund answered payment_unresolved both stay
	// journaled; resume sends each one's own key and body again.
	t.Run("UnknownThenResume", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		settled := false
		api := newOpsAPI(t, func(route string, _ int, _ []byte) (int, []byte) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case route == "POST /v1/charges/ch_1/capture" && !settled:
				return http.StatusConflict, problemBody(http.StatusConflict, "charge_pending",
					"The charge's authorization has no outcome yet.", map[string]any{"charge": "ch_1"})
			case route == "POST /v1/charges/ch_1/capture":
				return http.StatusOK, chargeJSON("ch_1", "captured", 1000)
			default:
				return http.StatusServiceUnavailable, problemBody(http.StatusServiceUnavailable, "payment_unresolved",
					"Waiting for an operator.", nil)
			}
		})
		env := opsEnv(t, api)

		res := runCLI(t, env, "capture", "ch_1", "--max-elapsed", "200ms")
		require.Equal(t, 1, res.code)
		require.Empty(t, res.stdout)
		require.Contains(t, res.stderr, "gave up retrying")
		require.Contains(t, res.stderr, "charge_pending")
		require.Contains(t, res.stderr, "run `chargectl resume`")
		require.Equal(t, 1, strings.Count(res.stderr, "\n"), "one line")
		captures := api.postsTo("POST /v1/charges/ch_1/capture")
		require.Greater(t, len(captures), 1, "409 charge_pending is retried")
		for _, p := range captures {
			require.Equal(t, captures[0].key, p.key, "with the intent's one key")
		}

		res = runCLI(t, env, "refund", "ch_1")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "payment_unresolved")
		require.Contains(t, res.stderr, "chargectl resume` once it is resolved")
		refunds := api.postsTo("POST /v1/refunds")
		require.Len(t, refunds, 1, "payment_unresolved is not retried")
		require.JSONEq(t, `{"charge":"ch_1"}`, refunds[0].body, "all that is left, by default")
		require.Equal(t, 2, journalFiles(t, env["PHASEPAY_JOURNAL"]))

		mu.Lock()
		settled = true
		mu.Unlock()
		res = runCLI(t, env, "resume")
		require.Equal(t, 1, res.code, "the refund is still unresolved")
		lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
		require.Equal(t, []string{
			captures[0].key + "\tcaptured\tch_1",
			refunds[0].key + "\tunresolved\tch_1\trefund: 503 payment_unresolved: Waiting for an operator. (kept: resume again once an operator resolved it)",
		}, lines)
		require.Contains(t, res.stderr, "chargectl: resumed 2 intents: 1 captured, 1 unresolved\n")
		after := api.postsTo("POST /v1/refunds")
		require.Len(t, after, 2)
		require.Equal(t, refunds[0], after[1], "resume sends the same key and body")
		require.Equal(t, 1, journalFiles(t, env["PHASEPAY_JOURNAL"]), "only the unresolved refund stays")
	})

	t.Run("Lists", func(t *testing.T) {
		t.Parallel()
		api := newOpsAPI(t, nil)
		env := opsEnv(t, api)

		res := runCLI(t, env, "list-charges", "--limit", "2")
		require.Equal(t, 0, res.code, res.stderr)
		var page struct {
			Object  string            `json:"object"`
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &page))
		require.Len(t, page.Data, 2)
		require.True(t, page.HasMore)
		require.Equal(t, "chargectl: more charges: --starting-after ch_4\n", res.stderr)

		res = runCLI(t, env, "list-charges", "--limit", "2", "--starting-after", "ch_2")
		require.Equal(t, 0, res.code, res.stderr)
		require.Empty(t, res.stderr, "the last page")
		require.Contains(t, res.stdout, `"id":"ch_1"`)

		res = runCLI(t, env, "list-charges", "--limit", "2", "--all")
		require.Equal(t, 0, res.code, res.stderr)
		var ids []string
		for _, line := range strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n") {
			var obj struct{ ID string }
			require.NoError(t, json.Unmarshal([]byte(line), &obj))
			ids = append(ids, obj.ID)
		}
		require.Equal(t, []string{"ch_5", "ch_4", "ch_3", "ch_2", "ch_1"}, ids, "every page, one object per line")
		require.Equal(t, "chargectl: listed 5 charges\n", res.stderr)

		res = runCLI(t, env, "list-refunds", "ch_1", "--all", "--limit", "1")
		require.Equal(t, 0, res.code, res.stderr)
		require.Equal(t, 3, strings.Count(res.stdout, "\n"))
		require.Equal(t, "chargectl: listed 3 refunds of ch_1\n", res.stderr)

		res = runCLI(t, env, "list-refunds", "ch_9")
		require.Equal(t, 1, res.code)
		require.Equal(t, "chargectl: not_found: No such charge.\n", res.stderr)
	})

	t.Run("UsageErrors", func(t *testing.T) {
		t.Parallel()
		env := opsEnv(t, newOpsAPI(t, nil))
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"capture"}, "capture: want exactly one charge id"},
			{[]string{"capture", "ch_1", "--amount", "x"}, `"x" is not an integer`},
			{[]string{"void", "ch_1", "ch_2"}, "void: want exactly one charge id"},
			{[]string{"refund"}, "refund: want exactly one charge id"},
			{[]string{"get-refund"}, "get-refund: want exactly one refund id"},
			{[]string{"list-charges", "--limit", "101"}, "--limit must be 1..100"},
			{[]string{"list-charges", "ch_1"}, `unexpected argument "ch_1"`},
			{[]string{"list-refunds"}, "list-refunds: want exactly one charge id"},
		} {
			res := runCLI(t, env, tc.args...)
			require.Equal(t, 2, res.code, fmt.Sprint(tc.args))
			require.Contains(t, res.stderr, tc.want, "%v", tc.args)
		}
	})
}
