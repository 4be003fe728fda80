package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
)

// requests show prints a request's life as a timeline: one line per
// moment with its time, holder and what happened, the release's reason and
// raw cause, the takeover by the client's retry, the PSP calls, the finish
// and the event it wrote; the trace line names the key's hash. --json
// holds the same timeline with every field.
func TestRequestsShowPrintsTheTimeline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "show-1"
	require.NoError(t, b.psp.SetFaults(psp.Faults{ErrorRate: 1}))
	first := b.post(t, key, visaBody)
	requireProblem(t, first, http.StatusServiceUnavailable, "psp_unavailable")
	require.NoError(t, b.psp.SetFaults(psp.Faults{}))
	waitRetryAfter(t, first)
	require.Equal(t, http.StatusCreated, b.post(t, key, visaBody).status)

	code, out, errOut := b.cli(t, "embedded", "requests", "show", "acme", key)
	require.Zero(t, code, errOut)
	for _, want := range []string{
		"acme show-1: POST /v1/charges, done",
		"stored answer   201",
		"TIME (UTC)", "HOLDER", "WHAT",
		"claimed the key (lock_version 1)",
		"reached charge_created",
		"PSP call: authorize at default, key ch_",
		": unknown, status 503",
		"released: PSP answered 503; next attempt ",
		"(cause: authorize ch_",
		"took the key over: by a client's retry (lock_version 2)",
		": success, status 200",
		"finished: answer 201 stored",
		"event charge.authorized written: evt_",
		"phasepay.key_hash=",
	} {
		require.Contains(t, out, want)
	}
	var api int
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " api:") {
			api++
		}
	}
	require.Equal(t, 7, api, "every entry but the event names the api process that wrote it:\n%s", out)

	code, out, errOut = b.cli(t, "embedded", "requests", "show", "acme", key, "--json")
	require.Zero(t, code, errOut)
	var shown struct {
		KeyHash  string `json:"key_hash"`
		Timeline []struct {
			Kind   string `json:"kind"`
			Holder string `json:"holder"`
			Detail string `json:"detail"`
			PSPKey string `json:"psp_key"`
		} `json:"timeline"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Len(t, shown.KeyHash, 16)
	require.Len(t, shown.Timeline, 8)
	require.Equal(t, "released", shown.Timeline[3].Kind)
	require.Contains(t, shown.Timeline[3].Detail, "503")
	require.True(t, strings.HasPrefix(shown.Timeline[0].Holder, "api:"))
	require.True(t, strings.HasSuffix(shown.Timeline[2].PSPKey, ":authorize"))
}
