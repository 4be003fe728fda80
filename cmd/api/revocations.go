package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/tenants"
)

// ListenerStartTimeout bounds how long Run waits for the revocation
// listener's first attempt to LISTEN before serving anyway. Until it
// listens the key cache is off, so serving early is safe, only slower.
const ListenerStartTimeout = 5 * time.Second

// listenerConnectTimeout bounds one connection attempt of the listener.
const listenerConnectTimeout = 10 * time.Second

// startRevocationListener returns the API's Authenticator, kept true to
// revocations by a RevocationListener, and the function that stops the
// listener. The listener LISTENs on a connection of its own to the server
// itself (DATABASE_URL, or DATABASE_DIRECT_URL behind a transaction
// pooler), or, behind a pooler with no direct URL, polls recent
// revocations through the pool. It waits for the listener's first attempt
// (up to ListenerStartTimeout), so that the cache is in use from the first
// request; if that attempt fails (the database is away at start) the api
// serves and the listener keeps trying.
func (m *Main) startRevocationListener(ctx context.Context, pool *pgxpool.Pool) (*tenants.Authenticator, func(), error) {
	auth := tenants.NewAuthenticator(pool, tenants.CacheTTLDefault)
	cfg := tenants.RevocationListenerConfig{Poll: pool, Logger: m.Logger}
	if direct := m.Config.database().Direct(); direct != "" {
		base, err := pgx.ParseConfig(direct)
		if err != nil {
			return nil, nil, fmt.Errorf("direct database URL: %w", err)
		}
		if !strings.Contains(direct, "connect_timeout") {
			base.ConnectTimeout = dbpool.ConnectTimeoutDefault
		}
		base.RuntimeParams["application_name"] = tenants.ListenerApplicationName
		cfg.Connect = func(ctx context.Context) (*pgx.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, listenerConnectTimeout)
			defer cancel()
			return pgx.ConnectConfig(ctx, base.Copy())
		}
	}
	l, err := tenants.NewRevocationListener(auth, cfg)
	if err != nil {
		return nil, nil, err
	}
	// Not ctx: requests still in flight during the graceful shutdown are
	// authenticated against a cache that must stay true to revocations.
	if err := l.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, ListenerStartTimeout)
	defer cancel()
	if err := l.WaitListening(waitCtx); err != nil {
		m.Logger.Warn("serving before the api key revocation listener listens; the key cache is off until it does", "error", err.Error())
	}
	m.mu.Lock()
	m.auth = auth
	m.mu.Unlock()
	return auth, l.Stop, nil
}

// authenticator returns the Authenticator Run made (tests only).
func (m *Main) authenticator() *tenants.Authenticator {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.auth
}
