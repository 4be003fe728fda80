package routing

import (
	"fmt"
	"log/slog"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/stripepsp"
	"github.com/phasepay/phasepay/internal/telemetry"
)

// TracedClient returns a PSP client whose calls are traced and carry the W3C
// trace context to the PSP, so one trace spans both processes. Its
// transport is psp.NewTransport, which never resends a request by itself
// (net/http would, for any request carrying an Idempotency-Key): every PSP
// request is sent exactly as often as the psp client decides.
func TracedClient(baseURL string, tel *telemetry.Telemetry) (*psp.Client, error) {
	return psp.NewClient(psp.ClientConfig{
		BaseURL:    baseURL,
		HTTPClient: psp.NewHTTPClient(tracedTransport(tel)),
	})
}

// ClientFor returns the traced client of p in its dialect: a TracedClient
// for phasepay's own protocol, a Stripe connector (internal/psp/stripepsp)
// over the same traced transport for a Stripe PSP.
func ClientFor(p PSP, tel *telemetry.Telemetry) (Client, error) {
	if p.Stripe == nil {
		return TracedClient(p.URL, tel)
	}
	return stripepsp.New(stripepsp.Config{Name: p.Name, URL: p.URL, Settings: *p.Stripe,
		HTTPClient: psp.NewHTTPClient(tracedTransport(tel))})
}

// tracedTransport is psp.NewTransport wrapped in otelhttp on tel.
func tracedTransport(tel *telemetry.Telemetry) http.RoundTripper {
	return otelhttp.NewTransport(psp.NewTransport(),
		otelhttp.WithTracerProvider(tel.Tracer),
		otelhttp.WithMeterProvider(tel.Meter),
		otelhttp.WithPropagators(tel.Propagator),
	)
}

// NewTraced returns the Router over cfg's PSPs, each its ClientFor, with
// its breakers and per-PSP metrics on tel. cfg's URLs must be real (a
// process replaces Embedded with its mock's URL first).
func NewTraced(cfg Config, tel *telemetry.Telemetry, logger *slog.Logger) (*Router, error) {
	clients := map[string]Client{}
	for _, p := range cfg.PSPs {
		c, err := ClientFor(p, tel)
		if err != nil {
			return nil, fmt.Errorf("psp %s: %w", p.Name, err)
		}
		clients[p.Name] = c
	}
	return New(cfg, clients, Options{Logger: logger, MeterProvider: tel.Meter})
}
