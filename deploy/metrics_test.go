package deploy_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// /metrics was served on the public API port: whatever reached the API
// (nginx, the Service, a client) could read the process's internals. Every
// deployed API serves it on METRICS_ADDR, a port of its own that differs
// from API_ADDR's; on Kubernetes that port is declared on the container
// and left out of the Service, and Prometheus scrapes the pods.
func TestDeployedAPIServesMetricsOffItsPort(t *testing.T) {
	t.Parallel()
	apis := 0
	for _, c := range allAppContainers(t) {
		if c.binary() != "api" || !c.serves() {
			continue
		}
		apis++
		mp, ok := c.envPort("METRICS_ADDR")
		if !assert.True(t, ok, "%s: METRICS_ADDR is not set: /metrics would be on the API port", c.where) {
			continue
		}
		lp, _ := c.listenPort()
		assert.NotEqual(t, lp, mp, "%s: METRICS_ADDR must be another port than API_ADDR", c.where)
		if c.system == "k8s" {
			assert.Contains(t, slices.Collect(maps.Values(c.ports)), mp, "%s: the metrics port is not a container port", c.where)
		}
	}
	require.Positive(t, apis, "no api containers found")

	for _, s := range loadK8s(t).services {
		if s.Metadata.Name != "api" {
			continue
		}
		for _, p := range s.Spec.Ports {
			assert.NotEqual(t, "metrics", string(p.TargetPort), "Service api exposes the metrics port")
			assert.NotEqual(t, "9092", string(p.TargetPort), "Service api exposes the metrics port")
		}
	}
}
