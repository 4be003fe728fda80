package main

// One test per row of the outcome table of docs/api.md ("Idempotent requests"),
// then the other endpoints, all through real HTTP against Main running
// in-process, every exchange checked against api/openapi.yaml.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Request bodies. visaBody is authorized by the mock PSP, declinedBody
// declined.
const (
	visaBody     = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","description":"order 42","metadata":{"order":"42"}}`
	declinedBody = `{"amount":1000,"currency":"usd","payment_method":"pm_card_chargeDeclined"}`
)

func TestNewKeyAuthorized(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// The fixture itself is held to the published request schema.
	req, err := http.NewRequest(http.MethodPost, b.url+"/v1/charges", nil)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "new-1")
	require.NoError(t, b.validator.CheckRequest(req, []byte(visaBody)))

	before := time.Now()
	r := b.post(t, "new-1", visaBody)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Empty(t, r.header.Values("Idempotent-Replayed"), "a first execution is not a replay")

	c := decodeCharge(t, r.body)
	require.True(t, strings.HasPrefix(c.ID, "ch_"), "id %q", c.ID)
	require.Equal(t, "charge", c.Object)
	require.Equal(t, int64(1000), c.Amount)
	require.Equal(t, "usd", c.Currency)
	require.Equal(t, "pm_card_visa", c.PaymentMethod)
	require.Equal(t, "authorized", c.Status)
	require.NotNil(t, c.PSPReference)
	require.True(t, strings.HasPrefix(*c.PSPReference, "auth_"), "psp_reference %q", *c.PSPReference)
	require.NotNil(t, c.Description)
	require.Equal(t, "order 42", *c.Description)
	require.Equal(t, map[string]string{"order": "42"}, c.Metadata)
	created, err := time.Parse(time.RFC3339, c.CreatedAt)
	require.NoError(t, err, "created_at %q is not RFC 3339", c.CreatedAt)
	require.WithinDuration(t, before, created, time.Minute)

	ledger := b.psp.Authorizations()
	require.Len(t, ledger, 1, "exactly one authorization at the PSP")
	require.Equal(t, c.ID+":authorize", ledger[0].IdempotencyKey)
	require.Equal(t, c.ID, ledger[0].Reference)
	require.Equal(t, *c.PSPReference, ledger[0].ID)
	require.Equal(t, int64(1000), ledger[0].Amount)
	require.Equal(t, "usd", ledger[0].Currency)
	require.Equal(t, psp.StatusAuthorized, ledger[0].Status)

	require.Equal(t, keyState{State: "done", RecoveryPoint: "done"}, b.keyState(t, "new-1"))
	var status, pspRef string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT status, psp_reference FROM charges WHERE tenant_id = $1 AND id = $2`, b.tenant.ID, c.ID).Scan(&status, &pspRef))
	require.Equal(t, "authorized", status)
	require.Equal(t, *c.PSPReference, pspRef)
}

func TestNewKeyDeclined(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first := b.post(t, "declined-1", declinedBody)
	p := requireProblem(t, first, http.StatusPaymentRequired, "card_declined")
	require.True(t, strings.HasPrefix(p.Charge, "ch_"), "charge %q", p.Charge)
	require.Empty(t, first.header.Values("Idempotent-Replayed"))

	status, _, body := b.do(t, http.MethodGet, "/v1/charges/"+p.Charge, nil, nil)
	require.Equal(t, http.StatusOK, status, "body: %s", body)
	c := decodeCharge(t, body)
	require.Equal(t, p.Charge, c.ID)
	require.Equal(t, "declined", c.Status)
	require.NotNil(t, c.PSPReference, "a declined authorization has an id too")

	ledger := b.psp.Authorizations()
	require.Len(t, ledger, 1)
	require.Equal(t, p.Charge+":authorize", ledger[0].IdempotencyKey)
	require.Equal(t, psp.StatusDeclined, ledger[0].Status)

	// The decline is a final answer, stored and replayed like a success.
	replay := b.post(t, "declined-1", declinedBody)
	require.Equal(t, first.status, replay.status)
	require.Equal(t, string(first.body), string(replay.body), "replay must be byte for byte")
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.Equal(t, "application/problem+json", replay.header.Get("Content-Type"))
	require.Len(t, b.psp.Authorizations(), 1, "a replay must not call the PSP")
}

func TestSameRequestFinishedReplaysByteForByte(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Each case sends first, then again with the same key and a request
	// that has the same fingerprint.
	reordered := `{"metadata":{"order":"42"},"description":"order 42","payment_method":"pm_card_visa","currency":"usd","amount":1000}`
	reindented := "{\n  \"amount\": 1000,\n  \"currency\": \"usd\",\n  \"payment_method\": \"pm_card_visa\",\n" +
		"  \"description\": \"order 42\",\n  \"metadata\": {\n    \"order\": \"42\"\n  }\n}\n"
	escaped := `{"amount":1000,"currency":"\u0075sd","payment_method":"pm_card_visa","description":"order 42","metadata":{"order":"42"}}`
	tests := []struct {
		name              string
		firstKey, nextKey string
		nextBody          string
		nextHeaders       map[string]string
		// stored is the key as the database holds it.
		stored string
	}{
		{name: "identical", firstKey: "same-1", nextKey: "same-1", nextBody: visaBody, stored: "same-1"},
		{name: "reordered keys", firstKey: "same-2", nextKey: "same-2", nextBody: reordered, stored: "same-2"},
		{name: "re-indented", firstKey: "same-3", nextKey: "same-3", nextBody: reindented, stored: "same-3"},
		{name: "escaped strings", firstKey: "same-4", nextKey: "same-4", nextBody: escaped, stored: "same-4"},
		{name: "other headers", firstKey: "same-5", nextKey: "same-5", nextBody: visaBody, stored: "same-5",
			nextHeaders: map[string]string{"Content-Type": "application/json; charset=utf-8", "X-Request-Id": "other", "User-Agent": "other/1.0"}},
		{name: "structured-field key after raw key", firstKey: "abc", nextKey: `"abc"`, nextBody: visaBody, stored: "abc"},
		{name: "raw key after structured-field key", firstKey: `"xyz"`, nextKey: "xyz", nextBody: reordered, stored: "xyz"},
		{name: "structured-field escapes", firstKey: `a"b\c`, nextKey: `"a\"b\\c"`, nextBody: visaBody, stored: `a"b\c`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			first := b.post(t, tt.firstKey, visaBody)
			require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)
			require.Empty(t, first.header.Values("Idempotent-Replayed"))

			headers := map[string]string{"Idempotency-Key": tt.nextKey}
			for k, v := range tt.nextHeaders {
				headers[k] = v
			}
			status, h, body := b.do(t, http.MethodPost, "/v1/charges", headers, []byte(tt.nextBody))
			require.Equal(t, first.status, status, "body: %s", body)
			require.Equal(t, string(first.body), string(body), "the stored body, byte for byte")
			require.Equal(t, first.header.Get("Content-Type"), h.Get("Content-Type"))
			require.Equal(t, "true", h.Get("Idempotent-Replayed"))

			c := decodeCharge(t, first.body)
			require.Len(t, b.ledgerFor(c.ID), 1)
			require.Equal(t, 1, b.keyRows(t, tt.stored), "one key, stored unquoted")
			require.Equal(t, 1, b.chargeRows(t, tt.stored))
		})
	}
}

func TestSameKeyWhileRunningIs409(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const latency = 1500 * time.Millisecond
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{LatencyMS: int(latency.Milliseconds())}))

	first := b.postAsync(t, "busy-1", visaBody)
	b.waitAuthorizing(t, 1)

	start := time.Now()
	dup := b.post(t, "busy-1", visaBody)
	elapsed := time.Since(start)
	requireProblem(t, dup, http.StatusConflict, "idempotency_key_in_use")
	requireRetryAfter(t, dup)
	require.Empty(t, dup.header.Values("Idempotent-Replayed"))
	require.Less(t, elapsed, latency/2, "the duplicate must be answered at once, not wait for the first")
	select {
	case <-first:
		require.FailNow(t, "the first request finished before its duplicate was answered: the 409 proves nothing")
	default:
	}

	r := await(t, first)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	require.Len(t, b.psp.Authorizations(), 1)

	// Nothing was stored for the 409: the retry replays the first's answer.
	again := b.post(t, "busy-1", visaBody)
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, string(r.body), string(again.body))
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
}

func TestSameKeyDifferentRequestIs422(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := strings.Replace(visaBody, `"amount":1000`, `"amount":1001`, 1)

	t.Run("finished", func(t *testing.T) {
		first := b.post(t, "diff-1", visaBody)
		require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)
		requireProblem(t, b.post(t, "diff-1", other), http.StatusUnprocessableEntity, "idempotency_key_mismatch")
	})

	t.Run("running", func(t *testing.T) {
		require.NoError(t, b.psp.SetFaults(mockpsp.Faults{LatencyMS: 1500}))
		defer func() { require.NoError(t, b.psp.SetFaults(mockpsp.Faults{})) }()
		before := len(b.psp.Authorizations())
		first := b.postAsync(t, "diff-2", visaBody)
		b.waitAuthorizing(t, before+1)

		// A different request learns nothing about the first, not even that
		// it still runs: 422, not 409.
		mismatch := b.post(t, "diff-2", other)
		requireProblem(t, mismatch, http.StatusUnprocessableEntity, "idempotency_key_mismatch")
		select {
		case <-first:
			require.FailNow(t, "the first request finished before the mismatch was answered")
		default:
		}
		r := await(t, first)
		require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	})

	require.Equal(t, 1, b.chargeRows(t, "diff-1"))
	require.Equal(t, 1, b.chargeRows(t, "diff-2"))
	require.Len(t, b.psp.Authorizations(), 2, "a mismatch never reaches the PSP")
}

func TestIdempotencyKeyMissingOrMalformedIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)

	tests := []struct {
		name string
		key  string
		code string
	}{
		{"missing", "", "idempotency_key_missing"},
		{"empty quoted", `""`, "idempotency_key_invalid"},
		{"256 characters", strings.Repeat("k", 256), "idempotency_key_invalid"},
		{"256 characters quoted", `"` + strings.Repeat("k", 256) + `"`, "idempotency_key_invalid"},
		{"non-ASCII", "clé-1", "idempotency_key_invalid"},
		{"non-ASCII quoted", `"clé-1"`, "idempotency_key_invalid"},
		{"space", "a b", "idempotency_key_invalid"},
		{"space quoted", `"a b"`, "idempotency_key_invalid"},
		{"tab", "a\tb", "idempotency_key_invalid"},
		{"bad escape quoted", `"a\b"`, "idempotency_key_invalid"},
		{"unescaped quote inside quotes", `"a"b"`, "idempotency_key_invalid"},
	}
	// The group returns once its parallel subtests have all finished.
	t.Run("group", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				requireProblem(t, b.post(t, tt.key, visaBody), http.StatusBadRequest, tt.code)
			})
		}
	})

	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_keys`).Scan(&n))
	require.Zero(t, n, "a missing or malformed key stores nothing")
	require.Empty(t, b.psp.Authorizations())

	// The boundaries: the longest valid key, raw and quoted (same key).
	long := strings.Repeat("k", 255)
	r := b.post(t, long, visaBody)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	replay := b.post(t, `"`+long+`"`, visaBody)
	require.Equal(t, string(r.body), string(replay.body))
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
}

func TestValidationFailureStoresNoKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "fix-me"

	bodies := []struct{ name, body string }{
		{"bad JSON", `{"amount":1000,"currency":"usd",`},
		{"empty body", ``},
		{"not an object", `[1000,"usd","pm_card_visa"]`},
		{"amount as string", `{"amount":"1000","currency":"usd","payment_method":"pm_card_visa"}`},
		{"amount 0", `{"amount":0,"currency":"usd","payment_method":"pm_card_visa"}`},
		{"amount negative", `{"amount":-5,"currency":"usd","payment_method":"pm_card_visa"}`},
		{"amount 1.5", `{"amount":1.5,"currency":"usd","payment_method":"pm_card_visa"}`},
		{"amount missing", `{"currency":"usd","payment_method":"pm_card_visa"}`},
		{"amount above 2^53-1", `{"amount":9007199254740992,"currency":"usd","payment_method":"pm_card_visa"}`},
		{"unknown currency", `{"amount":1000,"currency":"zzz","payment_method":"pm_card_visa"}`},
		{"upper-case currency", `{"amount":1000,"currency":"USD","payment_method":"pm_card_visa"}`},
		{"payment method not pm_", `{"amount":1000,"currency":"usd","payment_method":"card_visa"}`},
		{"unknown field", `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","customer":"cus_1"}`},
		{"metadata key over 40 bytes", `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"` + strings.Repeat("k", 41) + `":"v"}}`},
		{"description over 1000 bytes", `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","description":"` + strings.Repeat("d", 1001) + `"}`},
		{"metadata not strings", `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"n":1}}`},
		{"duplicate field", `{"amount":1,"currency":"usd","payment_method":"pm_card_visa","amount":1000}`},
		{"trailing garbage", visaBody + ` x`},
		{"two objects", visaBody + visaBody},
	}
	for _, tt := range bodies {
		r := b.post(t, key, tt.body)
		requireProblem(t, r, http.StatusBadRequest, "invalid_request")
		require.Zero(t, b.keyRows(t, key), "%s: a rejected body must not store its key", tt.name)
	}
	status, h, body := b.do(t, http.MethodPost, "/v1/charges",
		map[string]string{"Idempotency-Key": key, "Content-Type": "text/plain"}, []byte(visaBody))
	requireProblem(t, response{status, h, body}, http.StatusUnsupportedMediaType, "unsupported_media_type")
	require.Zero(t, b.keyRows(t, key))
	require.Empty(t, b.psp.Authorizations(), "an invalid request never reaches the PSP")

	// The client fixes its body and retries with the same key.
	fixed := b.post(t, key, visaBody)
	require.Equal(t, http.StatusCreated, fixed.status, "body: %s", fixed.body)
	require.Empty(t, fixed.header.Values("Idempotent-Replayed"))
	require.Equal(t, 1, b.keyRows(t, key))
	require.Equal(t, 1, b.chargeRows(t, key))
}

func TestBodyOver64KiBIs413(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 64 << 10

	// Valid JSON padded with insignificant white space to the byte.
	pad := func(n int) string { return visaBody[:len(visaBody)-1] + strings.Repeat(" ", n-len(visaBody)) + "}" }

	tooBig := b.post(t, "big-1", pad(limit+1))
	requireProblem(t, tooBig, http.StatusRequestEntityTooLarge, "payload_too_large")
	require.Zero(t, b.keyRows(t, "big-1"))

	huge := b.post(t, "big-2", pad(4*limit))
	requireProblem(t, huge, http.StatusRequestEntityTooLarge, "payload_too_large")
	require.Zero(t, b.keyRows(t, "big-2"))
	require.Empty(t, b.psp.Authorizations())

	// 64 KiB exactly is allowed; after a 413 the same key is still free.
	atLimit := b.post(t, "big-1", pad(limit))
	require.Equal(t, http.StatusCreated, atLimit.status, "body: %s", atLimit.body)
}

func TestPSPUnavailableIs503AndResumes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "outage-1"
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{ErrorRate: 1}))

	r := b.post(t, key, visaBody)
	requireProblem(t, r, http.StatusServiceUnavailable, "psp_unavailable")
	requireRetryAfter(t, r)
	require.Empty(t, b.psp.Authorizations(), "error_rate answers 503 without authorizing")

	// The key stays started at its last recovery point, lease released.
	st := b.keyState(t, key)
	require.Equal(t, "started", st.State)
	require.Equal(t, "charge_created", st.RecoveryPoint)
	require.False(t, st.Locked, "locked_until must be NULL: the lease is released")
	var chargeID, status string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT id, status FROM charges WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenant.ID, key).Scan(&chargeID, &status))
	require.Equal(t, "pending", status)
	require.Equal(t, 1, b.chargeRows(t, key))
	st2, _, body := b.do(t, http.MethodGet, "/v1/charges/"+chargeID, nil, nil)
	require.Equal(t, http.StatusOK, st2, "body: %s", body)
	pending := decodeCharge(t, body)
	require.Equal(t, "pending", pending.Status)
	require.Nil(t, pending.PSPReference, "no PSP answer yet")

	// A 503 is not stored: the retry resumes at charge_created, once its
	// next attempt is due; before that it is told to wait, and nothing is
	// sent.
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))
	early := b.post(t, key, visaBody)
	requireProblem(t, early, http.StatusServiceUnavailable, "psp_unavailable")
	require.Empty(t, b.psp.Authorizations())
	waitRetryAfter(t, b, key)
	retry := b.post(t, key, visaBody)
	require.Equal(t, http.StatusCreated, retry.status, "body: %s", retry.body)
	require.Empty(t, retry.header.Values("Idempotent-Replayed"), "a resumed run is not a replay of a stored answer")
	c := decodeCharge(t, retry.body)
	require.Equal(t, chargeID, c.ID, "the retry must finish the same charge, not make a second")
	require.Equal(t, "authorized", c.Status)
	require.Equal(t, 1, b.chargeRows(t, key))

	ledger := b.psp.Authorizations()
	require.Len(t, ledger, 1, "exactly one authorization")
	require.Equal(t, chargeID+":authorize", ledger[0].IdempotencyKey)
	require.Equal(t, *c.PSPReference, ledger[0].ID)
	require.Greater(t, ledger[0].Attempts, 1, "the PSP saw the failed attempts too")
	require.Equal(t, keyState{State: "done", RecoveryPoint: "done", Attempts: 1}, b.keyState(t, key))

	// Now finished, the key replays.
	replay := b.post(t, key, visaBody)
	require.Equal(t, string(retry.body), string(replay.body))
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
}

func TestLostPSPResponseNeverChargesTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "lost-1"

	// The PSP authorizes, then hangs up before answering, every time; the
	// request's own lookup by reference finds the authorization: 201 at
	// once, and nothing sent twice.
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{DropRate: 1}))
	found := b.post(t, "lost-found", visaBody)
	require.Equal(t, http.StatusCreated, found.status, "body: %s", found.body)
	fc := decodeCharge(t, found.body)
	fl := b.ledgerFor(fc.ID)
	require.Len(t, fl, 1)
	require.Equal(t, 1, fl[0].Attempts, "found by lookup, not sent again")
	require.Equal(t, fl[0].ID, *fc.PSPReference)

	// Now the lookups fail too: the outcome stays unknown, 503.
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{DropRate: 1, LookupErrorRate: 1}))
	r := b.post(t, key, visaBody)
	requireProblem(t, r, http.StatusServiceUnavailable, "psp_unavailable")
	requireRetryAfter(t, r)
	lost := b.ledgerFor(requireProblem(t, r, http.StatusServiceUnavailable, "psp_unavailable").Charge)
	require.Len(t, lost, 1, "the PSP did authorize; only its answer was lost")
	require.Equal(t, "charge_created", b.keyState(t, key).RecoveryPoint)

	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))
	waitRetryAfter(t, b, key)
	retry := b.post(t, key, visaBody)
	require.Equal(t, http.StatusCreated, retry.status, "body: %s", retry.body)
	c := decodeCharge(t, retry.body)
	require.Equal(t, lost[0].Reference, c.ID)

	ledger := b.ledgerFor(c.ID)
	require.Len(t, ledger, 1, "never charged twice")
	require.Len(t, b.psp.Authorizations(), 2, "one per charge")
	require.Equal(t, c.ID+":authorize", ledger[0].IdempotencyKey)
	require.Equal(t, lost[0].Attempts, ledger[0].Attempts, "the resumed attempt looked it up instead of sending it again")
	require.Equal(t, lost[0].ID, *c.PSPReference, "the retry must pick up the first authorization")
	require.Equal(t, 1, b.chargeRows(t, key))
}

func TestUnauthorizedIs401(t *testing.T) {
	t.Parallel()
	b := setup(t)

	created := b.post(t, "auth-1", visaBody)
	require.Equal(t, http.StatusCreated, created.status)
	chargeID := decodeCharge(t, created.body).ID

	unknown := "sk_" + strings.Repeat("0", 64)
	tests := []struct{ name, authorization string }{
		{"missing", ""},
		{"unknown key", "Bearer " + unknown},
		{"not a key", "Bearer not-a-key"},
		{"empty bearer", "Bearer "},
		{"bearer alone", "Bearer"},
		{"no scheme", b.key},
		{"basic", "Basic YWNtZTpzZWNyZXQ="},
		{"key with a suffix", "Bearer " + b.key + "x"},
	}
	t.Run("group", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				h := map[string]string{"Authorization": tt.authorization, "Idempotency-Key": "auth-2"}
				status, header, body := b.do(t, http.MethodPost, "/v1/charges", h, []byte(visaBody))
				requireProblem(t, response{status, header, body}, http.StatusUnauthorized, "unauthorized")

				status, header, body = b.do(t, http.MethodGet, "/v1/charges/"+chargeID, h, nil)
				requireProblem(t, response{status, header, body}, http.StatusUnauthorized, "unauthorized")
			})
		}
	})
	require.Zero(t, b.keyRows(t, "auth-2"), "an unauthenticated request stores nothing")
	require.Len(t, b.psp.Authorizations(), 1)
}

func TestGetCharge(t *testing.T) {
	t.Parallel()
	b := setup(t)

	created := b.post(t, "get-1", visaBody)
	require.Equal(t, http.StatusCreated, created.status)
	want := decodeCharge(t, created.body)

	status, h, body := b.do(t, http.MethodGet, "/v1/charges/"+want.ID, nil, nil)
	require.Equal(t, http.StatusOK, status, "body: %s", body)
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, want, decodeCharge(t, body))

	status, h, body = b.do(t, http.MethodGet, "/v1/charges/ch_doesnotexist", nil, nil)
	requireProblem(t, response{status, h, body}, http.StatusNotFound, "not_found")

	// Another tenant's charge is not found, not forbidden: its existence is
	// not disclosed.
	_, otherKey := newTenantKey(t, b.pool, "globex")
	auth := map[string]string{"Authorization": "Bearer " + otherKey}
	status, h, otherBody := b.do(t, http.MethodGet, "/v1/charges/"+want.ID, auth, nil)
	requireProblem(t, response{status, h, otherBody}, http.StatusNotFound, "not_found")
	status, h, unknownBody := b.do(t, http.MethodGet, "/v1/charges/ch_doesnotexist", auth, nil)
	requireProblem(t, response{status, h, unknownBody}, http.StatusNotFound, "not_found")
	require.Equal(t, stripRequestID(t, unknownBody), stripRequestID(t, otherBody),
		"another tenant's charge must look exactly like an unknown one")
}

func TestKeysAreScopedPerTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	globex, otherKey := newTenantKey(t, b.pool, "globex")

	acme := b.post(t, "shared-key", visaBody)
	require.Equal(t, http.StatusCreated, acme.status, "body: %s", acme.body)

	status, h, body := b.do(t, http.MethodPost, "/v1/charges",
		map[string]string{"Authorization": "Bearer " + otherKey, "Idempotency-Key": "shared-key"}, []byte(visaBody))
	require.Equal(t, http.StatusCreated, status, "body: %s", body)
	require.Empty(t, h.Values("Idempotent-Replayed"), "another tenant's key must not replay")

	a, g := decodeCharge(t, acme.body), decodeCharge(t, body)
	require.NotEqual(t, a.ID, g.ID, "two tenants, two charges")
	require.Len(t, b.psp.Authorizations(), 2)
	require.Len(t, b.ledgerFor(a.ID), 1)
	require.Len(t, b.ledgerFor(g.ID), 1)

	var tenantsWithKey int
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT count(DISTINCT tenant_id) FROM charges WHERE idempotency_key = 'shared-key' AND tenant_id IN ($1, $2)`,
		b.tenant.ID, globex.ID).Scan(&tenantsWithKey))
	require.Equal(t, 2, tenantsWithKey)

	// Each tenant's key still guards that tenant's own request.
	other := strings.Replace(visaBody, `"amount":1000`, `"amount":2000`, 1)
	requireProblem(t, b.post(t, "shared-key", other), http.StatusUnprocessableEntity, "idempotency_key_mismatch")
}

func TestOperationsEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noAuth := map[string]string{"Authorization": ""}

	status, _, body := b.do(t, http.MethodGet, "/healthz", noAuth, nil)
	require.Equal(t, http.StatusOK, status, "body: %s", body)
	status, _, body = b.do(t, http.MethodGet, "/readyz", noAuth, nil)
	require.Equal(t, http.StatusOK, status, "body: %s", body)

	require.Equal(t, http.StatusCreated, b.post(t, "metrics-1", visaBody).status)
	require.Equal(t, http.StatusCreated, b.post(t, "metrics-1", visaBody).status)
	status, h, body := b.do(t, http.MethodGet, "/metrics", noAuth, nil)
	require.Equal(t, http.StatusOK, status)
	require.True(t, strings.HasPrefix(h.Get("Content-Type"), "text/plain"), "Content-Type %q", h.Get("Content-Type"))
	require.Contains(t, string(body), "phasepay_idempotency_outcomes_total")
	require.Regexp(t, `phasepay_idempotency_outcomes_total\{[^}]*outcome="new"[^}]*\} 1\b`, string(body))
	require.Regexp(t, `phasepay_idempotency_outcomes_total\{[^}]*outcome="replay"[^}]*\} 1\b`, string(body))
}

func TestUnknownRouteAndWrongMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Neither exchange is in openapi.yaml, which documents only the routes
	// that exist: these two alone skip the document check.
	for _, path := range []string{"/nope", "/v1/nope", "/v1/charges/ch_1/refund"} {
		status, h, body := b.doUnchecked(t, http.MethodGet, path, nil, nil)
		requireProblem(t, response{status, h, body}, http.StatusNotFound, "not_found")
	}
	for _, tt := range []struct{ method, path string }{
		{http.MethodDelete, "/v1/charges"},
		{http.MethodGet, "/v1/charges/ch_1/capture"},
		{http.MethodDelete, "/v1/refunds"},
		{http.MethodPut, "/v1/charges/ch_1"},
		{http.MethodPost, "/healthz"},
	} {
		status, h, body := b.doUnchecked(t, tt.method, tt.path, map[string]string{"Idempotency-Key": "m-1"}, []byte(visaBody))
		requireProblem(t, response{status, h, body}, http.StatusMethodNotAllowed, "method_not_allowed")
	}
	require.Zero(t, b.keyRows(t, "m-1"))
}

// stripRequestID returns a problem body without its request_id, which
// differs per request by design.
func stripRequestID(t *testing.T, body []byte) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	delete(m, "request_id")
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return string(out)
}

// TestReadyzFollowsDatabase: /readyz is 200 only while PostgreSQL answers,
// and /healthz stays 200 regardless.
func TestReadyzFollowsDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noAuth := map[string]string{"Authorization": ""}

	admin, err := pgx.Connect(t.Context(), testdb.Admin(t))
	require.NoError(t, err)
	defer admin.Close(context.Background())
	dbName := b.pool.Config().ConnConfig.Database

	// Refuse new connections and cut the existing ones.
	_, err = admin.Exec(t.Context(), `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS false`)
	require.NoError(t, err)
	_, err = admin.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
	require.NoError(t, err)

	status, _, body := b.do(t, http.MethodGet, "/readyz", noAuth, nil)
	require.Equal(t, http.StatusServiceUnavailable, status, "body: %s", body)
	status, _, _ = b.do(t, http.MethodGet, "/healthz", noAuth, nil)
	require.Equal(t, http.StatusOK, status, "liveness does not depend on the database")

	_, err = admin.Exec(t.Context(), `ALTER DATABASE "`+dbName+`" ALLOW_CONNECTIONS true`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := b.send(t.Context(), http.MethodGet, "/readyz", noAuth, nil, true)
		return err == nil && r.status == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "ready again once the database answers")
}
