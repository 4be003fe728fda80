package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A retry with its first attempt's bytes, answered without parsing them
// (phases.DoRaw), answers as a replay of the same request encoded
// otherwise, headers included; another body under the key is still 422, an
// invalid one still 400, and a capture's key on another charge still 422.
func TestReplayOfTheFirstBytesAnswersAsAnyReplay(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	const body = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`
	first := b.do(t, http.MethodPost, "/v1/charges", "k", body)
	requireStatus(t, first, http.StatusCreated, "")

	same := b.do(t, http.MethodPost, "/v1/charges", "k", body)
	reencoded := b.do(t, http.MethodPost, "/v1/charges", "k", "{\n  \"payment_method\": \"pm_card_visa\",\n  \"currency\": \"usd\",\n  \"amount\": 1000\n}\n")
	for _, r := range []reply{same, reencoded} {
		require.Equal(t, first.status, r.status)
		require.Equal(t, string(first.body), string(r.body))
		for _, h := range []string{"Content-Type", "Cache-Control", "Content-Length"} {
			require.Equal(t, first.header.Get(h), r.header.Get(h), h)
		}
		require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	}

	requireStatus(t, b.do(t, http.MethodPost, "/v1/charges", "k", `{"amount":1001,"currency":"usd","payment_method":"pm_card_visa"}`),
		http.StatusUnprocessableEntity, "idempotency_key_mismatch")
	requireStatus(t, b.do(t, http.MethodPost, "/v1/charges", "k", `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","x":1}`),
		http.StatusBadRequest, "invalid_request")

	one, other := b.authorize(t, "a1"), b.authorize(t, "a2")
	capture := b.do(t, http.MethodPost, "/v1/charges/"+one+"/capture", "cap", `{}`)
	requireStatus(t, capture, http.StatusOK, "")
	b.requireReplay(t, capture, http.MethodPost, "/v1/charges/"+one+"/capture", "cap", `{}`)
	requireStatus(t, b.do(t, http.MethodPost, "/v1/charges/"+other+"/capture", "cap", `{}`),
		http.StatusUnprocessableEntity, "idempotency_key_mismatch")
	require.Len(t, b.mock.Captures(), 1)
}
