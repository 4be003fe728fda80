package chaos

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/phasepay/phasepay/internal/console/plot"
)

// The chaos report: a self-contained HTML page (inline SVG and CSS, no
// script, nothing fetched) that puts on one time axis the faults the run
// injected, a lane per kind, and under them, on the same axis, what the
// requests did: intents started and ended per second by outcome,
// takeovers, latency p50 and p99, the webhook backlog. Every fault is
// drawn from RunTimeline's generic list and every series from its, so a
// new fault kind or series needs nothing here. Each violation links to
// the operator console's pages of the requests and charges it names.

//go:embed report.html
var reportHTML string

var reportTemplate = template.Must(template.New("report").Parse(reportHTML))

// ConsoleTenant is the tenant the run's intents belong to, as the
// console names it.
const ConsoleTenant = "chaos"

// Geometry of the report, in SVG user units.
const (
	rpWidth   = 1200.0
	rpGutter  = 190.0
	rpRight   = 20.0
	rpLaneH   = 22.0
	rpChartH  = 150.0
	rpChartPT = 26.0 // space above a chart's plot, for its title
	rpChartPB = 22.0 // below it, for the axis labels
)

// chartOrder is the order of the harness's own charts: what the clients
// did, what the workers did, what it cost, what waits.
var chartOrder = []string{chartIntents, chartTakeovers, chartLatency, chartBacklog}

// palette colours lanes and series by their order.
var palette = []string{"#c53030", "#2b6cb0", "#d69e2e", "#2f855a", "#6b46c1", "#dd6b20", "#b83280", "#319795", "#4a5568", "#975a16"}

type reportView struct {
	Sum                   *Summary
	Verdict               string
	Width, Gutter, PlotX1 float64
	Ticks                 []plot.Tick
	Lanes                 []reportLane
	LanesHeight           float64
	LanesViewH            float64 // the lanes' SVG height, with the axis above them
	Charts                []reportChart
	Violations            []reportViolation
	Table                 string
	ConsoleURL            string
}

type reportLane struct {
	Kind, Color      string
	Y, Y2, H, LabelY float64
	Count            int
	Spans            []reportSpan
	Marks            []reportSpan
	shade            bool // its spans shaded behind the charts
}

type reportSpan struct {
	X, W  float64
	Color string
	Title string
}

type reportChart struct {
	Title, Unit string
	Height      float64
	PlotY0      float64 // top of the plot
	PlotY1      float64 // its bottom: the value 0
	PlotH       float64
	YTicks      []plot.Tick
	Lines       []reportLine
	Bands       []reportSpan
}

type reportLine struct {
	Name, Color string
	// Segments are the polylines of the series: a second without a value
	// breaks the line.
	Segments []string
	// Peak is its largest value, for the legend.
	Peak string
}

type reportViolation struct {
	Text  string
	Links []reportLink
}

type reportLink struct{ Label, URL string }

// Report renders s as the run's HTML report; consoleURL is where an
// operator's `api console` serves the run's database (for the links of
// the violations).
func Report(s *Summary, consoleURL string) ([]byte, error) {
	v := reportView{Sum: s, Verdict: "PASS", Width: rpWidth, Gutter: rpGutter, PlotX1: rpWidth - rpRight,
		Table: s.Table(), ConsoleURL: strings.TrimSuffix(consoleURL, "/")}
	if len(s.Violations) > 0 {
		v.Verdict = "FAIL"
	}
	tl := s.Timeline
	if tl == nil {
		tl = &RunTimeline{Seconds: 1}
	}
	seconds := float64(max(tl.Seconds, 1))
	x := plot.Scale{D0: 0, D1: seconds, R0: rpGutter, R1: rpWidth - rpRight}
	v.Ticks = plot.TimeTicks(plot.TimeScale{T0: time.Unix(0, 0), T1: time.Unix(0, 0).Add(time.Duration(seconds * float64(time.Second))),
		R0: rpGutter, R1: rpWidth - rpRight}, 12)

	// The faults: a lane per kind, in the order the kinds first struck.
	laneOf := map[string]int{}
	for _, f := range tl.Faults {
		i, ok := laneOf[f.Kind]
		if !ok {
			i = len(v.Lanes)
			laneOf[f.Kind] = i
			y := float64(i) * rpLaneH
			v.Lanes = append(v.Lanes, reportLane{Kind: f.Kind, Color: palette[i%len(palette)], Y: y, Y2: y + rpLaneH - 2,
				H: rpLaneH - 2, LabelY: y + rpLaneH*0.65})
		}
		l := &v.Lanes[i]
		l.Count++
		title := fmt.Sprintf("%s %s at %.1fs", f.Kind, f.Target, f.Start)
		if f.End > f.Start {
			title = fmt.Sprintf("%s %s from %.1fs to %.1fs (%.1fs)", f.Kind, f.Target, f.Start, f.End, f.End-f.Start)
		}
		if f.Note != "" {
			title += ": " + f.Note
		}
		sp := reportSpan{X: x.At(f.Start), W: math.Max(x.At(f.End)-x.At(f.Start), 0), Color: l.Color, Title: title}
		if f.End > f.Start {
			l.Spans = append(l.Spans, sp)
		} else {
			l.Marks = append(l.Marks, sp)
		}
	}
	// A kind whose faults cover much of the run (the pauses of a busy
	// run) would shade every chart all over: only the rarer ones are
	// shaded behind the series.
	covered := map[string]float64{}
	for _, f := range tl.Faults {
		covered[f.Kind] += f.End - f.Start
	}
	for i := range v.Lanes {
		v.Lanes[i].shade = covered[v.Lanes[i].Kind] < 0.3*seconds
	}
	v.LanesHeight = math.Max(float64(len(v.Lanes))*rpLaneH, rpLaneH)
	v.LanesViewH = v.LanesHeight + 26

	// The series: a chart per Chart, the harness's own in the order they
	// tell the story (chartOrder), any other after them in the order first
	// recorded, each on its own value axis; the lasting faults shaded
	// behind every chart.
	chartOf := map[string]int{}
	names := make([]string, 0, len(tl.Series))
	for _, se := range tl.Series {
		if !slices.Contains(names, se.Chart) {
			names = append(names, se.Chart)
		}
	}
	rank := func(c string) int {
		if i := slices.Index(chartOrder, c); i >= 0 {
			return i
		}
		return len(chartOrder)
	}
	slices.SortStableFunc(names, func(a, b string) int { return rank(a) - rank(b) })
	for _, name := range names {
		for _, se := range tl.Series {
			if se.Chart != name {
				continue
			}
			chartOf[se.Chart] = len(v.Charts)
			v.Charts = append(v.Charts, reportChart{Title: se.Chart, Unit: se.Unit, Height: rpChartH + rpChartPT + rpChartPB,
				PlotY0: rpChartPT, PlotY1: rpChartPT + rpChartH, PlotH: rpChartH})
			break
		}
	}
	peaks := make([]float64, len(v.Charts))
	for _, se := range tl.Series {
		for _, p := range se.Values {
			if p != nil {
				peaks[chartOf[se.Chart]] = math.Max(peaks[chartOf[se.Chart]], *p)
			}
		}
	}
	for i := range v.Charts {
		c := &v.Charts[i]
		ticks := plot.ValueTicks(math.Max(peaks[i], 1), 4)
		top := ticks[len(ticks)-1]
		y := plot.Scale{D0: 0, D1: top, R0: c.PlotY1, R1: c.PlotY0}
		for _, t := range ticks {
			c.YTicks = append(c.YTicks, plot.Tick{At: y.At(t), Label: plot.Number(t)})
		}
		n := 0
		for _, se := range tl.Series {
			if chartOf[se.Chart] != i {
				continue
			}
			line := reportLine{Name: se.Name, Color: palette[n%len(palette)]}
			n++
			var xs, ys []float64
			peak := 0.0
			flush := func() {
				if len(xs) > 0 {
					line.Segments = append(line.Segments, plot.Points(xs, ys))
				}
				xs, ys = nil, nil
			}
			for sec, p := range se.Values {
				if p == nil {
					flush()
					continue
				}
				// A second's value is drawn at its middle.
				xs, ys = append(xs, x.At(float64(sec)+0.5)), append(ys, y.At(*p))
				peak = math.Max(peak, *p)
			}
			flush()
			line.Peak = plot.Number(peak)
			c.Lines = append(c.Lines, line)
		}
		for _, l := range v.Lanes {
			if !l.shade {
				continue
			}
			for _, sp := range l.Spans {
				c.Bands = append(c.Bands, reportSpan{X: sp.X, W: sp.W, Color: l.Color, Title: sp.Title})
			}
		}
	}

	for _, text := range s.Violations {
		v.Violations = append(v.Violations, reportViolation{Text: text, Links: consoleLinks(v.ConsoleURL, text)})
	}
	var b bytes.Buffer
	if err := reportTemplate.Execute(&b, v); err != nil {
		return nil, fmt.Errorf("chaos report: %w", err)
	}
	return b.Bytes(), nil
}

// keyRE and chargeRE find what a violation names: the keys of the run's
// intents, their lives and the reaper probe, and charges.
var (
	keyRE    = regexp.MustCompile(`\bchaos-[0-9]+-[A-Za-z0-9-]+`)
	chargeRE = regexp.MustCompile(`\bch_[a-z0-9]+`)
)

// consoleLinks are the console's pages of the requests and charges a
// violation names.
func consoleLinks(base, text string) []reportLink {
	var links []reportLink
	seen := map[string]bool{}
	for _, k := range keyRE.FindAllString(text, -1) {
		if !seen[k] {
			seen[k] = true
			links = append(links, reportLink{Label: "request " + k,
				URL: base + "/request?" + url.Values{"tenant": {ConsoleTenant}, "key": {k}}.Encode()})
		}
	}
	for _, id := range chargeRE.FindAllString(text, -1) {
		if !seen[id] {
			seen[id] = true
			links = append(links, reportLink{Label: "charge " + id,
				URL: base + "/charge?" + url.Values{"tenant": {ConsoleTenant}, "id": {id}}.Encode()})
		}
	}
	return links
}
