// Package httpapi is phasepay's HTTP surface: the router, its middleware,
// the charges handlers and the one table that turns errors into problem
// responses. The work itself is in internal/charges.
package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// MaxBodyBytes is the largest request body accepted (413 beyond).
const MaxBodyBytes = 64 << 10

// Config is what the handler needs.
type Config struct {
	Pool    *pgxpool.Pool
	Charges *charges.Service
	// Telemetry provides the tracer, meter, propagators and GET /metrics.
	Telemetry *telemetry.Telemetry
	Logger    *slog.Logger
	// RunTimeout bounds one charge run. A run is detached from its client's
	// connection: a client that hangs up does not abort a charge half way;
	// the run finishes and stores its response for the client's retry.
	// Default 30s.
	RunTimeout time.Duration
	// AuthCacheTTL is how long a known API key is trusted without asking
	// the database again; a deleted key keeps working that long. Default
	// 30s; negative disables the cache.
	AuthCacheTTL time.Duration
	// Authenticator, if set, replaces the one built from Pool and
	// AuthCacheTTL: the api passes one kept true to revocations by a
	// tenants.RevocationListener.
	Authenticator *tenants.Authenticator
	// MetricsElsewhere leaves GET /metrics off this handler: the process
	// serves it on a listener of its own (METRICS_ADDR), away from the
	// public API port.
	MetricsElsewhere bool
	// ServerAddr is the configured listen address (host:port), reported as
	// server.address and server.port on request metrics. Never the
	// client's Host header (otelhttp's choice otherwise): any client
	// could then mint new metric series at will. Default
	// "phasepay-api:0" (port 0: no server.port).
	ServerAddr string
	// WebhookAllowPrivate (WEBHOOK_ALLOW_PRIVATE=1) accepts webhook
	// endpoint URLs on loopback, private and link-local addresses.
	// Development only (chargectl listen).
	WebhookAllowPrivate bool
	// WebhookGuard, if set, replaces the guard built from
	// WebhookAllowPrivate (tests: a resolver of their own).
	WebhookGuard *webhooks.Guard
	// PSPWebhookSecrets are the webhook secrets of the PSPs whose own
	// webhooks POST /v1/psp_webhooks/{psp} accepts (Stripe PSPs with
	// PSP_<NAME>_WEBHOOK_SECRET), by PSP name.
	PSPWebhookSecrets map[string]string
}

// NewHandler returns the service's http.Handler.
func NewHandler(cfg Config) (http.Handler, error) {
	if cfg.ServerAddr == "" {
		cfg.ServerAddr = "phasepay-api:0"
	}
	r, err := newRouter(cfg)
	if err != nil {
		return nil, err
	}
	// Outermost, so the request's span is in the context of everything
	// below, the request log line included. It extracts the caller's W3C
	// trace context.
	in, err := newInstrumentation(cfg.Telemetry, cfg.ServerAddr)
	if err != nil {
		return nil, err
	}
	return in.handler(r), nil
}

// newRouter returns the router of every route NewHandler serves, without
// the tracing around it.
func newRouter(cfg Config) (*chi.Mux, error) {
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Every line logged with a request's context carries its trace id.
	if _, ok := cfg.Logger.Handler().(*telemetry.LogHandler); !ok {
		cfg.Logger = slog.New(telemetry.NewLogHandler(cfg.Logger.Handler()))
	}
	if cfg.AuthCacheTTL == 0 {
		cfg.AuthCacheTTL = 30 * time.Second
	}
	if cfg.WebhookGuard == nil {
		cfg.WebhookGuard = webhooks.NewGuard(cfg.WebhookAllowPrivate)
	}
	// The webhook endpoints' optional Idempotency-Key: claim and finish in
	// one transaction, so the lease and schedule never come into play.
	keys, err := idempotency.NewStore(idempotency.Config{})
	if err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, log: cfg.Logger, auth: cfg.Authenticator, keys: keys}
	if s.auth == nil {
		s.auth = tenants.NewAuthenticator(cfg.Pool, cfg.AuthCacheTTL)
	}

	r := chi.NewRouter()
	r.Use(requestID, s.logRequests, s.recoverPanics, nameRoute)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errRouteNotFound)
	})
	// chi's own 405 handler sets Allow, but a custom one is not told the
	// methods: allowedMethods asks the router.
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allow := allowedMethods(r, req)
		if allow == "" {
			// A method chi does not know, on a path no method serves.
			s.writeError(w, req, errRouteNotFound)
			return
		}
		w.Header().Set("Allow", allow)
		s.writeError(w, req, errMethodNotAllowed)
	})
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok\n") })
	r.Get("/readyz", s.ready)
	if !cfg.MetricsElsewhere {
		r.Method(http.MethodGet, "/metrics", cfg.Telemetry.MetricsHandler)
	}
	r.Route("/v1", func(r chi.Router) {
		r.Use(s.authenticate, limitBody)
		// Every route's parameters are checked before its handler runs
		// (checkParams, routeParams in params.go).
		route := func(method, pattern string, h http.HandlerFunc) {
			r.Method(method, pattern, s.checkParams(method, "/v1"+pattern, h))
		}
		route(http.MethodPost, "/charges", s.createCharge)
		route(http.MethodGet, "/charges", s.listCharges)
		route(http.MethodGet, "/charges/{id}", s.getCharge)
		route(http.MethodPost, "/charges/{id}/capture", s.captureCharge)
		route(http.MethodPost, "/charges/{id}/void", s.voidCharge)
		route(http.MethodPost, "/refunds", s.createRefund)
		route(http.MethodGet, "/refunds", s.listRefunds)
		route(http.MethodGet, "/refunds/{id}", s.getRefund)
		route(http.MethodGet, "/idempotency_keys", s.listKeys)
		route(http.MethodGet, "/idempotency_keys/{key}/timeline", s.getKeyTimeline)
		route(http.MethodGet, "/idempotency_keys/*", s.getKey)
		route(http.MethodGet, "/events", s.listEvents)
		route(http.MethodGet, "/events/{id}", s.getEvent)
		route(http.MethodGet, "/events/{id}/deliveries", s.listEventDeliveries)
		route(http.MethodPost, "/events/{id}/redeliver", s.redeliverEvent)
		route(http.MethodPost, "/webhook_endpoints", s.createWebhookEndpoint)
		route(http.MethodGet, "/webhook_endpoints", s.listWebhookEndpoints)
		route(http.MethodDelete, "/webhook_endpoints/{id}", s.deleteWebhookEndpoint)
		route(http.MethodPost, "/psp_webhooks/{psp}", s.pspWebhook)
	})
	return r, nil
}

// nameRoute names the request's span after the route it matched (known
// only once chi has routed it), e.g. "GET /v1/charges/{id}", and labels its
// request metrics with that pattern as http.route (instrument.go reads it
// from the requestInfo). chi sets http.Request.Pattern only on its own copy
// of the request, which the instrumentation around it never sees; and the
// raw path must never be a label: every charge id would be a new series.
func nameRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if pattern := chi.RouteContext(r.Context()).RoutePattern(); pattern != "" {
			route := attribute.String("http.route", pattern)
			// A span that records nothing (tracing off) ignores its name
			// and attributes; the check spares building them.
			if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
				span.SetName(r.Method + " " + pattern)
				span.SetAttributes(route)
			}
			if ri, ok := r.Context().Value(infoKey{}).(*requestInfo); ok {
				ri.route = pattern
			}
		}
	})
}

// allowedMethods lists, for an Allow header, the methods routes has a
// route for at req's path.
func allowedMethods(routes chi.Routes, req *http.Request) string {
	path := req.URL.RawPath
	if path == "" {
		path = req.URL.Path
	}
	var allow []string
	for _, m := range []string{
		http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace,
	} {
		if routes.Match(chi.NewRouteContext(), m, path) {
			allow = append(allow, m)
		}
	}
	return strings.Join(allow, ", ")
}

type server struct {
	cfg  Config
	log  *slog.Logger
	auth *tenants.Authenticator
	keys *idempotency.Store
}

func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Pool.Ping(ctx); err != nil {
		// A problem like every error, but not through writeError: a
		// readiness probe failing every few seconds during an outage is
		// its answer, not an internal error to log.
		p := problem.New(http.StatusServiceUnavailable, problem.DatabaseUnavailable, "PostgreSQL does not answer.")
		p.RequestID = middleware.GetReqID(r.Context())
		problem.Write(w, p)
		return
	}
	writeText(w, http.StatusOK, "ok\n")
}

func writeText(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// authenticate resolves the bearer key to a tenant.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isPSPWebhook(r) {
			// A PSP's own webhook: the PSP's signature, checked by its
			// handler, stands for the key (pspwebhooks.go).
			next.ServeHTTP(w, r)
			return
		}
		// Exactly one field: with two, r.Header.Get would pick the first,
		// while a proxy or the client's own log may go by the second.
		fields := r.Header.Values("Authorization")
		if len(fields) != 1 {
			s.writeError(w, r, tenants.ErrUnauthorized)
			return
		}
		// The scheme is case-insensitive (RFC 9110, 11.1).
		scheme, secret, ok := strings.Cut(fields[0], " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			s.writeError(w, r, tenants.ErrUnauthorized)
			return
		}
		t, err := s.auth.Authenticate(r.Context(), strings.TrimSpace(secret))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		info(r.Context()).tenant = t.Name
		next.ServeHTTP(w, r.WithContext(tenants.NewContext(r.Context(), t)))
	})
}

func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// requestInfo collects what the request log line reports, filled in by
// handlers as they learn it, and the route the request metrics are
// labelled with (nameRoute).
type requestInfo struct {
	tenant  string
	outcome string
	route   string
}

type infoKey struct{}

func info(ctx context.Context) *requestInfo {
	if i, ok := ctx.Value(infoKey{}).(*requestInfo); ok {
		return i
	}
	return &requestInfo{}
}

// logRequests writes one JSON line per request, with the request and trace
// ids. It never logs headers or bodies: they carry API keys and card data.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// requestID, first in the chain, put the requestInfo in the
		// context with the request id, sparing a copy of the request here.
		ri, ok := r.Context().Value(infoKey{}).(*requestInfo)
		if !ok {
			ri = &requestInfo{}
			r = r.WithContext(context.WithValue(r.Context(), infoKey{}, ri))
		}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		attrs := make([]slog.Attr, 0, 8)
		attrs = append(attrs,
			slog.String("method", r.Method),
			slog.String("route", chi.RouteContext(r.Context()).RoutePattern()),
			slog.Int("status", ww.Status()),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			slog.String("request_id", middleware.GetReqID(r.Context())),
		)
		// The raw path only of a tenant's own requests: anyone else's
		// would be whatever an unauthenticated client chose to write
		// into the logs.
		if ri.tenant != "" {
			attrs = append(attrs, slog.String("path", r.URL.Path), slog.String("tenant", ri.tenant))
		}
		if ri.outcome != "" {
			attrs = append(attrs, slog.String("key_outcome", ri.outcome))
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	})
}

// recoverPanics turns a panic into a 500 problem and a logged stack.
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "panic", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				s.writeError(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
