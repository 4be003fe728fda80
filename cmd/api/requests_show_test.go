package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/timeline"
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
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	first := b.post(t, key, visaBody)
	requireProblem(t, first, http.StatusServiceUnavailable, "psp_unavailable")
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{}))
	waitRetryAfter(t, b, key)
	require.Equal(t, http.StatusCreated, b.post(t, key, visaBody).status)

	code, out, errOut := b.cli(t, "embedded", "requests", "show", "acme", key)
	require.Zero(t, code, errOut)
	for _, want := range []string{
		"state           completed",
		"failed attempts 1",
		"stored answer   201",
		"lock version    2",
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

// showSample is the request docs/operations.md shows `requests show`
// printing ("A request's timeline"): a charge whose api died during its PSP
// call, taken over and finished by a reaper, its event delivered.
func showSample(t *testing.T) *shownRequest {
	t.Helper()
	at := func(s string) time.Time {
		ts, err := time.Parse("2006-01-02 15:04:05.000000", s)
		require.NoError(t, err)
		return ts
	}
	status, stored, ms, sends, lookups := 200, 201, int64(18), 0, 1
	answered, attemptMS := 200, int64(4)
	api, reaper := "api:vm:23489:3070b9a9", "reaper:vm:23512:9c41d2e0"
	entry := func(when string, e idempotency.Entry) timeline.Entry {
		e.At = at(when)
		return timeline.Entry{Entry: e}
	}
	charge := `{"id":"ch_7f27r23ypxwgmxv5tkgsww5k","object":"charge","amount":700,"currency":"usd","payment_method":"pm_card_visa",` +
		`"status":"authorized","amount_captured":0,"amount_refunded":0,"psp":"default","psp_reference":"auth_5c0e6a1f2b9d4e87",` +
		`"description":null,"metadata":{},"created_at":"2026-12-04T21:06:32Z"}`
	completed, created := "2026-12-04T21:06:49Z", "2026-12-04T21:06:32Z"
	s := &shownRequest{
		requestJSON: requestJSON{Tenant: "acme", Key: "order-1842", Endpoint: "POST /v1/charges", State: "completed",
			RecoveryPoint: "done", CreatedAt: created},
		ResponseStatus: &stored, Response: json.RawMessage(charge), CompletedAt: &completed, Charge: json.RawMessage(charge),
		ObjectID: "ch_7f27r23ypxwgmxv5tkgsww5k", LockVersion: 2,
		TraceID: "6ca6c519e299ad19f5a8f1ee81a20137", KeyHash: idempotency.KeyHash("order-1842"),
	}
	s.Timeline = []timeline.Entry{
		entry("2026-12-04 21:06:32.043820", idempotency.Entry{Kind: idempotency.KindClaimed, Holder: api, LockVersion: 1}),
		entry("2026-12-04 21:06:32.043820", idempotency.Entry{Kind: idempotency.KindReached, Holder: api, LockVersion: 1, RecoveryPoint: "charge_created"}),
		entry("2026-12-04 21:06:49.512001", idempotency.Entry{Kind: idempotency.KindTakenOver, Holder: reaper, LockVersion: 2, By: idempotency.RoleReaper}),
		entry("2026-12-04 21:06:49.530117", idempotency.Entry{Kind: idempotency.KindPSPCall, Holder: reaper, LockVersion: 2, PSP: "default",
			Operation: "authorize", PSPKey: "ch_7f27r23ypxwgmxv5tkgsww5k:authorize", Outcome: "success", Status: &status, DurationMS: &ms,
			Sends: &sends, Lookups: &lookups}),
		entry("2026-12-04 21:06:49.530117", idempotency.Entry{Kind: idempotency.KindFinished, Holder: reaper, LockVersion: 2, ResponseStatus: 201}),
	}
	ev := entry("2026-12-04 21:06:49.530117", idempotency.Entry{Kind: timeline.KindEvent})
	ev.EventID, ev.EventType = "evt_0661d5a3c9e1f0b2a4c6e8d0f1a3b5", "charge.authorized"
	try := entry("2026-12-04 21:06:49.611204", idempotency.Entry{Kind: timeline.KindWebhookAttempt, Status: &answered, DurationMS: &attemptMS})
	try.EventID, try.EndpointID, try.Attempt = ev.EventID, "we_3f9a1c0e7b2d4a6c8e0f1a2b", 1
	s.Timeline = append(s.Timeline, ev, try)
	return s
}

// The sample of `requests show` in docs/operations.md is what the command
// prints, byte for byte, for the request it describes (showSample): a
// change to what it prints fails here until the doc shows it too.
func TestOperationsShowSampleIsWhatShowPrints(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, showSample(t).print(&b))
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "bin/api requests show acme order-1842 --json   # every field, the stored answer too\n```\n\n```text\n")
	require.True(t, ok, "operations.md no longer shows requests show's output after its two commands")
	sample, _, ok := strings.Cut(rest, "```\n")
	require.True(t, ok)
	require.Equal(t, b.String(), sample, "docs/operations.md's requests show sample; what the command prints is the first")
}
