// Package telemetry sets up a process's OpenTelemetry meter provider with
// the Prometheus exporter, so that /metrics serves every instrument.
package telemetry

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Metrics is a process's meter provider and the /metrics handler that
// exposes it. Each process (and each in-process test server) has its own
// registry, so two servers in one test binary do not share counters.
type Metrics struct {
	Provider *sdkmetric.MeterProvider
	Handler  http.Handler
}

// NewMetrics returns a meter provider exported through Prometheus.
func NewMetrics() (*Metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	return &Metrics{
		Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		Handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// Meter returns the named meter.
func (m *Metrics) Meter(name string) metric.Meter { return m.Provider.Meter(name) }

// Shutdown flushes and stops the provider.
func (m *Metrics) Shutdown(ctx context.Context) error { return m.Provider.Shutdown(ctx) }
