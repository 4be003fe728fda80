package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Every reaper, deliverer, pool, server and client a test starts is
// stopped by its cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseEnv(t *testing.T) {
	t.Parallel()
	cfg, err := ParseEnv(env(map[string]string{"PSP_URL": PSPEmbedded}))
	require.NoError(t, err)
	require.Equal(t, time.Second, cfg.Interval)
	require.Equal(t, 24*time.Hour, cfg.Retention)
	require.Equal(t, 60*time.Second, cfg.Lease)

	for name, vars := range map[string]map[string]string{
		"bad interval":             {"REAPER_INTERVAL": "soon"},
		"negative retention":       {"RETENTION": "-1h"},
		"retention below lease":    {"RETENTION": "30s", "LEASE": "60s"},
		"retention equal to lease": {"RETENTION": "60s", "LEASE": "60s"},
	} {
		vars["PSP_URL"] = PSPEmbedded
		_, err := ParseEnv(env(vars))
		require.Error(t, err, name)
	}
}

func TestBadConfigExitsTwo(t *testing.T) {
	t.Parallel()
	var stderr stringWriter
	code := run(nil, env(map[string]string{"RETENTION": "1s", "PSP_URL": PSPEmbedded}), io.Discard, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.s, "reaper: RETENTION")

	stderr = stringWriter{}
	code = run(nil, env(map[string]string{"DATABASE_POOLER": "session", "PSP_URL": PSPEmbedded}), io.Discard, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.s, "reaper: DATABASE_POOLER")
}

type stringWriter struct{ s string }

func (w *stringWriter) Write(p []byte) (int, error) { w.s += string(p); return len(p), nil }

// The reaper's /metrics exposes every instrument it owns from its first
// pass, and Run returns nil once its context ends.
func TestReaperMetricsAndShutdown(t *testing.T) {
	t.Parallel()
	cfg, err := ParseEnv(env(map[string]string{
		"DATABASE_URL":        testdb.NewURL(t),
		"PSP_URL":             PSPEmbedded,
		"REAPER_METRICS_ADDR": "127.0.0.1:0",
		"REAPER_INTERVAL":     "50ms",
	}))
	require.NoError(t, err)
	m := &Main{Config: cfg}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	want := []string{
		"phasepay_reaper_takeovers_total", "phasepay_reaper_completions_total", "phasepay_reaper_failures_total",
		"phasepay_partitions_created_total", "phasepay_partitions_dropped_total",
		"phasepay_idempotency_stuck_keys", "phasepay_partitions_days_ahead",
		"phasepay_idempotency_unfinished_keys", `phasepay_schedule="waiting"`, "phasepay_idempotency_needs_attention_keys",
	}
	require.Eventually(t, func() bool {
		addr := m.MetricsAddr()
		if addr == "" {
			return false
		}
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, name := range want {
			if !strings.Contains(string(body), name) {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
}
