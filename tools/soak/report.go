package soak

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Table renders a run: every judged series with its mean, slope and limit
// over the window, the operations, and the verdict.
func Table(r *Result) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%-44s %12s %14s %14s  %s\n", "series (judged over "+r.Settings.WindowFrom+" to "+r.Settings.Duration+")",
		"mean", "slope/hour", "allowed/hour", "verdict")
	for _, s := range r.Series {
		if s.Limit == nil {
			continue
		}
		slope := fmt.Sprintf("%+.3g", s.Slope)
		allowed := fmt.Sprintf("%.3g", s.Allowed)
		if s.Limit.DayStep {
			slope, allowed = fmt.Sprintf("change %+.0f", s.Change), fmt.Sprintf("change %.0f", s.Allowed)
		}
		fmt.Fprintf(&b, "%-44s %12.4g %14s %14s  %s\n", s.Name+" ("+s.Unit+")", s.Mean, slope, allowed, s.Verdict)
	}
	fmt.Fprintf(&b, "\n%-12s %8s %8s %11s %10s %8s\n", "operation", "sent", "ended", "unexpected", "no answer", "skipped")
	for _, op := range slices.Sorted(maps.Keys(r.Ops)) {
		s := r.Ops[op]
		fmt.Fprintf(&b, "%-12s %8d %8d %11d %10d %8d\n", op, s.Sent, s.Ended, s.Unexpected, s.NoAnswer, s.Skipped)
	}
	fmt.Fprintf(&b, "webhook deliveries: %d received, %d accepted, %d failed on purpose, %d bad signatures\n",
		r.Webhooks.Received, r.Webhooks.Accepted, r.Webhooks.Failed, r.Webhooks.BadSignatures)
	fmt.Fprintf(&b, "kills: %d; restarts: %v; takeovers: %d; keys unfinished after the load: %d\n", r.Kills, r.Restarts,
		r.Takeovers, r.UnfinishedKeys)
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "problem: %s\n", p)
	}
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "soak %s: %d samples over %s, %d series judged, %d failures", verdict, len(r.Samples), r.Settings.Duration,
		len(r.Verdicts), len(r.Failures))
	if len(r.Failures) > 0 {
		fmt.Fprintf(&b, ":\n  %s", strings.Join(r.Failures, "\n  "))
	}
	fmt.Fprintln(&b)
	return b.String()
}
