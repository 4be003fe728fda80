package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/client"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/httpapi"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/internal/webhooks"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// chargectl listen against the real API and a real deliverer: it
// registers itself, prints each verified event, refuses a forged delivery,
// and deletes its endpoint when it stops.
func TestListenRegistersVerifiesAndPrints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	tel, err := telemetry.New(ctx, "chargectl-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	h, err := httpapi.NewHandler(httpapi.Config{Pool: pool, Telemetry: tel, WebhookAllowPrivate: true, AuthCacheTTL: -1})
	require.NoError(t, err)
	api := httptest.NewServer(h)
	t.Cleanup(api.Close)
	tenant, key, err := tenants.CreateKey(ctx, pool, "acme")
	require.NoError(t, err)

	d, err := webhooks.NewDeliverer(pool, webhooks.DelivererConfig{Interval: 50 * time.Millisecond, AllowPrivate: true})
	require.NoError(t, err)
	dctx, stopDeliverer := context.WithCancel(ctx)
	delivered := make(chan struct{})
	go func() { defer close(delivered); _ = d.Run(dctx) }()
	t.Cleanup(func() { stopDeliverer(); <-delivered })

	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	m := NewMain()
	require.NoError(t, m.ParseFlags([]string{"listen", "--api-url", api.URL, "--api-key", key, "--events", "charge.authorized"}, func(string) string { return "" }))
	m.Stdout, m.Stderr = stdout, stderr
	m.HTTPClient = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(m.HTTPClient.CloseIdleConnections)
	ready := make(chan string, 1)
	received := make(chan client.Event, 10)
	m.ListenReady = func(url string) { ready <- url }
	m.ListenReceived = func(ev client.Event) { received <- ev }
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(lctx) }()
	url := <-ready

	ev, err := events.Write(ctx, pool, tenant.ID, events.ChargeAuthorized, []byte(`{"id":"ch_1","object":"charge"}`))
	require.NoError(t, err)
	select {
	case got := <-received:
		require.Equal(t, ev.ID, got.ID)
	case <-time.After(3 * time.Second):
		t.Fatalf("no event printed; stderr: %s", stderr.String())
	}
	require.Equal(t, string(ev.Body)+"\n", stdout.String())

	// A forged delivery is refused and not printed.
	forged, err := http.Post(url, "application/json", strings.NewReader(string(ev.Body)))
	require.NoError(t, err)
	forged.Body.Close()
	require.Equal(t, http.StatusBadRequest, forged.StatusCode)
	require.Contains(t, stderr.String(), "refused a delivery")

	stop()
	require.NoError(t, <-done)
	var live int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints WHERE deleted_at IS NULL`).Scan(&live))
	require.Zero(t, live, "listen deletes its endpoint when it stops")
	http.DefaultClient.CloseIdleConnections()
}
