package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/client"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const apiKey = "sk_test_chargectl"

// fakeAPI mimics the contract's charges API in memory: a finished key
// replays its stored answer with Idempotent-Replayed, the same key with
// another body is a 422, pm_card_chargeDeclined is declined, and while
// down every POST gets 503 with Retry-After.
type fakeAPI struct {
	srv  *httptest.Server
	down atomic.Bool

	mu     sync.Mutex
	stored map[string]storedAnswer // by idempotency key
	byID   map[string][]byte
	keys   []string // of every POST, in order
}

type storedAnswer struct {
	body   []byte // request
	status int
	answer []byte
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	f := &fakeAPI{stored: map[string]storedAnswer{}, byID: map[string][]byte{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+apiKey {
		problem(w, http.StatusUnauthorized, "unauthorized", "A valid API key is required.", nil)
		return
	}
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/charges/") {
		f.mu.Lock()
		body, ok := f.byID[strings.TrimPrefix(r.URL.Path, "/v1/charges/")]
		f.mu.Unlock()
		if !ok {
			problem(w, http.StatusNotFound, "not_found", "No such resource.", nil)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/charges" {
		problem(w, http.StatusNotFound, "not_found", "No such resource.", nil)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, key)
	if key == "" {
		problem(w, http.StatusBadRequest, "idempotency_key_missing", "The Idempotency-Key header is required.", nil)
		return
	}
	if s, ok := f.stored[key]; ok {
		if !bytes.Equal(s.body, body) {
			problem(w, http.StatusUnprocessableEntity, "idempotency_key_mismatch", "other request", nil)
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		writeAnswer(w, s.status, s.answer)
		return
	}
	// Per-intent states, chosen by payment method: pm_down is answered 503
	// psp_unavailable for ever, pm_unresolved 503 payment_unresolved.
	if f.down.Load() || bytes.Contains(body, []byte(`"pm_down"`)) {
		w.Header().Set("Retry-After", "0")
		problem(w, http.StatusServiceUnavailable, "psp_unavailable", "The payment service provider is unavailable.", nil)
		return
	}
	if bytes.Contains(body, []byte(`"pm_unresolved"`)) {
		problem(w, http.StatusServiceUnavailable, "payment_unresolved", "Waiting for an operator.", nil)
		return
	}
	var p client.ChargeParams
	if err := json.Unmarshal(body, &p); err != nil || p.Amount <= 0 {
		problem(w, http.StatusBadRequest, "invalid_request", "amount must be a positive integer",
			map[string]any{"errors": []client.FieldError{{Field: "amount", Message: "must be >= 1"}}})
		return
	}
	id := fmt.Sprintf("ch_%03d", len(f.stored)+1)
	s := storedAnswer{body: body}
	switch p.PaymentMethod {
	case "pm_card_chargeDeclined":
		s.status, s.answer = http.StatusPaymentRequired, problemBody(http.StatusPaymentRequired, "card_declined",
			"The payment service provider declined the card.", map[string]any{"charge": id})
	case "pm_refused":
		s.status, s.answer = http.StatusPaymentRequired, problemBody(http.StatusPaymentRequired, "payment_failed",
			"The payment service provider refused the request: invalid account.", map[string]any{"charge": id})
	default:
		md := p.Metadata
		if md == nil {
			md = map[string]string{}
		}
		b, _ := json.MarshalIndent(map[string]any{"id": id, "object": "charge", "amount": p.Amount, "currency": p.Currency,
			"payment_method": p.PaymentMethod, "status": "authorized", "psp_reference": "auth_" + id,
			"description": p.Description, "metadata": md, "created_at": "2025-01-31T12:00:00Z"}, "", "  ")
		s.status, s.answer = http.StatusCreated, append(b, '\n')
		f.byID[id] = s.answer
	}
	f.stored[key] = s
	writeAnswer(w, s.status, s.answer)
}

func writeAnswer(w http.ResponseWriter, status int, body []byte) {
	ct := "application/json"
	if status >= 400 {
		ct = "application/problem+json"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func problemBody(status int, code, detail string, extra map[string]any) []byte {
	p := map[string]any{"type": "/problems/" + code, "title": http.StatusText(status), "status": status, "detail": detail, "code": code}
	for k, v := range extra {
		p[k] = v
	}
	b, _ := json.Marshal(p)
	return append(b, '\n')
}

func problem(w http.ResponseWriter, status int, code, detail string, extra map[string]any) {
	writeAnswer(w, status, problemBody(status, code, detail, extra))
}

func (f *fakeAPI) postedKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

// runResult is one run of the program.
type runResult struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, env map[string]string, args ...string) runResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return runResult{code, stdout.String(), stderr.String()}
}

func journalFiles(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	return len(entries)
}

// TestEndToEnd runs the whole program, in-process, against a fake API.
func TestEndToEnd(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*fakeAPI, map[string]string) {
		api := newFakeAPI(t)
		return api, map[string]string{
			"PHASEPAY_API_URL": api.srv.URL,
			"PHASEPAY_API_KEY": apiKey,
			"PHASEPAY_JOURNAL": t.TempDir(),
		}
	}

	t.Run("ChargeThenGet", func(t *testing.T) {
		t.Parallel()
		api, env := setup(t)
		res := runCLI(t, env, "charge", "--amount", "1000", "--currency", "usd", "--payment-method", "pm_card_visa",
			"--description", "order 42", "--metadata", "order=42")
		require.Equal(t, 0, res.code, res.stderr)
		require.Empty(t, res.stderr)

		var ch client.Charge
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &ch))
		require.Equal(t, "ch_001", ch.ID)
		require.Equal(t, client.StatusAuthorized, ch.Status)
		require.Equal(t, map[string]string{"order": "42"}, ch.Metadata)
		require.Equal(t, "order 42", *ch.Description)
		api.mu.Lock()
		require.Equal(t, string(api.byID["ch_001"]), res.stdout, "the server's bytes, unchanged")
		api.mu.Unlock()
		require.Zero(t, journalFiles(t, env["PHASEPAY_JOURNAL"]), "a settled charge leaves the journal")

		got := runCLI(t, env, "get", "ch_001")
		require.Equal(t, 0, got.code, got.stderr)
		require.Equal(t, res.stdout, got.stdout)

		missing := runCLI(t, env, "get", "ch_999")
		require.Equal(t, 1, missing.code)
		require.Equal(t, "chargectl: not_found: No such resource.\n", missing.stderr)
	})

	t.Run("FinalErrorsExit1WithOneLine", func(t *testing.T) {
		t.Parallel()
		api, env := setup(t)
		declined := runCLI(t, env, "charge", "--amount", "1000", "--currency", "usd", "--payment-method", "pm_card_chargeDeclined")
		require.Equal(t, 1, declined.code)
		require.Empty(t, declined.stdout)
		require.Equal(t, "chargectl: card_declined: The payment service provider declined the card. (charge ch_001)\n", declined.stderr)

		invalid := runCLI(t, env, "charge", "--amount", "-1", "--currency", "usd", "--payment-method", "pm_card_visa")
		require.Equal(t, 1, invalid.code)
		require.Equal(t, "chargectl: invalid_request: amount must be a positive integer [amount: must be >= 1]\n", invalid.stderr)

		env["PHASEPAY_API_KEY"] = "sk_wrong"
		unauthorized := runCLI(t, env, "charge", "--amount", "1", "--currency", "usd", "--payment-method", "pm_card_visa")
		require.Equal(t, 1, unauthorized.code)
		require.Equal(t, "chargectl: unauthorized: A valid API key is required.\n", unauthorized.stderr)

		require.Len(t, api.postedKeys(), 2, "the 401 is answered before the key is read")
		require.Zero(t, journalFiles(t, env["PHASEPAY_JOURNAL"]), "final errors leave the journal too")
	})

	t.Run("UsageErrorsExit2", func(t *testing.T) {
		t.Parallel()
		_, env := setup(t)
		res := runCLI(t, env, "charge", "--amount", "1000")
		require.Equal(t, 2, res.code)
		require.Contains(t, res.stderr, "--currency is required")
		require.Equal(t, 2, runCLI(t, env, "bogus").code)

		help := runCLI(t, env, "--help")
		require.Equal(t, 0, help.code)
		require.Contains(t, help.stdout, "Usage:")
	})

	// UnknownOutcomeThenResume: the API is down past --max-elapsed, so
	// chargectl gives up and keeps the intent; `resume` later sends the
	// same key and settles it.
	t.Run("UnknownOutcomeThenResume", func(t *testing.T) {
		t.Parallel()
		api, env := setup(t)
		api.down.Store(true)
		res := runCLI(t, env, "charge", "--amount", "700", "--currency", "usd", "--payment-method", "pm_card_visa", "--max-elapsed", "300ms")
		require.Equal(t, 1, res.code)
		require.Empty(t, res.stdout)
		require.Contains(t, res.stderr, "gave up retrying")
		require.Contains(t, res.stderr, "psp_unavailable")
		require.Contains(t, res.stderr, "chargectl resume")
		require.Equal(t, 1, strings.Count(res.stderr, "\n"), "one line")
		require.Equal(t, 1, journalFiles(t, env["PHASEPAY_JOURNAL"]))
		keys := api.postedKeys()
		require.NotEmpty(t, keys)

		api.down.Store(false)
		resumed := runCLI(t, env, "resume")
		require.Equal(t, 0, resumed.code, resumed.stderr)
		require.Equal(t, keys[0]+"\tauthorized\tch_001\n", resumed.stdout, "one line per intent: key, outcome, charge")
		require.Equal(t, "chargectl: resumed 1 intents: 1 authorized\n", resumed.stderr)
		after := api.postedKeys()
		require.Len(t, after, len(keys)+1)
		require.Equal(t, keys[0], after[len(after)-1], "resume sends the original key")
		require.Zero(t, journalFiles(t, env["PHASEPAY_JOURNAL"]))

		again := runCLI(t, env, "resume")
		require.Equal(t, 0, again.code)
		require.Empty(t, again.stdout, "nothing left to resume")
	})

	// ResumePrintsEachOutcome: every intent gets its line, with the status
	// and code the server sent (a 503 stays a 503), and only the intents
	// without a final answer stay journaled.
	t.Run("ResumePrintsEachOutcome", func(t *testing.T) {
		t.Parallel()
		api, env := setup(t)
		api.down.Store(true)
		var keyOf []string // by payment method, in journal (creation) order
		for _, pm := range []string{"pm_card_visa", "pm_card_chargeDeclined", "pm_refused", "pm_unresolved", "pm_down"} {
			before := len(api.postedKeys())
			res := runCLI(t, env, "charge", "--amount", "500", "--currency", "usd", "--payment-method", pm, "--max-elapsed", "100ms")
			require.Equal(t, 1, res.code, "every charge is left without a final answer")
			// The first key this charge sent: a retry of the previous
			// charge still in flight when its command gave up may be
			// recorded after before.
			i := slices.IndexFunc(api.postedKeys()[before:], func(k string) bool { return !slices.Contains(keyOf, k) })
			require.GreaterOrEqual(t, i, 0, "the charge sent a key of its own")
			keyOf = append(keyOf, api.postedKeys()[before+i])
		}
		require.Equal(t, 5, journalFiles(t, env["PHASEPAY_JOURNAL"]))

		api.down.Store(false)
		res := runCLI(t, env, "resume", "--max-elapsed", "200ms")
		require.Equal(t, 1, res.code, "not every intent succeeded")
		lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
		require.Len(t, lines, 5, res.stdout)
		want := [][]string{
			{keyOf[0], "authorized", "ch_001"},
			{keyOf[1], "declined", "ch_002", "402 card_declined: The payment service provider declined the card."},
			{keyOf[2], "failed", "ch_003", "402 payment_failed: The payment service provider refused the request: invalid account."},
			{keyOf[3], "unresolved", "-", "503 payment_unresolved: Waiting for an operator. (kept: resume again once an operator resolved it)"},
			{keyOf[4], "unknown", "-", "gave up retrying, last answer 503 psp_unavailable: The payment service provider is unavailable. (kept for the next resume)"},
		}
		for i, line := range lines {
			require.Equal(t, want[i], strings.Split(line, "\t"))
		}
		require.Contains(t, res.stderr, "chargectl: resumed 5 intents: 1 authorized, 1 declined, 1 failed, 1 unresolved, 1 unknown\n")
		require.Contains(t, res.stderr, "chargectl: 4 of 5 pending intents did not succeed")
		require.Equal(t, 2, journalFiles(t, env["PHASEPAY_JOURNAL"]), "unresolved and unknown stay journaled")
	})

	// ResumeShowsProgress: while an intent is being retried, resume says
	// so on stderr every --progress, so a long run is never silent.
	t.Run("ResumeShowsProgress", func(t *testing.T) {
		t.Parallel()
		api, env := setup(t)
		api.down.Store(true)
		res := runCLI(t, env, "charge", "--amount", "1", "--currency", "usd", "--payment-method", "pm_down", "--max-elapsed", "50ms")
		require.Equal(t, 1, res.code)
		key := api.postedKeys()[0]

		res = runCLI(t, env, "resume", "--max-elapsed", "600ms", "--progress", "100ms")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "chargectl: resume: 0 of 1 intents done; intent "+key+": attempt ")
		require.Contains(t, res.stderr, ", last 503 psp_unavailable\n")
	})
}
