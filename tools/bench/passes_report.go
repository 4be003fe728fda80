package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot/plotter"
)

// The growth step's table, plot and results file (passes.go).

// table renders the passes' costs as Markdown: a row per pass, its p50 at
// each size and the ratio of the largest to the smallest.
func (p *Passes) table() string {
	if p == nil || len(p.Sizes) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| background pass, p50 ms, against a backlog of |")
	for _, s := range p.Sizes {
		fmt.Fprintf(&b, " %s |", rowsLabel(s))
	}
	b.WriteString(" largest ÷ smallest |\n|---|")
	for range p.Sizes {
		b.WriteString("---:|")
	}
	b.WriteString("---:|\n")
	for _, name := range passNames {
		fmt.Fprintf(&b, "| %s |", name)
		for _, s := range p.Sizes {
			for _, c := range p.Costs {
				if c.Pass == name && c.Backlog == s {
					fmt.Fprintf(&b, " %.3f |", c.P50)
				}
			}
		}
		ratio, _, _ := p.Ratio(name)
		fmt.Fprintf(&b, " %.2f× |\n", ratio)
	}
	return b.String()
}

// rowsLabel writes a backlog size as a power of ten where it is one.
func rowsLabel(n int) string {
	for e, v := 0, 1; v <= n; e, v = e+1, v*10 {
		if v == n && e >= 3 {
			return "10" + string([]rune("⁰¹²³⁴⁵⁶⁷⁸⁹")[e])
		}
	}
	return fmt.Sprint(n)
}

// chart is the passes plot: each pass's p50 against the backlog, both
// scales logarithmic, so that a flat line is a pass that costs what it
// picks and one that reads its backlog climbs a decade a decade.
func (p *Passes) chart() chart {
	c := chart{file: "passes.svg", title: "Background passes against a backlog they must not read",
		x: "backlog rows", y: "p50 ms", logX: true, logY: true, colors: passesPalette,
		xLabel: func(x float64) string { return rowsLabel(int(x)) }}
	for _, name := range passNames {
		var xys plotter.XYs
		for _, cost := range p.Costs {
			if cost.Pass == name && cost.P50 > 0 {
				xys = append(xys, plotter.XY{X: float64(cost.Backlog), Y: cost.P50})
			}
		}
		c.lines = append(c.lines, series{name: name, points: xys})
	}
	return c
}

// PassesResults is where the growth step's results are kept, beside a
// complete run's (tools/results/latest.json): the step runs alone too.
const PassesResults = "growth.json"

// WritePasses writes the growth step's results (r.Passes alone) to
// dir/growth.json and its plot to plotDir, and returns their paths.
func WritePasses(r *Results, dir, plotDir string) ([]string, error) {
	only := &Results{Machine: r.Machine, Started: r.Started, Passes: r.Passes}
	b, err := json.MarshalIndent(only, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, PassesResults)
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	c := r.Passes.chart()
	svg, err := c.svg(r.Passes.Machine + ", " + r.Passes.Started.UTC().Format("2006-01-02 15:04 UTC"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(plotDir, 0o755); err != nil {
		return nil, err
	}
	plot := filepath.Join(plotDir, c.file)
	if err := os.WriteFile(plot, svg, 0o644); err != nil {
		return nil, err
	}
	return []string{path, plot}, nil
}
