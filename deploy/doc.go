// Package deploy holds no code: it is the home of the observability
// configuration (OpenTelemetry Collector, Prometheus rules, Grafana dashboard)
// and of deploy_test.go, which checks those files' structure, and of the
// deployment manifests (Dockerfile, docker-compose.yml, the Kubernetes base in
// k8s/) with manifests_test.go, which checks them against the code.
package deploy
