package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/phasepay/phasepay/internal/telemetry"
)

// instrumented is one handler's telemetry: its spans and metrics.
type instrumented struct {
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
	tel     *telemetry.Telemetry
}

func newInstrumented() *instrumented {
	in := &instrumented{spans: tracetest.NewSpanRecorder(), metrics: sdkmetric.NewManualReader()}
	in.tel = &telemetry.Telemetry{
		Tracer:     sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(in.spans)),
		Meter:      sdkmetric.NewMeterProvider(sdkmetric.WithReader(in.metrics)),
		Propagator: propagation.TraceContext{},
	}
	return in
}

// things is a router like the API's: a route with a parameter that reads
// its body, one that fails, chi's 404 and 405.
func things(route func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(route)
	r.Post("/v1/things/{id}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"read":%d}`, chi.URLParam(r, "id"), len(b))
	})
	r.Get("/v1/boom", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return r
}

// otelhttpRoute is nameRoute as it was with otelhttp: the route to
// otelhttp's labeler.
func otelhttpRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if pattern := chi.RouteContext(r.Context()).RoutePattern(); pattern != "" {
			if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
				span.SetName(r.Method + " " + pattern)
				span.SetAttributes(attribute.String("http.route", pattern))
			}
			if l, ok := otelhttp.LabelerFromContext(r.Context()); ok {
				l.Add(attribute.String("http.route", pattern))
			}
		}
	})
}

// The request's span and metrics are otelhttp's, attribute for attribute
// and label for label, under its instrumentation scope: what operators'
// dashboards, alerts and traces read (docs/architecture.md, deploy/)
// stays as it was when otelhttp made them.
func TestInstrumentationIsOtelhttps(t *testing.T) {
	t.Parallel()
	const serverAddr = "127.0.0.1:8080"
	old, ours := newInstrumented(), newInstrumented()
	oldHandler := otelhttp.NewHandler(things(otelhttpRoute), "http.request",
		otelhttp.WithTracerProvider(old.tel.Tracer),
		otelhttp.WithMeterProvider(old.tel.Meter),
		otelhttp.WithPropagators(old.tel.Propagator),
		otelhttp.WithServerName(serverAddr),
		otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/metrics" && r.URL.Path != "/healthz" }),
	)
	in, err := newInstrumentation(ours.tel, serverAddr)
	require.NoError(t, err)
	ourHandler := in.handler(things(nameRoute))

	requests := func() []*http.Request {
		post := httptest.NewRequest(http.MethodPost, "http://api.example/v1/things/42", strings.NewReader(`{"n":1}`))
		post.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		post.Header.Set("User-Agent", "chargectl/1")
		post.Header.Set("X-Forwarded-For", "203.0.113.9, 10.0.0.1")
		odd := httptest.NewRequest("PURGE", "http://api.example/v1/things/1", nil)
		lower := httptest.NewRequest("post", "http://api.example/v1/things/2", strings.NewReader(`{}`))
		return []*http.Request{
			post,
			httptest.NewRequest(http.MethodGet, "http://api.example/v1/boom", nil),
			httptest.NewRequest(http.MethodGet, "http://api.example/nope", nil),
			httptest.NewRequest(http.MethodGet, "http://api.example:9000/v1/things/42", nil),
			odd, lower,
			httptest.NewRequest(http.MethodGet, "http://api.example/healthz", nil),
		}
	}
	for i, r := range requests() {
		oldRec, ourRec := httptest.NewRecorder(), httptest.NewRecorder()
		oldHandler.ServeHTTP(oldRec, r)
		ourHandler.ServeHTTP(ourRec, requests()[i])
		require.Equal(t, oldRec.Code, ourRec.Code, r.URL.Path)
		require.Equal(t, oldRec.Body.String(), ourRec.Body.String(), r.URL.Path)
	}

	require.Equal(t, describeSpans(old.spans.Ended()), describeSpans(ours.spans.Ended()))
	require.Len(t, ours.spans.Ended(), 6, "every request but /healthz")
	oldMetrics, ourMetrics := describeMetrics(t, old.metrics), describeMetrics(t, ours.metrics)
	require.Equal(t, oldMetrics, ourMetrics)
	require.Contains(t, strings.Join(ourMetrics, "\n"), "http.server.request.duration")
}

// describeSpans is what a span shows an operator, one line each, in the
// order they ended.
func describeSpans(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		attrs := make([]string, 0, len(s.Attributes()))
		for _, a := range s.Attributes() {
			attrs = append(attrs, string(a.Key)+"="+a.Value.String())
		}
		slices.Sort(attrs)
		out = append(out, fmt.Sprintf("%s kind=%s status=%s/%q parent=%s scope=%s@%s attrs=%s",
			s.Name(), s.SpanKind(), s.Status().Code, s.Status().Description, s.Parent().SpanID(),
			s.InstrumentationScope().Name, s.InstrumentationScope().Version, strings.Join(attrs, ",")))
	}
	return out
}

// describeMetrics is every data point as Prometheus would expose it:
// scope, name, unit, labels, count and (for sizes) sum; a duration's sum
// differs from run to run.
func describeMetrics(t *testing.T, reader *sdkmetric.ManualReader) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var out []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			head := fmt.Sprintf("%s@%s %s [%s] %q", sm.Scope.Name, sm.Scope.Version, m.Name, m.Unit, m.Description)
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s %s count=%d bounds=%v", head, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Count, dp.Bounds))
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s %s count=%d sum=%d bounds=%v", head, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Count, dp.Sum, dp.Bounds))
				}
			default:
				out = append(out, fmt.Sprintf("%s %T", head, m.Data))
			}
		}
	}
	slices.Sort(out)
	return out
}

// BenchmarkInstrumentation serves a request through otelhttp's handler and
// through the instrumentation that replaced it, with tracing off (as
// deployed by default) and with every span sampled.
func BenchmarkInstrumentation(b *testing.B) {
	for _, tracing := range []bool{false, true} {
		tel := func() *telemetry.Telemetry {
			in := newInstrumented()
			if !tracing {
				in.tel.Tracer = noop.NewTracerProvider()
			}
			return in.tel
		}
		oldTel := tel()
		old := otelhttp.NewHandler(things(otelhttpRoute), "http.request",
			otelhttp.WithTracerProvider(oldTel.Tracer), otelhttp.WithMeterProvider(oldTel.Meter),
			otelhttp.WithPropagators(oldTel.Propagator), otelhttp.WithServerName("127.0.0.1:8080"),
			otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/metrics" && r.URL.Path != "/healthz" }))
		in, err := newInstrumentation(tel(), "127.0.0.1:8080")
		require.NoError(b, err)
		ours := in.handler(things(nameRoute))
		for _, h := range []struct {
			name    string
			handler http.Handler
		}{{"otelhttp", old}, {"phasepay", ours}} {
			b.Run(fmt.Sprintf("tracing=%t/%s", tracing, h.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					r := httptest.NewRequest(http.MethodPost, "http://api.example/v1/things/42", strings.NewReader(`{"n":1}`))
					h.handler.ServeHTTP(httptest.NewRecorder(), r)
				}
			})
		}
	}
}
