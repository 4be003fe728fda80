// Package plot is the geometry of the charts the console and the chaos
// report draw as inline SVG: linear scales, readable tick values on a
// value or a time axis, and polyline points. It draws nothing itself: the
// templates that use it do, so that every label goes through
// html/template's escaping.
package plot

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Scale maps a domain [D0, D1] linearly onto a range [R0, R1] (pixels).
type Scale struct {
	D0, D1, R0, R1 float64
}

// At is v's place in the range; a domain of zero width maps to R0.
func (s Scale) At(v float64) float64 {
	if s.D1 == s.D0 {
		return s.R0
	}
	return s.R0 + (v-s.D0)/(s.D1-s.D0)*(s.R1-s.R0)
}

// TimeScale maps [t0, t1] onto [r0, r1].
type TimeScale struct {
	T0, T1 time.Time
	R0, R1 float64
}

// At is t's place in the range, clamped to it.
func (s TimeScale) At(t time.Time) float64 {
	span := s.T1.Sub(s.T0)
	if span <= 0 {
		return s.R0
	}
	f := float64(t.Sub(s.T0)) / float64(span)
	return s.R0 + math.Min(math.Max(f, 0), 1)*(s.R1-s.R0)
}

// Width is the range a duration d spans, at least min.
func (s TimeScale) Width(d time.Duration, min float64) float64 {
	span := s.T1.Sub(s.T0)
	if span <= 0 {
		return min
	}
	return math.Max(float64(d)/float64(span)*(s.R1-s.R0), min)
}

// Tick is a labelled place on an axis.
type Tick struct {
	At    float64
	Label string
}

// niceSteps are the tick steps of a time axis, smallest first.
var niceSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// TimeTicks places about n ticks on s at a round step, labelled with the
// time since s.T0 ("+1.5s"), the way a request's or a run's life is read.
func TimeTicks(s TimeScale, n int) []Tick {
	span := s.T1.Sub(s.T0)
	if span <= 0 || n < 1 {
		return []Tick{{At: s.R0, Label: "+0s"}}
	}
	step := niceSteps[len(niceSteps)-1]
	for _, st := range niceSteps {
		if span/st <= time.Duration(n) {
			step = st
			break
		}
	}
	var ticks []Tick
	for d := time.Duration(0); d <= span; d += step {
		ticks = append(ticks, Tick{At: s.At(s.T0.Add(d)), Label: "+" + Duration(d)})
	}
	return ticks
}

// Duration prints d shortly: 0s, 250ms, 1.5s, 2m30s, 10m, 1h5m.
func Duration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(math.Round(d.Seconds()*100)/100, 'f', -1, 64) + "s"
	}
	s := strings.Replace(d.Round(time.Second).String(), "m0s", "m", 1)
	return strings.Replace(s, "h0m", "h", 1)
}

// ValueTicks places about n ticks between 0 and max at a round step
// (1, 2 or 5 times a power of ten), the last at or above max.
func ValueTicks(max float64, n int) []float64 {
	if max <= 0 || n < 1 {
		return []float64{0, 1}
	}
	raw := max / float64(n)
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw {
			step = m * pow
			break
		}
	}
	var ticks []float64
	for v := 0.0; ; v += step {
		ticks = append(ticks, v)
		if v >= max {
			return ticks
		}
	}
}

// Number prints a value shortly, without trailing zeros: as many decimals
// as a value of its size needs to read (12345 → 12.3k, 561.33 → 561,
// 12.345 → 12.3, 0.125 → 0.13).
func Number(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 10000:
		return strconv.FormatFloat(math.Round(v/100)/10, 'f', -1, 64) + "k"
	case a >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	case a >= 10:
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// Points is the "x,y x,y …" of an SVG polyline through (xs[i], ys[i]).
func Points(xs, ys []float64) string {
	var b strings.Builder
	for i := range min(len(xs), len(ys)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(xs[i], 'f', 1, 64))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(ys[i], 'f', 1, 64))
	}
	return b.String()
}

// TextWidth estimates the width of s set in a sans-serif font of size
// size: a little more than the average advance of DejaVu Sans and
// Helvetica, so that labels placed by it do not touch.
func TextWidth(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * size * 0.62
}

// Label is a text to place along a horizontal axis: centred on X if it
// can be, Width wide. Labels of a higher Priority get their room first.
type Label struct {
	X, Width float64
	Priority int
}

// Placed is where a Label went: its left edge and its row, or Row -1
// when no row had room for it.
type Placed struct {
	Left float64
	Row  int
}

// PlaceLabels places labels in rows of a band from lo to hi: each centred
// on its X, moved inwards as far as it must be to stay inside the band
// (never clipped at its edges), in the first row where it clears every
// label already there by gap. Labels are placed by Priority, highest
// first, and in the order given among equals. A label no row has room for
// is left out (Row -1): the caller shows it another way.
func PlaceLabels(labels []Label, lo, hi float64, rows int, gap float64) []Placed {
	out := make([]Placed, len(labels))
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return labels[b].Priority - labels[a].Priority })
	taken := make([][][2]float64, rows)
	for _, i := range order {
		l := labels[i]
		left := math.Max(lo, math.Min(l.X-l.Width/2, hi-l.Width))
		right := left + l.Width
		out[i] = Placed{Left: left, Row: -1}
		for r := range taken {
			free := true
			for _, s := range taken[r] {
				if left < s[1]+gap && s[0] < right+gap {
					free = false
					break
				}
			}
			if free {
				out[i].Row = r
				taken[r] = append(taken[r], [2]float64{left, right})
				break
			}
		}
	}
	return out
}
