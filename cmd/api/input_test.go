package main

// Strict request bodies (docs/api.md, "Basics"): each body
// the decoder refuses answers 400 invalid_request and stores nothing, and
// the fingerprint covers exactly the request that runs.

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireRefused checks that body, posted under key, is answered 400
// invalid_request naming field, with no key, no charge and no PSP call.
func (b *testBundle) requireRefused(t *testing.T, key, body, field string) {
	t.Helper()
	r := b.post(t, key, body)
	p := requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	require.NotEmpty(t, p.Errors, "body: %s", r.body)
	require.Equal(t, field, p.Errors[0].Field, "body: %s", r.body)
	require.Zero(t, b.keyRows(t, key), "a refused body must not store its key")
	require.Zero(t, b.chargeRows(t, key))
	require.Empty(t, b.psp.Authorizations(), "a refused body never reaches the PSP")
}

// {"amount":100,"AMOUNT":5000} was charged 5000 (encoding/json keeps the
// last of two names equal but for case) under a fingerprint of both
// members, and "Amount" was taken for "amount".
func TestCaseVariantDuplicateMemberIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "case-1"

	b.requireRefused(t, key, `{"amount":100,"AMOUNT":5000,"currency":"usd","payment_method":"pm_card_visa"}`, "AMOUNT")
	b.requireRefused(t, key, `{"Amount":100,"currency":"usd","payment_method":"pm_card_visa"}`, "Amount")
	b.requireRefused(t, key, `{"amount":100,"currency":"usd","payment_method":"pm_card_visa","metadata":{"k":"1","K":"2"}}`, "metadata.K")

	r := b.post(t, key, `{"amount":100,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	require.Equal(t, int64(100), decodeCharge(t, r.body).Amount)
	require.Equal(t, int64(100), b.psp.Authorizations()[0].Amount)

	r = b.post(t, key, `{"amount":5000,"currency":"usd","payment_method":"pm_card_visa"}`)
	requireProblem(t, r, http.StatusUnprocessableEntity, "idempotency_key_mismatch")
}

// Every rule of the strict decoder, over HTTP: 400, nothing stored, and the
// client may fix its body and retry with the same key.
func TestStrictBodyViolationsStoreNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "strict-1"
	const head = `{"amount":100,"currency":"usd","payment_method":"pm_card_visa"`

	for _, c := range []struct{ name, body, field string }{
		{"unknown member", head + `,"customer":"cus_1"}`, "customer"},
		{"repeated member", head + `,"amount":100}`, "amount"},
		{"wrong-case member", `{"amount":100,"Currency":"usd","payment_method":"pm_card_visa"}`, "Currency"},
		{"trailing data", head + `} {}`, ""},
		{"trailing garbage", head + `}]`, ""},
		{"top level array", `[` + head + `}]`, ""},
		{"top level string", `"x"`, ""},
		{"invalid UTF-8", head + ",\"description\":\"caf\xe9\"}", ""},
		{"lone surrogate", head + `,"description":"\ud800"}`, "description"},
		{"null amount", `{"amount":null,"currency":"usd","payment_method":"pm_card_visa"}`, "amount"},
		{"null metadata value", head + `,"metadata":{"k":null}}`, "metadata.k"},
		{"integer as 1e2", `{"amount":1e2,"currency":"usd","payment_method":"pm_card_visa"}`, "amount"},
	} {
		// Not parallel: each refusal must leave the one key unstored for
		// the fix below.
		t.Run(c.name, func(t *testing.T) {
			b.requireRefused(t, key, c.body, c.field)
		})
	}
	r := b.post(t, key, head+"}")
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
}

// PostgreSQL text and jsonb reject U+0000: a description or metadata
// holding one answered 500 after the key was claimed.
func TestNULInStringIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "nul-1"
	const head = `{"amount":100,"currency":"usd","payment_method":"pm_card_visa"`

	b.requireRefused(t, key, head+`,"description":"a\u0000b"}`, "description")
	b.requireRefused(t, key, head+`,"metadata":{"k":"\u0000"}}`, "metadata.k")
	b.requireRefused(t, key, head+`,"metadata":{"k\u0000":"v"}}`, "metadata.k\x00")

	r := b.post(t, key, head+`,"description":"ab"}`)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
}

// "pm_" passed a prefix check; the PSP refused it, and the request answered
// 500 on every retry. The contract's pattern is checked before any key.
func TestEmptyPaymentMethodSuffixIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "pm-1"

	for _, pm := range []string{"pm_", "pm_card-visa", "pm_" + strings.Repeat("x", 101)} {
		b.requireRefused(t, key, `{"amount":100,"currency":"usd","payment_method":"`+pm+`"}`, "payment_method")
	}
	r := b.post(t, key, `{"amount":100,"currency":"usd","payment_method":"pm_`+strings.Repeat("x", 100)+`"}`)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
}

// The fingerprint and the stored body are those of the request as parsed:
// bodies that execute alike are one request (a replay), whatever their
// spelling, and the stored body is the canonical form of what ran.
func TestFingerprintCoversExactlyWhatRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "fp-1"

	first := b.post(t, key, "{\n  \"amount\": 100,\n  \"currency\": \"\\u0075sd\",\n  \"payment_method\": \"pm_card_visa\",\n"+
		"  \"description\": null,\n  \"metadata\": {}\n}\n")
	require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)

	var stored []byte
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT request_body FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`, b.tenant.ID, key).Scan(&stored))
	require.Equal(t, `{"amount":100,"currency":"usd","payment_method":"pm_card_visa"}`, string(stored))

	for _, body := range []string{
		`{"payment_method":"pm_card_visa","currency":"usd","amount":100}`,
		`{"amount":100,"currency":"usd","payment_method":"pm_card_visa","metadata":null}`,
	} {
		r := b.post(t, key, body)
		require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
		require.Equal(t, "true", r.header.Get("Idempotent-Replayed"), body)
		require.Equal(t, string(first.body), string(r.body))
	}
	for _, body := range []string{
		`{"amount":100,"currency":"usd","payment_method":"pm_card_visa","description":""}`,
		`{"amount":100,"currency":"usd","payment_method":"pm_card_visa","metadata":{"k":""}}`,
	} {
		requireProblem(t, b.post(t, key, body), http.StatusUnprocessableEntity, "idempotency_key_mismatch")
	}
	require.Len(t, b.psp.Authorizations(), 1)
}
