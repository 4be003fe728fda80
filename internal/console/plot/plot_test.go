package plot_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/console/plot"
)

func TestDurationIsShortAndExact(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 250 * time.Millisecond: "250ms", 1500 * time.Millisecond: "1.5s", 70 * time.Second: "1m10s",
		10 * time.Minute: "10m", 65 * time.Minute: "1h5m", time.Hour: "1h", 90 * time.Second: "1m30s",
	} {
		require.Equal(t, want, plot.Duration(d), "%s", d)
	}
}

func TestTicksAreRoundAndCoverTheSpan(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(0, 0)
	ticks := plot.TimeTicks(plot.TimeScale{T0: t0, T1: t0.Add(95 * time.Second), R0: 100, R1: 1100}, 10)
	require.Equal(t, "+0s", ticks[0].Label)
	require.InDelta(t, 100.0, ticks[0].At, 1e-9)
	require.Equal(t, "+10s", ticks[1].Label)
	require.Len(t, ticks, 10)
	require.LessOrEqual(t, ticks[len(ticks)-1].At, 1100.0)

	require.Equal(t, []float64{0, 2, 4, 6, 8}, plot.ValueTicks(7.3, 4))
	require.Equal(t, []float64{0, 50, 100, 150}, plot.ValueTicks(120, 3))
	require.Equal(t, "12.3k", plot.Number(12345))
	require.Equal(t, "561", plot.Number(561.332))
	require.Equal(t, "0.13", plot.Number(0.125))
}

func TestScalesMapTheirDomain(t *testing.T) {
	t.Parallel()
	s := plot.Scale{D0: 0, D1: 10, R0: 100, R1: 0}
	require.InDelta(t, 50.0, s.At(5), 1e-9)
	require.InDelta(t, 100.0, plot.Scale{D0: 3, D1: 3, R0: 100, R1: 0}.At(3), 1e-9, "a domain of no width")
	t0 := time.Unix(0, 0)
	ts := plot.TimeScale{T0: t0, T1: t0.Add(time.Second), R0: 0, R1: 1000}
	require.InDelta(t, 1000.0, ts.At(t0.Add(time.Hour)), 1e-9, "clamped")
	require.InDelta(t, 4.0, ts.Width(time.Millisecond, 4), 1e-9, "at least the minimum")
	require.Equal(t, "1.0,2.0 3.0,4.0", plot.Points([]float64{1, 3}, []float64{2, 4}))
}

// Labels stay inside their band (moved in from an edge, never clipped),
// never overlap in a row, go to the next row when the first is taken, and
// are left out, lowest priority first, when no row has room.
func TestLabelsArePlacedInsideAndApart(t *testing.T) {
	t.Parallel()
	placed := plot.PlaceLabels([]plot.Label{
		{X: 995, Width: 60},               // at the right edge
		{X: 5, Width: 60},                 // at the left edge
		{X: 500, Width: 100},              // in the middle
		{X: 510, Width: 100},              // on top of it: the next row
		{X: 505, Width: 100},              // no room left
		{X: 520, Width: 100, Priority: 1}, // no room either, but first served
	}, 0, 1000, 2, 4)
	require.Equal(t, plot.Placed{Left: 940, Row: 0}, placed[0])
	require.Equal(t, plot.Placed{Left: 0, Row: 0}, placed[1])
	require.Equal(t, 1, placed[2].Row, "the first row went to the label of higher priority")
	require.Equal(t, -1, placed[3].Row)
	require.Equal(t, -1, placed[4].Row)
	require.Equal(t, plot.Placed{Left: 470, Row: 0}, placed[5])
	require.InDelta(t, 62.0, plot.TextWidth("0123456789", 10), 1e-9)
}
