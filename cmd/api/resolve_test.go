package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

// `requests resolve` of a capture's key, as the operator runs it: the
// capture was done at the PSP and its answer lost, so --as failed is
// refused in one line naming the PSP's capture, and --as succeeded records
// it; the client's retry of the capture then replays the captured charge
// (pitfall O4 "A capture, void or refund resolved as if it were a new
// charge").
func TestResolveCaptureKeyFromTheCommandLine(t *testing.T) {
	t.Parallel()
	var m *Main
	b := setup(t, func(mm *Main) { m = mm; mm.Config.GiveUpAfter = time.Millisecond })
	pspURL := m.MockPSPURL()

	created := b.post(t, "auth", visaBody)
	require.Equal(t, http.StatusCreated, created.status, string(created.body))
	c := decodeCharge(t, created.body)
	capture := func() response {
		status, h, body := b.do(t, http.MethodPost, "/v1/charges/"+c.ID+"/capture",
			map[string]string{"Idempotency-Key": "cap"}, []byte(`{"amount":600}`))
		return response{status, h, body}
	}
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{DropRate: 1, LookupErrorRate: 1}))
	requireProblem(t, capture(), http.StatusServiceUnavailable, "payment_unresolved")
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))
	captures := b.psp.Captures()
	require.Len(t, captures, 1, "the PSP captured; its answer was lost")

	code, _, errOut := b.cli(t, pspURL, "requests", "resolve", "acme", "cap", "--as", "failed", "--reason", "no capture, says ticket 88")
	require.Equal(t, 1, code)
	require.Len(t, strings.Split(strings.TrimSpace(errOut), "\n"), 1, "one line: %q", errOut)
	require.Contains(t, errOut, "contradicts")
	require.Contains(t, errOut, captures[0].ID)
	_, doc := b.getKey(t, "cap")
	require.Equal(t, "needs_attention", doc.State)

	code, out, errOut := b.cli(t, pspURL, "requests", "resolve", "acme", "cap", "--as", "succeeded", "--reason", "captured, says ticket 88", "--by", "ops-jane")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "resolved as succeeded, stored answer 200")

	replay := capture()
	require.Equal(t, http.StatusOK, replay.status, string(replay.body))
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	got := decodeCharge(t, replay.body)
	require.Equal(t, "captured", got.Status)
	require.EqualValues(t, 600, got.AmountCaptured)
	_, doc = b.getKey(t, "cap")
	require.Equal(t, "completed", doc.State)
	require.NotNil(t, doc.ObjectID)
	require.Equal(t, c.ID, *doc.ObjectID)
}
