package main

// MetricsAddr returns the metrics listener's address once Run serves it
// (METRICS_ADDR set), else "".
func (m *Main) MetricsAddr() string { return m.metrics.Addr() }
