package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type mainBundle struct {
	main   *Main
	url    string
	cancel context.CancelFunc
	done   chan error // receives Run's result
}

// setup runs Main on a free port and waits until it listens.
func setup(t *testing.T) *mainBundle {
	t.Helper()
	m := NewMain()
	require.NoError(t, m.ParseEnv(func(k string) string {
		return map[string]string{"MOCKPSP_ADDR": "127.0.0.1:0"}[k]
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		_ = m.Close()
		<-done
	})

	select {
	case <-m.listening:
	case err := <-done:
		require.FailNow(t, "Run returned before listening", "%v", err)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Run did not start listening")
	}
	return &mainBundle{main: m, url: "http://" + m.Addr(), cancel: cancel, done: done}
}

func (b *mainBundle) do(t *testing.T, method, path, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestRunServesUntilCanceled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NotContains(t, b.main.Addr(), ":0", "Addr reports the port actually chosen")

	resp := b.do(t, http.MethodPost, "/v1/authorizations", "ch_1:authorize",
		`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","reference":"ch_1"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	resp = b.do(t, http.MethodGet, "/_admin/authorizations", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	require.Len(t, list.Data, 1)
	require.Equal(t, "ch_1:authorize", list.Data[0]["idempotency_key"])

	resp = b.do(t, http.MethodPut, "/_admin/faults", "", `{"error_rate":1}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp = b.do(t, http.MethodPost, "/v1/authorizations", "ch_2:authorize",
		`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","reference":"ch_2"}`)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	b.cancel()
	select {
	case err := <-b.done:
		require.NoError(t, err)
		b.done <- err // for the cleanup
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Run did not return after cancel")
	}
}

func TestRunCloseStopsServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.main.Close())
	select {
	case err := <-b.done:
		require.NoError(t, err)
		b.done <- err
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Run did not return after Close")
	}
	require.NoError(t, b.main.Close(), "Close is safe twice")
}

func TestRunFailsOnBusyAddress(t *testing.T) {
	t.Parallel()
	b := setup(t)

	m := NewMain()
	m.ListenAddr = b.main.Addr()
	err := m.Run(t.Context())
	require.ErrorContains(t, err, "listen on "+b.main.Addr())
}

func TestRunRejectsInvalidFaults(t *testing.T) {
	t.Parallel()
	m := NewMain()
	m.ListenAddr = "127.0.0.1:0"
	m.Faults.ErrorRate = 2
	require.ErrorContains(t, m.Run(t.Context()), "error_rate")
}
