package tenants_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// listenerBundle is an Authenticator with a running RevocationListener on a
// fresh database.
type listenerBundle struct {
	pool     *pgxpool.Pool
	db       *countingDB
	auth     *tenants.Authenticator
	listener *tenants.RevocationListener
	// connects counts the listener's connection attempts.
	connects atomic.Int64
	// gate, when set, is waited on by every connection attempt after the
	// first: a test holds the listener disconnected with it.
	gate chan struct{}
}

func setupListener(t *testing.T, cfg tenants.RevocationListenerConfig, gated bool) *listenerBundle {
	t.Helper()
	url := testdb.NewURL(t)
	b := &listenerBundle{pool: testdb.Pool(t, url, time.Time{})}
	if gated {
		b.gate = make(chan struct{})
	}
	b.db = &countingDB{DBTX: b.pool}
	b.auth = tenants.NewAuthenticator(b.db, time.Minute)
	connCfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	connCfg.RuntimeParams["application_name"] = tenants.ListenerApplicationName
	cfg.Connect = func(ctx context.Context) (*pgx.Conn, error) {
		if b.connects.Add(1) > 1 && b.gate != nil {
			select {
			case <-b.gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return pgx.ConnectConfig(ctx, connCfg)
	}
	b.listener, err = tenants.NewRevocationListener(b.auth, cfg)
	require.NoError(t, err)
	b.listener.TestSignals.Init(t)
	require.NoError(t, b.listener.Start(context.Background()))
	require.False(t, b.auth.Caching(), "no cache before the listener listens")
	t.Cleanup(b.listener.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.listener.WaitListening(ctx))
	return b
}

// requireCached authenticates secret twice and checks that only the first
// reached the database.
func (b *listenerBundle) requireCached(t *testing.T, secret string) {
	t.Helper()
	before := b.db.n.Load()
	for range 2 {
		_, err := b.auth.Authenticate(t.Context(), secret)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, b.db.n.Load()-before, "the key is cached after one lookup")
}

// requireRefusedWithin waits for the listener to hear that secret was
// revoked, failing if that takes d or more, and checks it is then refused.
func (b *listenerBundle) requireRefusedWithin(t *testing.T, secret string, d time.Duration) {
	t.Helper()
	start := time.Now()
	sum := sha256.Sum256([]byte(secret))
	want := hex.EncodeToString(sum[:])
	for b.listener.TestSignals.Notified.WaitOrTimeout() != want {
	}
	heard := time.Since(start)
	require.Less(t, heard, d, "the revocation was heard too late")
	_, err := b.auth.Authenticate(t.Context(), secret)
	require.ErrorIs(t, err, tenants.ErrUnauthorized)
	t.Logf("refused after %s", heard)
}

func TestRevocationListenerEvictsRevokedKey(t *testing.T) {
	t.Parallel()
	b := setupListener(t, tenants.RevocationListenerConfig{}, false)
	secret, id := createKey(t, b.pool, "acme")
	other, _ := createKey(t, b.pool, "acme")
	b.requireCached(t, secret)
	b.requireCached(t, other)

	_, _, err := tenants.RevokeKey(t.Context(), b.pool, id)
	require.NoError(t, err)
	b.requireRefusedWithin(t, secret, time.Second)
	before := b.db.n.Load()
	_, err = b.auth.Authenticate(t.Context(), other)
	require.NoError(t, err)
	require.Equal(t, before, b.db.n.Load(), "a revocation evicts its own key, not the others")
}

// TestRevocationListenerReconnects: when the listener's backend is
// terminated (as in a PostgreSQL restart), revocations made while it is
// away are lost with it; the cache must not serve a key revoked then, and
// once reconnected the listener evicts again.
func TestRevocationListenerReconnects(t *testing.T) {
	t.Parallel()
	b := setupListener(t, tenants.RevocationListenerConfig{MinBackoff: 10 * time.Millisecond}, true)
	ctx := t.Context()
	secret, id := createKey(t, b.pool, "acme")
	other, otherID := createKey(t, b.pool, "acme")
	b.requireCached(t, secret)
	b.requireCached(t, other)

	var terminated int
	require.NoError(t, b.pool.QueryRow(ctx, `
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = $1`, tenants.ListenerApplicationName).Scan(&terminated))
	require.Equal(t, 1, terminated)
	require.Eventually(t, func() bool { return !b.auth.Caching() }, 5*time.Second, time.Millisecond,
		"the listener must notice its connection is gone")

	// Held disconnected by the gate: this revocation's notification is
	// lost, and the key is refused all the same.
	_, _, err := tenants.RevokeKey(ctx, b.pool, id)
	require.NoError(t, err)
	_, err = b.auth.Authenticate(ctx, secret)
	require.ErrorIs(t, err, tenants.ErrUnauthorized)
	before := b.db.n.Load()
	for range 2 {
		_, err = b.auth.Authenticate(ctx, other)
		require.NoError(t, err)
	}
	require.EqualValues(t, 2, b.db.n.Load()-before, "nothing is cached while the listener is away")

	close(b.gate)
	require.Eventually(t, b.auth.Caching, 10*time.Second, time.Millisecond, "the listener must reconnect")
	b.requireCached(t, other)
	_, _, err = tenants.RevokeKey(ctx, b.pool, otherID)
	require.NoError(t, err)
	b.requireRefusedWithin(t, other, time.Second)
	require.GreaterOrEqual(t, b.connects.Load(), int64(2))
}

// TestRevocationListenerSurvivesQuietPeriods: the health check that runs
// after HealthInterval without notifications leaves the connection usable,
// so a quiet listener neither reconnects nor goes deaf.
func TestRevocationListenerSurvivesQuietPeriods(t *testing.T) {
	t.Parallel()
	b := setupListener(t, tenants.RevocationListenerConfig{HealthInterval: 20 * time.Millisecond}, false)
	secret, id := createKey(t, b.pool, "acme")
	for range 3 {
		require.NoError(t, b.listener.TestSignals.HealthChecked.WaitOrTimeout(), "a health check failed")
	}
	b.requireCached(t, secret)
	_, _, err := tenants.RevokeKey(t.Context(), b.pool, id)
	require.NoError(t, err)
	b.requireRefusedWithin(t, secret, time.Second)
	require.EqualValues(t, 1, b.connects.Load(), "no reconnection")
}

// TestRevocationListenerStartsWithoutDatabase: when the first attempt to
// listen fails (the database is away at start), WaitListening says so at
// once rather than holding the process up, the cache stays off, and the
// listener keeps trying until it listens.
func TestRevocationListenerStartsWithoutDatabase(t *testing.T) {
	t.Parallel()
	url := testdb.NewURL(t)
	pool := testdb.Pool(t, url, time.Time{})
	auth := tenants.NewAuthenticator(pool, time.Minute)
	var attempts atomic.Int64
	l, err := tenants.NewRevocationListener(auth, tenants.RevocationListenerConfig{
		MinBackoff: 10 * time.Millisecond,
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			if attempts.Add(1) <= 3 {
				return nil, errors.New("connection refused (test)")
			}
			return pgx.Connect(ctx, url)
		},
	})
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(l.Stop)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.ErrorContains(t, l.WaitListening(ctx), "connection refused (test)")
	require.NoError(t, ctx.Err(), "WaitListening returns with the first failure")
	require.Eventually(t, auth.Caching, 10*time.Second, time.Millisecond, "the listener must keep trying")
	require.GreaterOrEqual(t, attempts.Load(), int64(4))
}
