// Package telemetry sets up a process's OpenTelemetry once, from the
// standard OTEL_* environment variables: a tracer provider whose exporter
// OTEL_TRACES_EXPORTER chooses (otlp, console or none; none when unset, so a
// plain run prints no spans), the W3C trace-context propagators, and a meter
// provider exported through Prometheus for /metrics. Exporters and
// propagation are the OpenTelemetry libraries'; nothing here is written by
// hand but the wiring.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/propagators/autoprop"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Telemetry is one process's providers.
type Telemetry struct {
	Tracer     trace.TracerProvider
	Meter      metric.MeterProvider
	Propagator propagation.TextMapPropagator
	// MetricsHandler serves the Prometheus exposition of every instrument.
	MetricsHandler http.Handler

	shutdown []func(context.Context) error
}

// New builds the providers. They are not installed as OpenTelemetry's
// globals: every instrumented library here takes them explicitly, so that
// tests can run several in-process servers, each with its own.
func New(ctx context.Context, service string) (*Telemetry, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
		resource.WithProcessPID(),
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	t := &Telemetry{Propagator: autoprop.NewTextMapPropagator()}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	t.MetricsHandler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})

	// OTEL_SDK_DISABLED=true turns the SDK off, metrics included, as the
	// specification says: no-op providers, whose instruments cost nothing
	// per request. /metrics then shows the Go runtime's and the process's
	// collectors only. make bench measures the instrumentation's cost
	// against this.
	if os.Getenv("OTEL_SDK_DISABLED") == "true" {
		t.Tracer = tracenoop.NewTracerProvider()
		t.Meter = metricnoop.NewMeterProvider()
		return t, nil
	}

	if os.Getenv("OTEL_TRACES_EXPORTER") == "" {
		t.Tracer = tracenoop.NewTracerProvider()
	} else {
		exporter, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER: %w", err)
		}
		if autoexport.IsNoneSpanExporter(exporter) {
			t.Tracer = tracenoop.NewTracerProvider()
		} else {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
			t.Tracer = tp
			t.shutdown = append(t.shutdown, tp.Shutdown)
		}
	}

	promExporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(promExporter), sdkmetric.WithResource(res))
	t.Meter = mp
	t.shutdown = append(t.shutdown, mp.Shutdown)
	return t, nil
}

// Shutdown flushes spans and metrics; call it once at exit.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
