package chaos_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/tools/chaos"
	"github.com/phasepay/phasepay/tools/chaos/history"
)

func ptr(v float64) *float64 { return &v }

// checkReport holds a rendered report to what every report must have: one
// document, nothing fetched from anywhere, the time axis, a lane with
// marks for each fault kind of the run, and a line for each series.
func checkReport(t *testing.T, html string, sum *chaos.Summary) {
	t.Helper()
	require.True(t, strings.HasPrefix(html, "<!doctype html>"))
	for _, external := range []string{"<script", "<link", "src=", "@import", "url("} {
		require.NotContains(t, html, external, "self-contained: nothing to fetch")
	}
	require.Contains(t, html, `<g id="axis">`)
	require.Regexp(t, `<text class="tick"[^>]*>&#43;0s</text>`, html, "the axis starts at the run's start")
	kinds := map[string]bool{}
	for _, f := range sum.Timeline.Faults {
		kinds[f.Kind] = true
	}
	require.NotEmpty(t, kinds, "the run injected faults")
	for k := range kinds {
		require.Contains(t, html, `<g class="lane" data-kind="`+k+`">`, "a lane for %s", k)
		require.Regexp(t, `class="fault( fault-mark)?" data-kind="`+regexp.QuoteMeta(k)+`"`, html, "marks for %s", k)
	}
	require.NotEmpty(t, sum.Timeline.Series)
	for _, s := range sum.Timeline.Series {
		require.Contains(t, html, `<g class="series" data-name="`+s.Name+`"><polyline`, "a line for %s", s.Name)
	}
}

// A report drawn from a timeline by hand: a fault kind the harness does
// not inject (yet) gets its lane like any other, every series its line
// in its chart, the values it has none for a gap, and each violation
// links the console's pages of what it names.
func TestReportDrawsAnyFaultKindAndSeries(t *testing.T) {
	t.Parallel()
	sum := &chaos.Summary{Seed: 3, Intents: 2, Duration: "4s",
		Violations: []string{"intent chaos-3-00001: 2 charges, want 1", "charge ch_abc123: authorized 2 times by the PSP"},
		Timeline: &chaos.RunTimeline{Seconds: 4,
			Faults: []chaos.Fault{
				{Kind: "kill", Target: "api-1", Start: 0.5, End: 0.5},
				{Kind: "failover", Target: "postgres primary → standby", Start: 1, End: 2.5, Note: "a kind this test made up"},
			},
			Series: []chaos.Series{
				{Name: "started", Chart: "intents per second", Unit: "per second", Values: []*float64{ptr(1), ptr(1), ptr(0), ptr(0)}},
				{Name: "latency p99", Chart: "request latency (ms)", Unit: "ms", Values: []*float64{ptr(12), nil, ptr(30), ptr(8)}},
			}}}
	b, err := chaos.Report(sum, "http://127.0.0.1:8081/")
	require.NoError(t, err)
	html := string(b)
	checkReport(t, html, sum)
	require.Contains(t, html, `id="verdict">FAIL`)
	require.Contains(t, html, "a kind this test made up")
	lines := func(name string) int {
		m := regexp.MustCompile(`<g class="series" data-name="` + name + `">(.*?)</g>`).FindStringSubmatch(html)
		require.Len(t, m, 2, name)
		return strings.Count(m[1], "<polyline")
	}
	require.Equal(t, 1, lines("started"))
	require.Equal(t, 2, lines("latency p99"), "the second without a value breaks the line")
	require.Contains(t, html, `href="http://127.0.0.1:8081/request?key=chaos-3-00001&amp;tenant=chaos"`)
	require.Contains(t, html, `href="http://127.0.0.1:8081/charge?id=ch_abc123&amp;tenant=chaos"`)
	require.Contains(t, html, `<p id="history">Not checked`)
}

// The checker's verdict in the report: a rejection links Porcupine's
// drawing of the rejected keys, written beside the history, and the books
// name a charge held at two PSPs.
func TestReportLinksTheRejectedHistory(t *testing.T) {
	t.Parallel()
	sum := &chaos.Summary{Seed: 3, Intents: 2, Duration: "4s", History: &history.Verdict{
		Verdict: history.Rejected, Checked: 9, Lost: 2, Partitions: 3, Rejected: 1, RejectedKeys: []string{"chaos/chaos-3-00001"},
		CheckTime: "1ms", File: "chaos-history.jsonl.gz", Visualization: "chaos-history.html",
		Books: &history.Books{PSPs: []string{"primary", "secondary"}, Charges: 2, MaxPerCharge: 2,
			Over: []string{"ch_abc: primary auth_1, secondary auth_2"}},
	}}
	b, err := chaos.Report(sum, "http://127.0.0.1:8081/")
	require.NoError(t, err)
	html := string(b)
	require.Contains(t, html, `<span class="verdict FAIL">rejected</span>`)
	require.Contains(t, html, `<a href="chaos-history.html">chaos-history.html</a>; the first: chaos/chaos-3-00001`)
	require.Contains(t, html, `<a href="chaos-history.jsonl.gz">`)
	require.Contains(t, html, "NOT at most one PSP authorization per charge")
	require.Contains(t, html, "ch_abc: primary auth_1, secondary auth_2")
	require.Equal(t, "chaos-history.html", chaos.VisualizationPath("chaos-history.jsonl.gz"))
	require.Equal(t, "tools/results/failover-async-history.jsonl.gz", chaos.HistoryPath("tools/results/failover-async.json"))
}
