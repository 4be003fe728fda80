package idempotency_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

func TestFingerprintCanonical(t *testing.T) {
	t.Parallel()
	base := `{"amount":1000,"currency":"usd","metadata":{"a":"1","b":"2"}}`
	same := []string{
		base,
		`{"currency":"usd","amount":1000,"metadata":{"b":"2","a":"1"}}`,
		"{\n  \"amount\": 1000,\n  \"currency\": \"usd\",\n  \"metadata\": {\"a\": \"1\", \"b\": \"2\"}\n}\n",
		`{"amount":1e3,"currency":"usd","metadata":{"a":"1","b":"2"}}`,
		`{"amount":1000,"currency":"\u0075sd","metadata":{"a":"1","b":"2"}}`,
	}
	want, err := idempotency.Canonicalize("POST", "/v1/charges", []byte(base))
	require.NoError(t, err)
	require.Equal(t, base, string(want.Body))
	for _, body := range same {
		got, err := idempotency.Canonicalize("POST", "/v1/charges", []byte(body))
		require.NoError(t, err)
		require.Equal(t, want.Fingerprint, got.Fingerprint, body)
	}

	different := []struct{ method, path, body string }{
		{"POST", "/v1/charges", `{"amount":1001,"currency":"usd","metadata":{"a":"1","b":"2"}}`},
		{"POST", "/v1/charges", `{"amount":1000,"currency":"usd","metadata":{"a":"1"}}`},
		{"PUT", "/v1/charges", base},
		{"POST", "/v1/charge", base},
	}
	for _, d := range different {
		got, err := idempotency.Canonicalize(d.method, d.path, []byte(d.body))
		require.NoError(t, err)
		require.NotEqual(t, want.Fingerprint, got.Fingerprint, "%v", d)
	}

	_, err = idempotency.Canonicalize("POST", "/v1/charges", []byte(`{"amount":`))
	require.ErrorIs(t, err, idempotency.ErrBodyInvalid)
}

func FuzzFingerprint(f *testing.F) {
	f.Add(`{"amount":1000,"currency":"usd"}`)
	f.Add(`{"b":[1,2,{"c":null}],"a":"\u00e9"}`)
	f.Add(`{"x":1.50,"y":-0,"z":1e21}`)
	f.Add(`[]`)
	f.Add(`not json`)
	f.Fuzz(func(t *testing.T, body string) {
		c, err := idempotency.Canonicalize("POST", "/v1/charges", []byte(body))
		if err != nil {
			return
		}
		// Canonical form is a fixed point: canonicalising it again changes
		// neither the bytes nor the fingerprint.
		again, err := idempotency.Canonicalize("POST", "/v1/charges", c.Body)
		require.NoError(t, err)
		require.Equal(t, string(c.Body), string(again.Body))
		require.Equal(t, c.Fingerprint, again.Fingerprint)
	})
}

// CanonicalizeParams fingerprints the encoding of a parsed request, and
// refuses raw JSON: fingerprinting the client's bytes is how one
// fingerprint came to stand for two executions.
func TestCanonicalizeParamsTakesParsedRequests(t *testing.T) {
	t.Parallel()
	type params struct {
		Amount int64             `json:"amount"`
		Note   *string           `json:"note,omitempty"`
		Tags   map[string]string `json:"tags,omitempty"`
	}
	p := params{Amount: 7, Tags: map[string]string{"b": "<", "a": "&"}}
	got, err := idempotency.CanonicalizeParams("POST", "/v1/things", p)
	require.NoError(t, err)
	require.Equal(t, `{"amount":7,"tags":{"a":"&","b":"<"}}`, string(got.Body), "RFC 8785, not encoding/json's HTML escaping")
	require.Equal(t, p, got.Params, "what was parsed travels with its canonical form")
	want, err := idempotency.Canonicalize("POST", "/v1/things", got.Body)
	require.NoError(t, err)
	got.Params = nil
	require.Equal(t, want, got)

	for _, raw := range []any{[]byte(`{"amount":7}`), json.RawMessage(`{"amount":7}`), `{"amount":7}`, 7, []int{7}} {
		_, err := idempotency.CanonicalizeParams("POST", "/v1/things", raw)
		require.Error(t, err, "%T", raw)
	}
}

// A raw fingerprint equals the canonical one exactly when the bytes are
// the canonical body (with the same method and path): it can confirm that
// a request is the stored one, and says nothing of any other encoding.
func TestRawFingerprintMatchesOnlyTheCanonicalBytes(t *testing.T) {
	t.Parallel()
	canon, err := idempotency.Canonicalize("POST", "/v1/charges", []byte(`{"currency":"usd", "amount":1000}`))
	require.NoError(t, err)
	require.Equal(t, canon.Fingerprint, idempotency.RawFingerprint("POST", "/v1/charges", canon.Body))
	for _, d := range []struct{ method, path, body string }{
		{"POST", "/v1/charges", `{"currency":"usd","amount":1000}`},
		{"POST", "/v1/charges", `{"amount":1000, "currency":"usd"}`},
		{"POST", "/v1/charges", string(canon.Body) + "\n"},
		{"POST", "/v1/charges/x", string(canon.Body)},
		{"PUT", "/v1/charges", string(canon.Body)},
		{"POST", "/v1/charges" + string(canon.Body), ""},
	} {
		require.NotEqual(t, canon.Fingerprint, idempotency.RawFingerprint(d.method, d.path, []byte(d.body)), "%v", d)
	}
}
