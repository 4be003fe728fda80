package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The plots of docs/benchmarks.md, drawn from a run's results: `make
// bench` draws them after a complete run, `bench plot` from a results
// file, and TestPlotsAreDrawnFromTheCommittedResults checks that the
// committed ones are what tools/results/latest.json draws.

// PlotDir is where the plots are committed, relative to the repository
// root.
const PlotDir = "docs/benchmarks"

// ReadResults reads a results file that WriteJSON wrote.
func ReadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// series is one line of a plot.
type series struct {
	name   string
	points plotter.XYs
	dashed bool
}

// chart is one plot: its file name, titles and lines, in palette's
// colors unless colors are given.
type chart struct {
	file, title, x, y string
	logX, logY        bool
	lines             []series
	colors            []color.Color
	// xLabel writes an x tick's label; default %.4g.
	xLabel func(float64) string
}

// Plots draws every plot of the results as SVG, by file name. The same
// results always give the same bytes.
func (r *Results) Plots() (map[string][]byte, error) {
	perSec := func(ls []LoadResult) plotter.XYs { return loadXYs(ls, func(l LoadResult) float64 { return l.PerSec }) }
	p50 := func(ls []LoadResult) plotter.XYs {
		return loadXYs(ls, func(l LoadResult) float64 { return l.Latency.P50 })
	}
	charts := []chart{
		{
			file: "throughput.svg", title: "Requests per second", x: "clients", y: "requests/s", logX: true,
			lines: []series{
				{name: "new charges", points: perSec(r.NewCharges)},
				{name: "bare-new", points: perSec(r.Bare.New), dashed: true},
				{name: "replays", points: perSec(r.Replays)},
				{name: "bare-replay", points: perSec(r.Bare.Replay), dashed: true},
				{name: "captures", points: perSec(r.Captures)},
				{name: "refunds", points: perSec(r.Refunds)},
			},
		},
		{
			file: "latency.svg", title: "Median latency", x: "clients", y: "p50 ms", logX: true,
			lines: []series{
				{name: "new charges", points: p50(r.NewCharges)},
				{name: "bare-new", points: p50(r.Bare.New), dashed: true},
				{name: "replays", points: p50(r.Replays)},
				{name: "bare-replay", points: p50(r.Bare.Replay), dashed: true},
			},
		},
		{
			file: "claims.svg", title: "A claim's cost as days are kept", x: "daily partitions", y: "ms",
			lines: []series{
				{name: "claim p50", points: partitionXYs(r.ClaimByPartitions, func(p PartitionClaim) float64 { return p.ClaimP50 })},
				{name: "claim p99", points: partitionXYs(r.ClaimByPartitions, func(p PartitionClaim) float64 { return p.ClaimP99 }), dashed: true},
			},
		},
		{
			file: "growth.svg", title: "A claim's cost as keys are stored", x: "keys stored (millions)", y: "ms", logX: true,
			lines: []series{
				{name: "claim p50", points: growthXYs(r.Growth, func(g Growth) float64 { return g.ClaimP50 })},
				{name: "claim p99", points: growthXYs(r.Growth, func(g Growth) float64 { return g.ClaimP99 }), dashed: true},
				{name: "replay p50", points: growthXYs(r.Growth, func(g Growth) float64 { return g.ReplayP50 })},
			},
		},
	}
	out := map[string][]byte{}
	if r.Passes != nil && len(r.Passes.Costs) > 0 {
		// The growth step draws from its own run (tools/results/growth.json
		// when it ran alone), dated as that run.
		c := r.Passes.chart()
		b, err := c.svg(r.Passes.Machine + ", " + r.Passes.Started.UTC().Format("2006-01-02 15:04 UTC"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.file, err)
		}
		out[c.file] = b
	}
	for _, c := range charts {
		b, err := c.svg(r.Machine + ", " + r.Started.UTC().Format("2006-01-02 15:04 UTC"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.file, err)
		}
		out[c.file] = b
	}
	return out, nil
}

// WritePlots writes the plots of r into dir, replacing the ones there,
// and returns their paths.
func WritePlots(r *Results, dir string) ([]string, error) {
	plots, err := r.Plots()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, name := range slices.Sorted(maps.Keys(plots)) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, plots[name], 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func loadXYs(ls []LoadResult, y func(LoadResult) float64) plotter.XYs {
	var xys plotter.XYs
	for _, l := range ls {
		xys = append(xys, plotter.XY{X: float64(l.Clients), Y: y(l)})
	}
	return xys
}

func partitionXYs(ps []PartitionClaim, y func(PartitionClaim) float64) plotter.XYs {
	var xys plotter.XYs
	for _, p := range ps {
		xys = append(xys, plotter.XY{X: float64(p.Partitions), Y: y(p)})
	}
	return xys
}

func growthXYs(gs []Growth, y func(Growth) float64) plotter.XYs {
	var xys plotter.XYs
	for _, g := range gs {
		xys = append(xys, plotter.XY{X: float64(g.Keys) / 1e6, Y: y(g)})
	}
	return xys
}

// palette: one color per line, in order, distinguishable in print.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// passesPalette: one color per pass of the passes plot.
var passesPalette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
}

// svg draws the chart, with note (the machine and the time) under it.
func (c chart) svg(note string) ([]byte, error) {
	p, err := c.plot(note)
	if err != nil {
		return nil, err
	}
	canvas := vgsvg.NewWith(vgsvg.UseWH(6*vg.Inch, 3.6*vg.Inch), vgsvg.EmbedFonts(false))
	p.Draw(draw.New(canvas))
	var b bytes.Buffer
	if _, err := canvas.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// plot lays the chart out, with note under it.
func (c chart) plot(note string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.title
	p.X.Label.Text = c.x + "\n" + note
	p.Y.Label.Text = c.y
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var (
		xs   []float64
		maxY float64
		minY = math.Inf(1)
	)
	for i, s := range c.lines {
		if len(s.points) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(s.points)
		if err != nil {
			return nil, err
		}
		colors := palette
		if c.colors != nil {
			colors = c.colors
		}
		col := colors[i%len(colors)]
		l.Color, pts.Color = col, col
		l.Width = vg.Points(1.5)
		pts.Shape = draw.CircleGlyph{}
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			pts.Shape = draw.BoxGlyph{}
		}
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
		for _, xy := range s.points {
			xs = append(xs, xy.X)
			maxY = max(maxY, xy.Y)
			minY = min(minY, xy.Y)
		}
	}
	// Headroom above the highest point for the legend, drawn at the top
	// left, so that it covers no line.
	p.Y.Max = maxY * (1.25 + 0.08*float64(len(c.lines)))
	if c.logX {
		p.X.Scale = plot.LogScale{}
	}
	if c.logY {
		// A decade per few lines of legend above the highest point.
		p.Y.Min, p.Y.Max = minY/2, maxY*math.Pow(10, 0.3*float64(len(c.lines)))
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	// Ticks at the measured x values: the levels, the partition counts.
	slices.Sort(xs)
	xs = slices.Compact(xs)
	ticks := make([]plot.Tick, len(xs))
	for i, x := range xs {
		label := strconv.FormatFloat(x, 'g', 4, 64)
		if c.xLabel != nil {
			label = c.xLabel(x)
		}
		ticks[i] = plot.Tick{Value: x, Label: label}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	return p, nil
}
