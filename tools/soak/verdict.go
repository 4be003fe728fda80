package soak

import (
	"fmt"
	"math"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"
)

// A series is flat when the least-squares slope of its samples over the
// judged window (the last WindowShare of the run: 45 of 60 minutes; the
// first quarter is warm-up, while pools, caches and the Go heap grow to
// their working size) is within its limit. Limits are one-sided: what
// leaks grows, and a series that falls (a pool closing idle connections,
// bytes per row falling as a table outgrows its first index pages) is
// flat for this purpose.

// Limit is how far a series may climb per hour and stay flat.
type Limit struct {
	// PerHour is the largest slope allowed, in the series' unit per hour,
	// or, when Relative, as a share of the series' mean over the window
	// (0.25: a quarter of the mean per hour).
	PerHour  float64 `json:"per_hour"`
	Relative bool    `json:"relative,omitempty"`
	// DayStep judges a count by its change instead: over the window it may
	// grow by at most one per UTC day boundary crossed (partitions are
	// created a day at a time, and none is past retention within an hour
	// of a fresh database), and never by a slope.
	DayStep bool `json:"day_step,omitempty"`
	// SawTop is the top of a series that saws under a periodic reset
	// (autovacuum), or 0. A window shorter than the hour's holds a few of
	// its teeth, whose slope says nothing: there the series is flat while
	// every sample stays at or under SawTop, whatever its slope.
	SawTop float64 `json:"saw_top,omitempty"`
	// Why justifies the limit; it is printed with the verdict.
	Why string `json:"why"`
}

// Verdicts of a series.
const (
	VerdictFlat     = "flat"
	VerdictClimbing = "CLIMBING"
	VerdictTooFew   = "too few samples"
	// VerdictInfo: recorded and plotted, not judged (the killed worker,
	// whose every restart starts its memory afresh; raw sizes that grow
	// with the rows kept).
	VerdictInfo = "not judged"
)

// Point is one sample of a series: hours since the load started.
type Point struct {
	Hours float64 `json:"h"`
	Value float64 `json:"v"`
}

// Judgement is a series' fit over the window and its verdict.
type Judgement struct {
	// Points is every sample of the run (the plot's); the fit uses those
	// from WindowFrom on.
	WindowFrom float64 `json:"window_from_h"`
	Samples    int     `json:"samples_in_window"`
	Mean       float64 `json:"mean"`
	// Slope is per hour, in the series' unit; Intercept at hour 0.
	Slope     float64 `json:"slope_per_hour"`
	Intercept float64 `json:"intercept"`
	// Change is the last value in the window less the first; Max the
	// highest in it.
	Change float64 `json:"change"`
	Max    float64 `json:"max"`
	// Allowed is the limit in the series' unit per hour (PerHour × Mean
	// when relative, × Scale), or the change allowed for a DayStep count.
	Allowed float64 `json:"allowed"`
	// Scale is what the limit was multiplied by for a window shorter than
	// the hour's (windowScale); 1 for an hour's run.
	Scale   float64 `json:"limit_scale,omitempty"`
	Verdict string  `json:"verdict"`
}

// Flat reports whether the verdict passes: flat, or not judged.
func (j Judgement) Flat() bool { return j.Verdict == VerdictFlat || j.Verdict == VerdictInfo }

// minWindowSamples is the fewest points a slope is judged on: a line
// through two points is whatever the noise made it.
const minWindowSamples = 3

// judge fits points from windowFrom (hours) on and holds the fit against
// limit (nil: not judged). start is when the load started, for the day
// boundaries a DayStep count may cross.
func judge(points []Point, windowFrom float64, limit *Limit, start time.Time) Judgement {
	j := Judgement{WindowFrom: windowFrom}
	var xs, ys []float64
	for _, p := range points {
		if p.Hours >= windowFrom && !math.IsNaN(p.Value) {
			xs = append(xs, p.Hours)
			ys = append(ys, p.Value)
		}
	}
	j.Samples = len(xs)
	if len(xs) > 0 {
		j.Mean = stat.Mean(ys, nil)
		j.Change = ys[len(ys)-1] - ys[0]
		j.Max = slices.Max(ys)
	}
	if len(xs) >= 2 {
		j.Intercept, j.Slope = stat.LinearRegression(xs, ys, nil, false)
	}
	switch {
	case limit == nil:
		j.Verdict = VerdictInfo
		return j
	case len(xs) < minWindowSamples:
		j.Verdict = VerdictTooFew
		return j
	}
	if limit.DayStep {
		j.Allowed = float64(dayBoundaries(start.Add(hours(xs[0])), start.Add(hours(xs[len(xs)-1]))))
		j.Verdict = verdict(j.Change <= j.Allowed && slices.Max(ys)-ys[0] <= j.Allowed)
		return j
	}
	j.Allowed = limit.PerHour
	if limit.Relative {
		j.Allowed = limit.PerHour * math.Abs(j.Mean)
	}
	j.Scale = windowScale(xs[len(xs)-1] - xs[0])
	j.Allowed *= j.Scale
	if limit.SawTop > 0 && j.Scale > 1 {
		j.Verdict = verdict(slices.Max(ys) <= limit.SawTop)
		return j
	}
	j.Verdict = verdict(j.Slope <= j.Allowed)
	return j
}

// fullWindow is the span of an hour's judged window, from its 16th
// minute's sample to its 60th: the span the limits were set for.
const fullWindow = 44.0 / 60

// windowScale is what a limit is multiplied by for a window of span hours:
// 1 from fullWindow on, else fullWindow ÷ span.
//
// A short run may rise within its window by what the hour allows over its
// own. A slope fitted over minutes is mostly noise (its error grows as the
// span to the power −1.5): the 8 samples of a 10-minute run read a backlog
// wandering between 1 and 40, or a p99 of a few slow answers, as a climb.
// Its window also holds what fills once, such as each api's 8 MiB of key
// hints becoming resident page by page. A real leak still fails the hour.
func windowScale(span float64) float64 {
	if span <= 0 || span >= fullWindow-1e-9 {
		return 1
	}
	return fullWindow / span
}

func verdict(flat bool) string {
	if flat {
		return VerdictFlat
	}
	return VerdictClimbing
}

func hours(h float64) time.Duration { return time.Duration(h * float64(time.Hour)) }

// dayBoundaries counts the UTC midnights in (from, to].
func dayBoundaries(from, to time.Time) int {
	day := func(t time.Time) int64 { return t.UTC().Unix() / 86400 }
	return int(max(0, day(to)-day(from)))
}

// windowStart is where the judged window begins, in hours: at the first
// of the last share of the samples (taken at hours, in order), 45 of 60.
// Every series' points are taken at the samples' times, so the window
// holds the same samples in each.
func windowStart(hours []float64, share float64) float64 {
	if len(hours) == 0 {
		return 0
	}
	keep := max(1, int(math.Ceil(share*float64(len(hours))-1e-9)))
	return hours[len(hours)-min(keep, len(hours))]
}

// describe is a judgement in one line, for the progress output.
func (j Judgement) describe(unit string, limit *Limit) string {
	switch {
	case limit == nil:
		return fmt.Sprintf("slope %+.3g %s/h (mean %.4g)", j.Slope, unit, j.Mean)
	case limit.DayStep:
		return fmt.Sprintf("change %+.0f (allowed %.0f) over the window", j.Change, j.Allowed)
	case limit.SawTop > 0 && j.Scale > 1:
		return fmt.Sprintf("at most %.3g %s in a short window, saw top %.3g (slope %+.3g %s/h)", j.Max, unit, limit.SawTop, j.Slope, unit)
	case j.Scale > 1:
		return fmt.Sprintf("slope %+.3g %s/h, limit %.3g %s/h (%.1f× the hour's, for a short window; mean %.4g)", j.Slope, unit, j.Allowed, unit, j.Scale, j.Mean)
	default:
		return fmt.Sprintf("slope %+.3g %s/h, limit %.3g %s/h (mean %.4g)", j.Slope, unit, j.Allowed, unit, j.Mean)
	}
}
