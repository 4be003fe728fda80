package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testsignal"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/migrations"
)

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The reaper must ride out a PostgreSQL restart as the api does: started
// while the database is down, and through a restart while it runs, it logs
// each failed pass and tries again, and once the database is back it
// completes abandoned keys, without being restarted (Run never returns).
// Run on a server this test stops and starts, never the shared one.
func TestReaperRidesOutDatabaseRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgcluster.ForTest(t, pgcluster.Config{})
	dbURL, err := c.CreateDatabase(ctx, "phasepay")
	require.NoError(t, err)
	require.NoError(t, migrations.UpURL(ctx, dbURL))
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var tenant int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))

	mock, err := mockpsp.New(mockpsp.Faults{})
	require.NoError(t, err)
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: srv.URL})
	require.NoError(t, err)
	keys, err := idempotency.NewStore(idempotency.Config{Lease: time.Second})
	require.NoError(t, err)
	crashing := chargestest.NewService(t, pool, keys, client, phases.Config{CrashHook: phasestest.CrashAt(phases.CrashAfterClaim)})
	// abandon leaves a key claimed by a worker that died; the reaper must
	// finish it once its one-second lease has run out.
	abandon := func(key string) {
		t.Helper()
		req, _ := chargestest.Request(t, `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`)
		require.Eventually(t, func() bool {
			_, err := crashing.Create(ctx, tenant, key, phases.Parsed(req))
			return errors.Is(err, phasestest.ErrCrash)
		}, 30*time.Second, 100*time.Millisecond, "could not abandon %s", key)
	}
	requireDone := func(key string) {
		t.Helper()
		require.Eventually(t, func() bool {
			rec, err := keys.Lookup(ctx, pool, tenant, key)
			return err == nil && rec.State == idempotency.StateDone
		}, 30*time.Second, 100*time.Millisecond, "the reaper never completed %s", key)
	}

	require.NoError(t, c.Stop())
	cfg, err := ParseEnv(env(map[string]string{
		"DATABASE_URL":    dbURL,
		"PSP_URL":         PSPEmbedded,
		"LEASE":           "1s",
		"REAPER_INTERVAL": "100ms",
	}))
	require.NoError(t, err)
	logs := &syncBuffer{}
	m := &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Authorizer: client}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		if t.Failed() {
			t.Logf("reaper log:\n%s", logs.String())
		}
	})

	// Started with the database down: passes fail and are retried.
	require.Eventually(t, func() bool { return bytes.Contains([]byte(logs.String()), []byte("database unavailable")) },
		10*time.Second, 50*time.Millisecond, "no failed pass was logged")
	require.NoError(t, c.Start(ctx))
	abandon("k0")
	requireDone("k0")

	// Restarted under a running reaper.
	for i := 1; i <= 2; i++ {
		failed := strings.Count(logs.String(), "database unavailable")
		require.NoError(t, c.Stop())
		testsignal.WaitFor(t, 10*time.Second, func() bool { return strings.Count(logs.String(), "database unavailable") > failed+1 },
			"no pass failed while the database was away")
		require.NoError(t, c.Start(ctx))
		key := fmt.Sprintf("k%d", i)
		abandon(key)
		requireDone(key)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned while the database was away: %v", err)
	default:
	}
}
