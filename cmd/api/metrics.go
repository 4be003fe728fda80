package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/phasepay/phasepay/internal/httpapi"
)

// serveMetrics serves GET /metrics on Config.MetricsAddr, a listener of its
// own, so that the public API port does not expose the process's internals
// (METRICS_ADDR). It has the API's connection limits: a scraper is a client
// like any other.
func (m *Main) serveMetrics(h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", m.Config.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	m.mu.Lock()
	m.metricsAddr = ln.Addr().String()
	m.mu.Unlock()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := httpapi.NewServer(mux, httpapi.ServerConfig{})
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("metrics listener", "error", err.Error())
		}
	}()
	m.Logger.Info("metrics listening", "addr", ln.Addr().String())
	return func() { _ = srv.Shutdown(context.Background()) }, nil
}

// MetricsAddr returns the metrics listener's address once Run serves it
// (METRICS_ADDR set), else "".
func (m *Main) MetricsAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.metricsAddr
}
