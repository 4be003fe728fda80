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
	main    *Main
	url     string
	cancel  context.CancelFunc
	stopped chan struct{} // closed when Run has returned runErr
	runErr  error
}

// wait returns Run's result once it has returned.
func (b *mainBundle) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-b.stopped:
		return b.runErr
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Run did not return")
		return nil
	}
}

// setup runs Main on a free port and waits until it listens.
func setup(t *testing.T) *mainBundle {
	t.Helper()
	return setupEnv(t, nil)
}

// setupEnv is setup with more of the environment.
func setupEnv(t *testing.T, env map[string]string) *mainBundle {
	t.Helper()
	m := NewMain()
	require.NoError(t, m.ParseEnv(func(k string) string {
		if k == "MOCKPSP_ADDR" {
			return "127.0.0.1:0"
		}
		return env[k]
	}))
	ctx, cancel := context.WithCancel(context.Background())
	b := &mainBundle{main: m, cancel: cancel, stopped: make(chan struct{})}
	go func() {
		b.runErr = m.Run(ctx)
		close(b.stopped)
	}()
	t.Cleanup(func() {
		cancel()
		<-b.stopped
	})

	select {
	case <-m.listening:
	case <-b.stopped:
		require.FailNow(t, "Run returned before listening", "%v", b.runErr)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Run did not start listening")
	}
	b.url = "http://" + m.Addr()
	return b
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
	require.NoError(t, b.wait(t))
}

func TestRunCloseStopsServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.main.Close())
	require.NoError(t, b.wait(t))
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
