package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testsignal"
	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/migrations"
)

// The api exited 1 when PostgreSQL was unreachable at start, and a request
// that met a restart answered 500 without Retry-After. Now, on a server this
// test stops and starts (never the shared one): the api starts while the
// database is down and serves 503 database_unavailable (with Retry-After,
// within 5 s) and /readyz 503; once the database is up, a charge succeeds
// and /readyz is 200; through a restart during operation the same again;
// and Run never returns: the process rides it out.
func TestAPIRidesOutDatabaseRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v, err := validator()
	require.NoError(t, err)
	c := pgcluster.ForTest(t, pgcluster.Config{})
	dbURL, err := c.CreateDatabase(ctx, "phasepay")
	require.NoError(t, err)
	require.NoError(t, migrations.UpURL(ctx, dbURL))
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	tenant, key := newTenantKey(t, pool, "acme")
	pool.Close()

	require.NoError(t, c.Stop())
	env := map[string]string{
		"DATABASE_URL": dbURL,
		"API_ADDR":     "127.0.0.1:0",
		"MOCKPSP_ADDR": "127.0.0.1:0",
		"PSP_URL":      PSPEmbedded,
	}
	cfg, err := ParseEnv(func(k string) string { return env[k] })
	require.NoError(t, err)
	logs := &lockedBuffer{}
	m := &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	runCtx, cancel := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- m.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-runErr:
			require.NoError(t, err, "Run")
		case <-time.After(ShutdownTimeout + 10*time.Second):
			t.Error("Run did not return")
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	addr := waitAddr(t, m, runErr)
	client := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	b := &testBundle{url: "http://" + addr, dbURL: dbURL, key: key, tenant: tenant, client: client, validator: v, logs: logs}

	readyz := func() int {
		resp, err := client.Get(b.url + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	requireDown := func(key string) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, readyz())
		start := time.Now()
		r := b.post(t, key, `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`)
		require.Less(t, time.Since(start), 5*time.Second, "no request hangs on a dead database")
		requireProblem(t, r, http.StatusServiceUnavailable, "database_unavailable")
		requireRetryAfter(t, r)
	}
	requireServes := func(key string) {
		t.Helper()
		require.Eventually(t, func() bool { return readyz() == http.StatusOK }, 30*time.Second, 100*time.Millisecond)
		var r response
		require.Eventually(t, func() bool {
			r = b.post(t, key, `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`)
			return r.status == http.StatusCreated
		}, 30*time.Second, 200*time.Millisecond, "the charge never succeeded: %d %s", r.status, r.body)
	}

	// Started with the database down.
	requireDown("before-start")
	require.NoError(t, c.Start(ctx))
	requireServes("before-start")

	// Restarted under a running api.
	for i := range 2 {
		require.NoError(t, c.Stop())
		lost := strings.Count(logs.String(), "connection lost; changes unheard")
		requireDown(fmt.Sprintf("restart-%d", i))
		// The revocation listener has lost its connection and failed to
		// make a new one.
		testsignal.WaitFor(t, 10*time.Second, func() bool {
			return strings.Count(logs.String(), "connection lost; changes unheard") >= lost+2
		}, "the listener did not try again while the database was away")
		require.NoError(t, c.Start(ctx))
		requireServes(fmt.Sprintf("restart-%d", i))
	}
	select {
	case err := <-runErr:
		t.Fatalf("Run returned while the database was away: %v", err)
	default:
	}
}
