package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

// After one request of each kind, /metrics exposes every instrument the
// API owns, with each idempotency outcome.
func TestMetricsExposeEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const visa = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

	require.Equal(t, http.StatusCreated, b.post(t, "m-1", visa).status)                                                                // new
	require.Equal(t, http.StatusCreated, b.post(t, "m-1", visa).status)                                                                // replay
	require.Equal(t, http.StatusUnprocessableEntity, b.post(t, "m-1", `{"amount":1,"currency":"usd","payment_method":"pm_x"}`).status) // mismatch

	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	outage := b.post(t, "m-2", visa)
	require.Equal(t, http.StatusServiceUnavailable, outage.status)
	waitRetryAfter(t, b, "m-2") // the released key's next attempt is due
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{LatencyMS: 500}))
	slow := b.postAsync(t, "m-2", visa)                                  // takeover of the released key
	b.waitAuthorizing(t, 2)                                              // m-1's, then m-2's: the takeover is inside its PSP call
	require.Equal(t, http.StatusConflict, b.post(t, "m-2", visa).status) // in_progress
	require.Equal(t, http.StatusCreated, await(t, slow).status)

	status, _, body := b.do(t, http.MethodGet, "/metrics", map[string]string{"Authorization": ""}, nil)
	require.Equal(t, http.StatusOK, status)
	text := string(body)
	for _, name := range []string{
		"phasepay_idempotency_outcomes_total",
		"phasepay_phase_duration_seconds_bucket",
		"phasepay_psp_duration_seconds_bucket",
		"http_server_request_duration_seconds_bucket",
		"db_client_operation_duration_seconds_bucket",
	} {
		require.Contains(t, text, name)
	}
	for _, outcome := range []string{"new", "replay", "mismatch", "takeover", "in_progress"} {
		require.True(t, hasSeries(text, "phasepay_idempotency_outcomes_total", `phasepay_outcome="`+outcome+`"`), outcome)
	}
	for _, phase := range []string{"charge_created", "psp_authorized", "done"} {
		require.True(t, hasSeries(text, "phasepay_phase_duration_seconds_count", `phasepay_phase="`+phase+`"`), phase)
	}
	for _, result := range []string{"authorized", "unknown"} {
		require.True(t, hasSeries(text, "phasepay_psp_duration_seconds_count", `phasepay_psp_result="`+result+`"`), result)
	}
}

func hasSeries(exposition, name, label string) bool {
	for _, line := range strings.Split(exposition, "\n") {
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, label) {
			return true
		}
	}
	return false
}
