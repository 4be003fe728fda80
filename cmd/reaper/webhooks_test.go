package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/testsignal"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// bin/reaper delivers webhooks: the first attempt for an event starts
// within 2 s plus one REAPER_INTERVAL of its commit, and the reaper's
// /metrics carries the delivery metrics.
func TestReaperDeliversWebhooksPromptly(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	pool := testdb.Pool(t, url, time.Time{})
	ctx := context.Background()
	var tenant int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))
	got := make(chan []byte, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer srv.Close()
	_, err := webhooks.Create(ctx, pool, tenant, srv.URL, []string{"*"})
	require.NoError(t, err)

	cfg, err := ParseEnv(env(map[string]string{
		"DATABASE_URL": url, "PSP_URL": PSPEmbedded, "REAPER_INTERVAL": "1s",
		"WEBHOOK_ALLOW_PRIVATE": "1", "REAPER_METRICS_ADDR": "127.0.0.1:0",
	}))
	require.NoError(t, err)
	m := &Main{Config: cfg}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	require.Eventually(t, func() bool { return m.MetricsAddr() != "" }, 10*time.Second, 10*time.Millisecond)
	// The deliverer listens: an event committed from here on wakes it.
	testsignal.WaitFor(t, 10*time.Second, func() bool {
		var listening bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) = 1 FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = $1 AND query LIKE 'LISTEN %'`, WebhookListenerApplicationName).Scan(&listening))
		return listening
	}, "the webhook deliverer never listened")

	ev, err := events.Write(ctx, pool, tenant, events.ChargeAuthorized, []byte(`{"id":"ch_1"}`))
	require.NoError(t, err)
	committed := time.Now()
	select {
	case body := <-got:
		require.Equal(t, ev.Body, body)
		require.Less(t, time.Since(committed), 3*time.Second)
	case <-time.After(3 * time.Second):
		t.Fatal("no delivery within 2 s + REAPER_INTERVAL")
	}

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	require.Eventually(t, func() bool {
		resp, err := client.Get("http://" + m.MetricsAddr() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "phasepay_webhooks_backlog") &&
			strings.Contains(string(body), "phasepay_webhooks_delivery_latency_seconds") &&
			strings.Contains(string(body), "phasepay_webhooks_backlog_oldest_age_seconds") &&
			strings.Contains(string(body), "phasepay_webhooks_delivery_due_delay_seconds")
	}, 5*time.Second, 100*time.Millisecond)
}

// Events are kept longer than deliveries are retried: a shorter
// EVENTS_RETENTION is a configuration error.
func TestEventsRetentionMustOutlastRetries(t *testing.T) {
	t.Parallel()
	cfg, err := ParseEnv(env(map[string]string{"PSP_URL": PSPEmbedded}))
	require.NoError(t, err)
	require.Equal(t, events.RetentionDefault, cfg.EventsRetention)
	_, err = ParseEnv(env(map[string]string{"PSP_URL": PSPEmbedded, "EVENTS_RETENTION": "48h"}))
	require.ErrorContains(t, err, "EVENTS_RETENTION")
	_, err = ParseEnv(env(map[string]string{"PSP_URL": PSPEmbedded, "WEBHOOK_ALLOW_PRIVATE": "maybe"}))
	require.ErrorContains(t, err, "WEBHOOK_ALLOW_PRIVATE")
}
