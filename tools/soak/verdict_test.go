package soak

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hourOf makes an hour of per-minute samples: f gives the value at h hours,
// to which noise of up to ±noise is added (seeded, so the test is the same
// every time).
func hourOf(f func(h float64) float64, noise float64) []Point {
	rnd := rand.New(rand.NewPCG(7, 7))
	var pts []Point
	for k := 1; k <= 60; k++ {
		h := float64(k) / 60
		pts = append(pts, Point{Hours: h, Value: f(h) + noise*(2*rnd.Float64()-1)})
	}
	return pts
}

var t0 = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

// window is where an hour of samples is judged from: the 16th minute's
// sample, the first of the last 45.
var window = windowStart(func() (h []float64) {
	for _, p := range hourOf(func(float64) float64 { return 0 }, 0) {
		h = append(h, p.Hours)
	}
	return h
}(), 0.75)

// A process that keeps 24 MiB more every hour, under GC noise of ±4 MiB
// a sample, is not flat; the same process without the leak is. The
// harness's whole point: a leak must fail the run.
func TestLeakingSeriesIsNotFlat(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 16.0/60, window, 1e-9)

	leaking := judge(hourOf(func(h float64) float64 { return 40 + 24*h }, 4), window, limitRSS, t0)
	require.Equal(t, VerdictClimbing, leaking.Verdict, "%+v", leaking)
	require.InDelta(t, 24, leaking.Slope, 5)
	require.False(t, leaking.Flat())
	require.Equal(t, 45, leaking.Samples, "the last 45 of 60 minutes")

	steady := judge(hourOf(func(float64) float64 { return 40 }, 4), window, limitRSS, t0)
	require.Equal(t, VerdictFlat, steady.Verdict, "%+v", steady)
	require.Less(t, math.Abs(steady.Slope), 8.0)
	require.True(t, steady.Flat())
}

// The first quarter is warm-up: a heap growing to its working size in the
// first ten minutes, then steady, is flat, while the same climb judged
// over the whole run would not be.
func TestWarmUpIsNotJudged(t *testing.T) {
	t.Parallel()
	warm := hourOf(func(h float64) float64 { return 20 + 60*min(h, 1.0/6)*6 }, 1)
	require.Equal(t, VerdictFlat, judge(warm, window, limitRSS, t0).Verdict)
	require.Equal(t, VerdictClimbing, judge(warm, 0, limitRSS, t0).Verdict)
}

// tenMinutesOf is a 10-minute run's per-minute samples, as hourOf.
func tenMinutesOf(f func(h float64) float64, noise float64) []Point {
	return hourOf(f, noise)[:10]
}

// A 10-minute run is judged from its 3rd minute, over a window of 7: its
// limits are scaled to the hour's window, so that a backlog wandering
// between 1 and 40, or a heap still settling, is flat, while a leak the
// short run can see is not. An hour's window keeps the limits as written.
func TestShortWindowScalesTheLimit(t *testing.T) {
	t.Parallel()
	var at []float64
	for _, p := range tenMinutesOf(func(float64) float64 { return 0 }, 0) {
		at = append(at, p.Hours)
	}
	from := windowStart(at, 0.75)
	require.InDelta(t, 3.0/60, from, 1e-9)

	backlog := judge(tenMinutesOf(func(float64) float64 { return 20 }, 20), from, limitBacklog, t0)
	require.Equal(t, VerdictFlat, backlog.Verdict, "%+v", backlog)
	require.InDelta(t, 44.0/7, backlog.Scale, 1e-9)

	settling := judge(tenMinutesOf(func(h float64) float64 { return 44 + 30*h }, 0.5), from, limitRSS, t0)
	require.Equal(t, VerdictFlat, settling.Verdict, "%+v", settling)
	require.Greater(t, settling.Slope, limitRSS.PerHour, "climbing by the hour's limit as written")

	leaking := judge(tenMinutesOf(func(h float64) float64 { return 44 + 240*h }, 0.5), from, limitRSS, t0)
	require.Equal(t, VerdictClimbing, leaking.Verdict, "4 MiB a minute: %+v", leaking)

	// A dead share sawing under autovacuum, judged over a few of its
	// teeth, is flat while under the saw's top (the 10-minute run of
	// 2026-12-07: refunds from the bottom of a tooth), and a held horizon
	// is not.
	saw := []float64{0.203, 0.183, 0.1, 0.068, 0.121, 0.152, 0.126, 0.15, 0.13, 0.125}
	sawing := judge(tenMinutesOf(func(h float64) float64 { return saw[min(int(h*60+0.5), len(saw))-1] }, 0), from, limitDeadShare, t0)
	require.Greater(t, sawing.Slope, sawing.Allowed, "a slope past even the scaled limit")
	require.Equal(t, VerdictFlat, sawing.Verdict, "%+v", sawing)
	held := judge(tenMinutesOf(func(h float64) float64 { return 0.1 + 0.4*min(h*6, 1) }, 0), from, limitDeadShare, t0)
	require.Equal(t, VerdictClimbing, held.Verdict, "%+v", held)
	hourSaw := judge(hourOf(func(h float64) float64 { return 0.1 + 0.2*h }, 0), window, limitDeadShare, t0)
	require.Equal(t, VerdictClimbing, hourSaw.Verdict, "the hour judges the slope, under the saw's top too: %+v", hourSaw)

	hour := judge(hourOf(func(float64) float64 { return 40 }, 4), window, limitRSS, t0)
	require.InDelta(t, 1, hour.Scale, 0, "the hour's limits are as written")
	require.InDelta(t, limitRSS.PerHour, hour.Allowed, 0)
}

// Limits are one-sided: a series that falls is flat.
func TestFallingSeriesIsFlat(t *testing.T) {
	t.Parallel()
	falling := judge(hourOf(func(h float64) float64 { return 900 - 400*h }, 5), window, limitIndexPerRow, t0)
	require.Less(t, falling.Slope, 0.0)
	require.Equal(t, VerdictFlat, falling.Verdict)
}

// A relative limit is a share of the mean per hour: a p99 of ~50 ms may
// climb 25 ms/h at 0.5, not 35.
func TestRelativeLimitIsAShareOfTheMean(t *testing.T) {
	t.Parallel()
	ok := judge(hourOf(func(h float64) float64 { return 40 + 20*h }, 0), window, limitP99, t0)
	require.InDelta(t, 0.5*ok.Mean, ok.Allowed, 1e-9)
	require.Equal(t, VerdictFlat, ok.Verdict, "%+v", ok)
	bad := judge(hourOf(func(h float64) float64 { return 35 + 35*h }, 0), window, limitP99, t0)
	require.Equal(t, VerdictClimbing, bad.Verdict, "%+v", bad)
}

// Partitions may grow by one per UTC day boundary the window crosses, and
// otherwise not at all.
func TestPartitionsGrowOnlyAtADayBoundary(t *testing.T) {
	t.Parallel()
	constant := hourOf(func(float64) float64 { return 5 }, 0)
	step := hourOf(func(h float64) float64 {
		if h > 0.5 {
			return 6
		}
		return 5
	}, 0)
	require.Equal(t, VerdictFlat, judge(constant, window, limitPartitions, t0).Verdict)
	require.Equal(t, VerdictClimbing, judge(step, window, limitPartitions, t0).Verdict, "a partition more without a new day")
	lateEvening := time.Date(2026, 12, 4, 23, 30, 0, 0, time.UTC)
	j := judge(step, window, limitPartitions, lateEvening)
	require.Equal(t, VerdictFlat, j.Verdict, "%+v", j)
	require.InDelta(t, 1, j.Allowed, 0)
}

// A series with fewer than three samples in the window is reported, not
// judged flat; one without a limit is recorded only.
func TestTooFewSamplesAndUnjudgedSeries(t *testing.T) {
	t.Parallel()
	few := []Point{{Hours: 0.9, Value: 1}, {Hours: 0.95, Value: 100}}
	j := judge(few, window, limitRSS, t0)
	require.Equal(t, VerdictTooFew, j.Verdict)
	require.False(t, j.Flat())
	require.Equal(t, VerdictInfo, judge(few, window, nil, t0).Verdict)
}

// Which series are judged: the survivors' process series, not the killed
// worker's nor the harness's; raw sizes are recorded only.
func TestLimitsBySeries(t *testing.T) {
	t.Parallel()
	killed := []string{"api-2"}
	require.Same(t, limitRSS, limitFor("rss_mib/api-0", killed))
	require.Same(t, limitRSS, limitFor("rss_mib/reaper-0", killed))
	require.Nil(t, limitFor("rss_mib/api-2", killed))
	require.Nil(t, limitFor("db_connections/"+harnessApp, killed))
	require.Same(t, limitConnections, limitFor("db_connections/api-1", killed))
	require.Same(t, limitDeadShare, limitFor("dead_share/idempotency_keys", killed))
	require.Nil(t, limitFor("dead_tuples/idempotency_keys", killed))
	require.Nil(t, limitFor("index_mib/charges", killed))
	require.Same(t, limitWAL, limitFor("wal_bytes_per_charge", killed))
	require.Same(t, limitWALRecords, limitFor("wal_records_per_charge", killed))
	require.Same(t, limitP99, limitFor("latency_p99_ms/webhook_delivery", killed))
}

// A run with a climbing series, an operation without an end or an
// unplanned exit fails, and says why; one without any passes.
func TestRunFailsOnAnyClimbingSeries(t *testing.T) {
	t.Parallel()
	var samples []Sample
	for _, p := range hourOf(func(h float64) float64 { return 40 + 24*h }, 1) {
		samples = append(samples, Sample{Hours: p.Hours, Values: map[string]float64{
			"rss_mib/api-0": p.Value, "rss_mib/api-2": p.Value, "goroutines/api-0": 20,
		}})
	}
	r := &Result{Samples: samples, Ops: map[string]OpStats{opNew: {Sent: 10, Ended: 10}},
		Series: buildSeries(samples, window, []string{"api-2"}, t0)}
	r.judge(nil)
	require.False(t, r.Pass)
	require.Len(t, r.Failures, 1, "the killed worker's climb is not judged: %v", r.Failures)
	require.Contains(t, r.Failures[0], "rss_mib/api-0 not flat")
	require.Equal(t, VerdictFlat, r.Verdicts["goroutines/api-0"].Verdict)

	unended := &Result{Ops: map[string]OpStats{opNew: {Sent: 10, Ended: 9, NoAnswer: 1}}}
	unended.judge([]string{"api-0 exited by itself"})
	require.False(t, unended.Pass)
	require.Len(t, unended.Failures, 2, "%v", unended.Failures)

	clean := &Result{Ops: map[string]OpStats{opNew: {Sent: 10, Ended: 10}}}
	clean.judge(nil)
	require.True(t, clean.Pass, "%v", clean.Failures)
}
