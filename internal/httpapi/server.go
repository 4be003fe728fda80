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
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
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
}

// NewHandler returns the service's http.Handler.
func NewHandler(cfg Config) (http.Handler, error) {
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AuthCacheTTL == 0 {
		cfg.AuthCacheTTL = 30 * time.Second
	}
	s := &server{cfg: cfg, log: cfg.Logger, auth: cfg.Authenticator}
	if s.auth == nil {
		s.auth = tenants.NewAuthenticator(cfg.Pool, cfg.AuthCacheTTL)
	}

	r := chi.NewRouter()
	r.Use(middleware.RequestID, s.logRequests, s.recoverPanics, nameSpan)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errRouteNotFound)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errMethodNotAllowed)
	})
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok\n") })
	r.Get("/readyz", s.ready)
	r.Method(http.MethodGet, "/metrics", cfg.Telemetry.MetricsHandler)
	r.Route("/v1", func(r chi.Router) {
		r.Use(s.authenticate, limitBody)
		r.Post("/charges", s.createCharge)
		r.Get("/charges/{id}", s.getCharge)
		r.Get("/idempotency_keys", s.listKeys)
		r.Get("/idempotency_keys/*", s.getKey)
	})
	// Outermost, so the request's span is in the context of everything
	// below, the request log line included. It extracts the caller's W3C
	// trace context.
	return otelhttp.NewHandler(r, "http.request",
		otelhttp.WithTracerProvider(cfg.Telemetry.Tracer),
		otelhttp.WithMeterProvider(cfg.Telemetry.Meter),
		otelhttp.WithPropagators(cfg.Telemetry.Propagator),
		otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/metrics" && r.URL.Path != "/healthz" }),
	), nil
}

// nameSpan names the request's span after the route it matched (known only
// once chi has routed it), e.g. "POST /v1/charges".
func nameSpan(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if pattern := chi.RouteContext(r.Context()).RoutePattern(); pattern != "" {
			trace.SpanFromContext(r.Context()).SetName(r.Method + " " + pattern)
		}
	})
}

type server struct {
	cfg  Config
	log  *slog.Logger
	auth *tenants.Authenticator
}

func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Pool.Ping(ctx); err != nil {
		writeText(w, http.StatusServiceUnavailable, "database unavailable\n")
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
		// The scheme is case-insensitive (RFC 9110, 11.1).
		scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
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
// handlers as they learn it.
type requestInfo struct {
	tenant  string
	outcome string
}

type infoKey struct{}

func info(ctx context.Context) *requestInfo {
	if i, ok := ctx.Value(infoKey{}).(*requestInfo); ok {
		return i
	}
	return &requestInfo{}
}

// logRequests writes one JSON line per request. It never logs headers or
// bodies: they carry API keys and card data.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &requestInfo{}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), infoKey{}, ri)))
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", ww.Status()),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			slog.String("request_id", middleware.GetReqID(r.Context())),
		}
		if ri.tenant != "" {
			attrs = append(attrs, slog.String("tenant", ri.tenant))
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
