// Package deploy holds no code: it is the home of the observability
// configuration (OpenTelemetry Collector, Prometheus rules, Grafana dashboard)
// and of deploy_test.go, which checks those files' structure.
package deploy
