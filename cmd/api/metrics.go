package main

import (
	"net/http"

	"github.com/phasepay/phasepay/internal/httpapi"
)

// serveMetrics serves GET /metrics on Config.MetricsAddr, a listener of its
// own, so that the public API port does not expose the process's internals
// (METRICS_ADDR). It has the API's connection limits: a scraper is a client
// like any other.
func (m *Main) serveMetrics(h http.Handler) (stop func(), err error) {
	addr, stop, err := httpapi.ServeMetrics(m.Config.MetricsAddr, h, m.Logger)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.metricsAddr = addr
	m.mu.Unlock()
	return stop, nil
}

// MetricsAddr returns the metrics listener's address once Run serves it
// (METRICS_ADDR set), else "".
func (m *Main) MetricsAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.metricsAddr
}
