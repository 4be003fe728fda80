package chaos

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// What a run did over time, for the report (report.go): the faults the
// harness injected, each a span or an instant on the run's clock, and per
// second what the requests did. Both are generic: a fault is a kind, a
// target and a span, and a series a name, the chart it belongs to and a
// value per second, so that a new fault kind (a failover) or a new series
// is one call to the recorder, and the report draws it without a line of
// its own.

// Fault is one fault the harness injected.
type Fault struct {
	// Kind groups faults in the report's lanes: "kill", "pause",
	// "psp_outage", "db_down", "crash", "failover", …
	Kind string `json:"kind"`
	// Target is what it hit: a worker, a PSP, the database.
	Target string `json:"target"`
	// Start and End are seconds since the run's start; End equals Start
	// for an instant (a kill).
	Start float64 `json:"start_s"`
	End   float64 `json:"end_s"`
	// Note says more, for the report's tooltip.
	Note string `json:"note,omitempty"`
}

// Series is one quantity over the run, a value per second.
type Series struct {
	Name string `json:"name"`
	// Chart names the chart the report draws it in, with the other series
	// of that chart on one value axis; Unit is that axis'.
	Chart string `json:"chart"`
	Unit  string `json:"unit"`
	// Values has one entry per second of the run; null where the second
	// had nothing to measure (no request finished, no sample taken).
	Values []*float64 `json:"values"`
}

// RunTimeline is a run's faults and series on its own clock.
type RunTimeline struct {
	Start   time.Time `json:"start"`
	Seconds int       `json:"seconds"`
	Faults  []Fault   `json:"faults"`
	Series  []Series  `json:"series"`
}

// The charts of the series the harness records.
const (
	chartIntents   = "intents per second"
	chartTakeovers = "takeovers per second"
	chartLatency   = "request latency (ms)"
	chartBacklog   = "webhook backlog (deliveries pending)"
)

// recorder collects a run's faults and series while it runs; it is safe
// for concurrent use, and a nil recorder records nothing.
type recorder struct {
	start time.Time

	mu     sync.Mutex
	faults []Fault
	order  []string // series names in the order first recorded
	kinds  map[string]seriesKind
	// Per series, per second since start.
	sums    map[string]map[int]float64
	samples map[string]map[int][]float64
}

type seriesKind struct {
	chart, unit string
	// how turns a second's recordings into its value.
	how aggregation
}

type aggregation int

const (
	aggSum aggregation = iota // events per second
	aggMax                    // the largest sample of the second (a gauge)
	aggP50                    // percentiles of the second's samples
	aggP99
)

func newRecorder(start time.Time) *recorder {
	return &recorder{start: start, kinds: map[string]seriesKind{},
		sums: map[string]map[int]float64{}, samples: map[string]map[int][]float64{}}
}

func (r *recorder) since(t time.Time) float64 { return t.Sub(r.start).Seconds() }

// Mark records an instant fault (a kill) now.
func (r *recorder) Mark(kind, target, note string) {
	if r == nil {
		return
	}
	now := r.since(time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, Fault{Kind: kind, Target: target, Start: now, End: now, Note: note})
}

// MarkAt records an instant fault at t (one found afterwards, in a log).
func (r *recorder) MarkAt(t time.Time, kind, target, note string) {
	if r == nil {
		return
	}
	at := r.since(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, Fault{Kind: kind, Target: target, Start: at, End: at, Note: note})
}

// Span records a fault that lasted from from to to, known afterwards (a
// failover: the monitor says when the promotion happened).
func (r *recorder) Span(kind, target, note string, from, to time.Time) {
	if r == nil {
		return
	}
	start, end := r.since(from), r.since(to)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, Fault{Kind: kind, Target: target, Start: start, End: end, Note: note})
}

// Begin records the start of a fault that lasts; the function it returns
// records its end (call it once).
func (r *recorder) Begin(kind, target, note string) (end func()) {
	if r == nil {
		return func() {}
	}
	start := r.since(time.Now())
	r.mu.Lock()
	r.faults = append(r.faults, Fault{Kind: kind, Target: target, Start: start, End: -1, Note: note})
	i := len(r.faults) - 1
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.faults[i].End = r.since(time.Now())
	}
}

func (r *recorder) declare(name string, k seriesKind) {
	if _, ok := r.kinds[name]; !ok {
		r.kinds[name] = k
		r.order = append(r.order, name)
	}
}

// Count adds n to series name (events per second) in the current second.
func (r *recorder) Count(chart, name string, n float64) {
	if r == nil {
		return
	}
	sec := int(r.since(time.Now()))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.declare(name, seriesKind{chart: chart, unit: "per second", how: aggSum})
	if r.sums[name] == nil {
		r.sums[name] = map[int]float64{}
	}
	r.sums[name][sec] += n
}

// Gauge records a sample of a level (a backlog): a second's value is the
// largest sample taken in it.
func (r *recorder) Gauge(chart, name, unit string, v float64) {
	r.sample(chart, name, unit, v, aggMax)
}

// Observe records a measurement (a latency): each second gets the p50 and
// the p99 of its measurements, as two series.
func (r *recorder) Observe(chart, name, unit string, v float64) {
	if r == nil {
		return
	}
	r.sample(chart, name+" p50", unit, v, aggP50)
	r.mu.Lock()
	r.declare(name+" p99", seriesKind{chart: chart, unit: unit, how: aggP99})
	r.mu.Unlock()
}

func (r *recorder) sample(chart, name, unit string, v float64, how aggregation) {
	if r == nil {
		return
	}
	sec := int(r.since(time.Now()))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.declare(name, seriesKind{chart: chart, unit: unit, how: how})
	if r.samples[name] == nil {
		r.samples[name] = map[int][]float64{}
	}
	r.samples[name][sec] = append(r.samples[name][sec], v)
}

// Timeline returns what was recorded, up to now: faults still open end
// now.
func (r *recorder) Timeline() *RunTimeline {
	if r == nil {
		return nil
	}
	now := r.since(time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	seconds := int(now) + 1
	out := &RunTimeline{Start: r.start.UTC(), Seconds: seconds, Faults: slices.Clone(r.faults)}
	for i := range out.Faults {
		if out.Faults[i].End < 0 {
			out.Faults[i].End = now
		}
	}
	slices.SortStableFunc(out.Faults, func(a, b Fault) int { return cmp.Compare(a.Start, b.Start) })
	for _, name := range r.order {
		k := r.kinds[name]
		s := Series{Name: name, Chart: k.chart, Unit: k.unit, Values: make([]*float64, seconds)}
		for sec := range seconds {
			var v float64
			switch k.how {
			case aggSum:
				v = r.sums[name][sec] // zero: nothing happened that second
			case aggMax:
				xs := r.samples[name][sec]
				if len(xs) == 0 {
					continue
				}
				v = slices.Max(xs)
			case aggP50, aggP99:
				base := strings.TrimSuffix(strings.TrimSuffix(name, " p50"), " p99")
				xs := r.samples[base+" p50"][sec]
				if len(xs) == 0 {
					continue
				}
				q := 0.5
				if k.how == aggP99 {
					q = 0.99
				}
				v = percentile(xs, q)
			}
			s.Values[sec] = &v
		}
		out.Series = append(out.Series, s)
	}
	return out
}

// percentile is the q-quantile of xs (nearest rank); xs is sorted in
// place.
func percentile(xs []float64, q float64) float64 {
	slices.Sort(xs)
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// outcome names how an intent ended, for the series of ends.
func (it *intent) outcome() string {
	switch {
	case it.status == http.StatusCreated:
		return "authorized"
	case it.code == "card_declined":
		return "declined"
	case it.status == http.StatusPaymentRequired:
		return "failed"
	case it.code == "payment_unresolved":
		return "needs_attention"
	}
	return "without an answer"
}

// timedTransport records each request's latency, to its answer's headers
// or its error, in the run's series.
type timedTransport struct {
	rt  http.RoundTripper
	rec *recorder
}

func timed(rt http.RoundTripper, rec *recorder) http.RoundTripper {
	return &timedTransport{rt: rt, rec: rec}
}

func (t *timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.rt.RoundTrip(r)
	t.rec.Observe(chartLatency, "latency", "ms", float64(time.Since(start).Microseconds())/1000)
	return resp, err
}
