// Package deploy holds no code: it is the home of the observability
// configuration (OpenTelemetry Collector, Prometheus rules, Grafana dashboard)
// and of deploy_test.go, which checks those files' structure, and of the
// deployment manifests (Dockerfile, docker-compose.yml, the Kubernetes base in
// k8s/) with manifests_test.go, which checks them against the code.
//
// The migrate Job is named after its image's tag (migrate-<tag>), in the
// base and in the release overlay. A Job's pod template is immutable, so a
// Job of a fixed name could not be applied again with a new image.
//
//	go test ./deploy/ -run '^TestMigrateJobNameCarriesTheImageTag$'
package deploy
