package soak

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// PlotFile is the file a series' plot is written to in a directory:
// "rss_mib/api-0" becomes "rss_mib--api-0.svg".
func PlotFile(name string) string { return strings.ReplaceAll(name, "/", "--") + ".svg" }

// WritePlots writes an SVG plot of every series into dir: its samples, and
// for a judged series the least-squares line over the window and the
// steepest line its limit allows from the same start, with the verdict in
// the title. The x axis is minutes since the load started.
func WritePlots(dir string, series []Series) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, s := range series {
		p, err := plotSeries(s)
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.Name, err)
		}
		if err := p.Save(8*vg.Inch, 3.5*vg.Inch, filepath.Join(dir, PlotFile(s.Name))); err != nil {
			return fmt.Errorf("plot %s: %w", s.Name, err)
		}
	}
	return nil
}

var (
	fitColor   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	limitColor = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
)

func plotSeries(s Series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s", s.Name, s.Verdict)
	if s.Limit != nil && !s.Limit.DayStep && s.Samples >= 2 {
		p.Title.Text += fmt.Sprintf(" (slope %+.3g %s/h, limit %.3g)", s.Slope, s.Unit, s.Allowed)
	}
	p.X.Label.Text = "minutes"
	if s.Samples >= 2 {
		p.X.Label.Text += " (dashed: fit over the judged window"
		if s.Limit != nil && !s.Limit.DayStep {
			p.X.Label.Text += "; dotted: steepest allowed"
		}
		p.X.Label.Text += ")"
	}
	p.Y.Label.Text = s.Unit
	p.Y.Min = 0
	xys := make(plotter.XYs, len(s.Points))
	for i, pt := range s.Points {
		xys[i] = plotter.XY{X: pt.Hours * 60, Y: pt.Value}
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	dots, err := plotter.NewScatter(xys)
	if err != nil {
		return nil, err
	}
	dots.Radius = vg.Points(1.5)
	p.Add(line, dots)
	if s.Samples >= 2 && len(xys) > 0 {
		from, to := s.WindowFrom*60, xys[len(xys)-1].X
		fit := plotter.NewFunction(func(x float64) float64 { return s.Intercept + s.Slope*x/60 })
		fit.XMin, fit.XMax = from, to
		fit.Color = fitColor
		fit.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(fit)
		if s.Limit != nil && !s.Limit.DayStep {
			start := s.Intercept + s.Slope*s.WindowFrom
			lim := plotter.NewFunction(func(x float64) float64 { return start + s.Allowed*(x/60-s.WindowFrom) })
			lim.XMin, lim.XMax = from, to
			lim.Color = limitColor
			lim.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(lim)
		}
	}
	return p, nil
}
