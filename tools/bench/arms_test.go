package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An arm measured in slices is their sum: throughput over the time the
// slices ran, CPU per request over all their requests.
func TestArmSumsItsSlices(t *testing.T) {
	t.Parallel()
	st := &armStack{slices: []armRun{
		{LoadResult: LoadResult{Clients: 8, Requests: 100, PerSec: 200, CPU: &CPUCost{Database: 1}, Statuses: map[int]int{201: 100}}, apiCPU: 50},
		{LoadResult: LoadResult{Clients: 8, Requests: 300, PerSec: 600, CPU: &CPUCost{Database: 2}, Statuses: map[int]int{201: 300, 500: 1}}, apiCPU: 150},
	}}
	r := st.run()
	require.Equal(t, 400, r.Requests)
	require.InDelta(t, 400.0, r.PerSec, 1e-9, "400 answers in 0.5 s + 0.5 s")
	require.InDelta(t, 1.75, r.CPU.Database, 1e-9)
	require.InDelta(t, 0.5, r.apiCPU, 1e-9, "200 ms over 400 requests")
	require.Equal(t, map[int]int{201: 400, 500: 1}, r.Statuses)
}

// A step reports the median of its pairs and their range.
func TestPairsMedianAndRange(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 0.009, medianFloat([]float64{0.003, 0.015, 0.085, -0.071}), 1e-9)
	require.InDelta(t, 0.02, medianFloat([]float64{0.05, 0.02, -0.01}), 1e-9)
	require.Zero(t, medianFloat(nil))
	p := Pairs{Costs: []float64{0.06, -0.014}, Min: -0.014, Max: 0.06}
	require.Equal(t, "2 pairs -1.4% to 6.0%", p.span())
	require.Equal(t, "6.0%, -1.4%", p.list())
}
