package bench

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The plots committed in docs/benchmarks are exactly what the committed
// results (tools/results/latest.json, and growth.json for the growth
// step's when latest.json has none) draw: a run that changes the
// results and not the plots, or plots edited by hand, fail here. Drawing
// is deterministic, so a redraw changes nothing but what changed.
func TestPlotsAreDrawnFromTheCommittedResults(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	r, err := ReadResults(filepath.Join(root, "tools", "results", "latest.json"))
	require.NoError(t, err)
	if r.Passes == nil {
		// The growth step's plot, from its own run (it runs alone too).
		g, err := ReadResults(filepath.Join(root, "tools", "results", PassesResults))
		require.NoError(t, err)
		require.NotNil(t, g.Passes, "%s holds the growth step's results", PassesResults)
		r.Passes = g.Passes
	}
	plots, err := r.Plots()
	require.NoError(t, err)
	again, err := r.Plots()
	require.NoError(t, err)
	require.Equal(t, plots, again, "the same results draw the same bytes")

	dir := filepath.Join(root, filepath.FromSlash(PlotDir))
	committed, err := filepath.Glob(filepath.Join(dir, "*.svg"))
	require.NoError(t, err)
	var names []string
	for _, p := range committed {
		names = append(names, filepath.Base(p))
	}
	require.ElementsMatch(t, slices.Sorted(maps.Keys(plots)), names, "%s holds the plots and nothing else", PlotDir)
	for name, want := range plots {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got),
			"%s/%s is not what tools/results/latest.json draws: run `go run ./tools/cmd/bench plot`", PlotDir, name)
	}
}
