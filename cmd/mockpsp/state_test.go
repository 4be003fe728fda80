package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// pitfall T2 "A mock PSP that forgets its books between runs": with
// MOCKPSP_STATE (what make run sets), a mock stopped and started again
// keeps its books: an authorization captured in the first run is found by
// its reference in the second, a void of it is refused as already
// captured (never 404 authorization_not_found, which phasepay stores as
// a final 402), and its key still replays its first answer.
func TestMockBooksSurviveARestart(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "mockpsp-state.json")
	env := map[string]string{"MOCKPSP_STATE": state}

	first := setupEnv(t, env)
	resp := first.do(t, http.MethodPost, "/v1/authorizations", "ch_books:authorize",
		`{"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa", "reference": "ch_books"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var auth struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&auth))
	resp = first.do(t, http.MethodPost, "/v1/captures", "ch_books:capture",
		`{"authorization": "`+auth.ID+`", "amount": 600, "reference": "ch_books"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	first.cancel()
	require.NoError(t, first.wait(t))

	second := setupEnv(t, env)
	resp = second.do(t, http.MethodPost, "/v1/voids", "ch_books:void", `{"authorization": "`+auth.ID+`", "reference": "ch_books"}`)
	var refusal struct{ Error struct{ Code string } }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&refusal))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "already_captured", refusal.Error.Code, "the second run knows the first run's capture")

	resp = second.do(t, http.MethodGet, "/v1/authorizations?reference=ch_books", "", "")
	var found struct{ Data []struct{ ID string } }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&found))
	require.Len(t, found.Data, 1)
	require.Equal(t, auth.ID, found.Data[0].ID)

	resp = second.do(t, http.MethodPost, "/v1/authorizations", "ch_books:authorize",
		`{"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa", "reference": "ch_books"}`)
	var replay struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&replay))
	require.Equal(t, auth.ID, replay.ID, "the key replays its first answer")

	resp = second.do(t, http.MethodGet, "/_admin/authorizations", "", "")
	var ledger struct{ Data []struct{ Attempts int } }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ledger))
	require.Len(t, ledger.Data, 1)
	require.Equal(t, 2, ledger.Data[0].Attempts, "requests counted across runs")
	second.cancel()
	require.NoError(t, second.wait(t))
}

// Books that cannot be read are not replaced by empty ones: the mock
// refuses to start and says what to do.
func TestMockRefusesBooksItCannotRead(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "mockpsp-state.json")
	require.NoError(t, os.WriteFile(state, []byte(`{"version": 1, "ledger": [{"kind": "authorizations"`), 0o600))
	m := NewMain()
	m.ListenAddr, m.StateFile = "127.0.0.1:0", state
	err := m.Run(t.Context())
	require.ErrorContains(t, err, "remove the file")
}
