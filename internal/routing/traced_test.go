package routing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/routing"
	"github.com/phasepay/phasepay/internal/telemetry"
)

// The PSP receives the traceparent of the span the API called it from, so
// the PSP's own spans join the API's trace.
func TestPSPReceivesTraceparent(t *testing.T) {
	t.Parallel()
	mock, err := mockpsp.New(mockpsp.Faults{})
	require.NoError(t, err)
	var (
		mu          sync.Mutex
		traceparent string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceparent = r.Header.Get("traceparent")
		mu.Unlock()
		mock.ServeHTTP(w, r)
	}))
	defer srv.Close()

	spans := tracetest.NewSpanRecorder()
	tel, err := telemetry.New(context.Background(), "test")
	require.NoError(t, err)
	tel.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tel.Propagator = propagation.TraceContext{}
	client, err := routing.TracedClient(srv.URL, tel)
	require.NoError(t, err)

	ctx, span := tel.Tracer.Tracer("test").Start(context.Background(), "phase")
	_, err = client.Authorize(ctx, psp.AuthorizeRequest{
		IdempotencyKey: "ch_1:authorize", Amount: 1, Currency: "usd", PaymentMethod: "pm_card_visa", Reference: "ch_1",
	})
	span.End()
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, traceparent)
	require.Contains(t, traceparent, span.SpanContext().TraceID().String())
	// The client span (otelhttp) is the parent the PSP sees.
	var clientSpan sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Parent().SpanID() == span.SpanContext().SpanID() {
			clientSpan = s
		}
	}
	require.NotNil(t, clientSpan)
	require.Contains(t, traceparent, clientSpan.SpanContext().SpanID().String())
}
