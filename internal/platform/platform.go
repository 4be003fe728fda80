// Package platform opens what every phasepay process needs the same way:
// a traced PostgreSQL pool and a traced PSP client. cmd/api and cmd/reaper
// wire the rest.
package platform

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/telemetry"
)

// DatabaseURLDefault is the contract's default DATABASE_URL.
const DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/phasepay?sslmode=disable"

// PoolMaxConnsDefault is the pool size when DATABASE_URL sets none.
const PoolMaxConnsDefault = 32

// OpenPool opens a pool on url whose queries are traced.
func OpenPool(ctx context.Context, url string, tel *telemetry.Telemetry) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	// pgxpool's default (4 connections on 2 cores) caps the transactions in
	// flight, and with them group commit; unless DATABASE_URL says
	// otherwise (pool_max_conns), allow as many as a busy API has requests.
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = PoolMaxConnsDefault
	}
	cfg.ConnConfig.Tracer = otelpgx.NewTracer(
		otelpgx.WithTracerProvider(tel.Tracer),
		otelpgx.WithMeterProvider(tel.Meter),
		// Span names are the trimmed SQL by default (WithTrimSQLInSpanName
		// is deprecated for that reason).
		// Parameters carry keys and amounts, never logged: see the README.
		otelpgx.WithDisableConnectionDetailsInAttributes(),
	)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}

// PSPClient returns a PSP client whose calls are traced and carry the W3C
// trace context to the PSP, so one trace spans both processes.
func PSPClient(baseURL string, tel *telemetry.Telemetry) (*psp.Client, error) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	// The default keeps 2 idle connections per host: under load every
	// other PSP call would open (and leave in TIME_WAIT) a new connection.
	base.MaxIdleConnsPerHost = 64
	transport := otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(tel.Tracer),
		otelhttp.WithMeterProvider(tel.Meter),
		otelhttp.WithPropagators(tel.Propagator),
	)
	return psp.NewClient(psp.ClientConfig{
		BaseURL: baseURL,
		HTTPClient: &http.Client{
			Transport: transport,
			// A PSP has no business redirecting an authorization.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	})
}
