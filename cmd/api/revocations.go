package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/tenants"
)

// ListenerStartTimeout bounds how long Run waits for the revocation
// listener's first attempt to LISTEN before serving anyway. Until it
// listens the key cache is off, so serving early is safe, only slower.
const ListenerStartTimeout = 5 * time.Second

// listenerConnectTimeout bounds one connection attempt of the listener.
const listenerConnectTimeout = 10 * time.Second

// startRevocationListener returns the API's Authenticator, kept true to
// revocations by a RevocationListener on a connection of its own to the
// pool's database, and the function that stops the listener. It waits for
// the listener's first attempt (up to ListenerStartTimeout), so that the
// cache is in use from the first request; if that attempt fails (the
// database is away at start) the api serves and the listener keeps trying.
func (m *Main) startRevocationListener(ctx context.Context, pool *pgxpool.Pool) (*tenants.Authenticator, func(), error) {
	auth := tenants.NewAuthenticator(pool, tenants.CacheTTLDefault)
	base := pool.Config().ConnConfig
	l, err := tenants.NewRevocationListener(auth, tenants.RevocationListenerConfig{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			cfg := base.Copy()
			cfg.RuntimeParams["application_name"] = tenants.ListenerApplicationName
			// A span per health check of an idle connection is noise.
			cfg.Tracer = nil
			ctx, cancel := context.WithTimeout(ctx, listenerConnectTimeout)
			defer cancel()
			return pgx.ConnectConfig(ctx, cfg)
		},
		Logger: m.Logger,
	})
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
