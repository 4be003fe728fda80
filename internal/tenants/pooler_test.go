package tenants_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Pitfall: the revocation listener LISTENed on a connection to
// DATABASE_URL. Through a transaction pooler the LISTEN runs on whichever
// server connection is free, which goes back to the pooler's pool when the
// statement ends: the notification never reaches the listener, which
// believes it listens and keeps the revoked key cached for the cache's
// 30 s. Without a direct connection (DATABASE_DIRECT_URL) the listener
// polls recent revocations through the pooler instead, and the key is
// refused within the contract's second.
func TestRevocationsBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	direct := testdb.Pool(t, dbURL, time.Time{})
	b := pgbouncer.ForTest(t, pgbouncer.Config{Server: dbURL, PoolSize: 3})
	cfg, err := dbpool.Config{URL: b.URL(dbURL), Pooler: dbpool.PoolerTransaction}.PoolConfig()
	require.NoError(t, err)
	pooled, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pooled.Close)

	// The pitfall: a LISTEN through the pooler hears nothing.
	through, err := pgx.Connect(ctx, b.URL(dbURL))
	require.NoError(t, err)
	defer through.Close(ctx)
	_, err = through.Exec(ctx, "LISTEN "+tenants.RevocationChannel)
	require.NoError(t, err, "the pooler lets the LISTEN through")
	_, err = direct.Exec(ctx, `SELECT pg_notify($1, 'x')`, tenants.RevocationChannel)
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = through.WaitForNotification(waitCtx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a notification reached a LISTEN made through the pooler")

	// Polling through the pooler: refused within a second.
	db := &countingDB{DBTX: pooled}
	auth := tenants.NewAuthenticator(db, time.Minute)
	l, err := tenants.NewRevocationListener(auth, tenants.RevocationListenerConfig{Poll: pooled})
	require.NoError(t, err)
	require.True(t, l.Polling())
	l.TestSignals.Init(t)
	require.NoError(t, l.Start(ctx))
	t.Cleanup(l.Stop)
	require.NoError(t, l.WaitListening(ctx))
	lb := &listenerBundle{pool: direct, db: db, auth: auth, listener: l}
	secret, id := createKey(t, direct, "acme")
	other, _ := createKey(t, direct, "acme")
	lb.requireCached(t, secret)
	lb.requireCached(t, other)
	stillCached := func() {
		t.Helper()
		before := db.n.Load()
		_, err := auth.Authenticate(ctx, other)
		require.NoError(t, err)
		require.Equal(t, before, db.n.Load(), "another key stays cached")
	}
	// nextPoll waits for a poll that ends after it is called.
	nextPoll := func() {
		for _, ok := l.TestSignals.Polled.Next(); ok; _, ok = l.TestSignals.Polled.Next() {
		}
		l.TestSignals.Polled.WaitOrTimeout()
	}
	for range 3 {
		nextPoll()
		stillCached()
	}
	_, _, err = tenants.RevokeKey(ctx, direct, id)
	require.NoError(t, err)
	lb.requireRefusedWithin(t, secret, time.Second)
	for range 3 {
		// Polls drop the revoked key, never the others.
		nextPoll()
		stillCached()
	}
}
