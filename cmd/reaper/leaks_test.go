package main

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// TestConfiguredURLCredentialsAreNeverLogged: the reaper logged every PSP
// error it met driving a key, and the PSP client's errors quoted the URL
// they were sent to, PSP_URL's user name and query included; a refused
// PSP_URL was quoted whole in the one-line reason. Now neither the log nor
// the reason carries the URL's credentials or query.
func TestConfiguredURLCredentialsAreNeverLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pspURL := "http://operator:s3cret@" + ln.Addr().String() + "/?token=t0ken"
	require.NoError(t, ln.Close()) // nothing listens: every call fails

	// A charge whose authorization failed, due again at once.
	dbURL := testdb.NewURL(t)
	pool := testdb.Pool(t, dbURL, time.Time{})
	tenant, _, err := tenants.CreateKey(ctx, pool, "acme")
	require.NoError(t, err)
	keys, err := idempotency.NewStore(idempotency.Config{RetryBase: time.Millisecond, RetryMax: time.Millisecond})
	require.NoError(t, err)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: pspURL, MaxAttempts: 1})
	require.NoError(t, err)
	svc, err := charges.NewService(pool, keys, client, phases.Config{})
	require.NoError(t, err)
	_, err = svc.Create(ctx, tenant.ID, "creds-1", phases.AsSent([]byte(`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`)))
	require.ErrorIs(t, err, charges.ErrPSPUnavailable)
	svc.Wait()

	cfg, err := ParseEnv(env(map[string]string{"DATABASE_URL": dbURL, "PSP_URL": pspURL, "REAPER_INTERVAL": "50ms",
		"RETRY_BASE": "1ms", "RETRY_MAX": "1ms"}))
	require.NoError(t, err)
	var logs syncBuffer
	m := &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "could not complete key") },
		30*time.Second, 20*time.Millisecond, "the reaper never drove the key")
	cancel()
	require.NoError(t, <-done)
	require.Contains(t, logs.String(), "connection refused", "the raw cause is logged, for operators")
	for _, secret := range []string{"s3cret", "t0ken", "operator"} {
		require.NotContains(t, logs.String(), secret)
	}

	// A refused URL is named without its credentials.
	var stderr stringWriter
	code := run(nil, env(map[string]string{"PSP_URL": "ftp://operator:s3cret@psp/?token=t0ken"}), &stringWriter{}, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.s, "ftp://psp/")
	for _, secret := range []string{"s3cret", "t0ken", "operator"} {
		require.NotContains(t, stderr.s, secret)
	}
}
