package bench

import (
	"bytes"
	"fmt"
	"strings"
)

func targets(r *Results) []Target {
	var out []Target
	add := func(name, value, goal string, met bool) {
		out = append(out, Target{Name: name, Value: value, Goal: goal, Met: met})
	}
	for _, c := range r.Commits {
		if strings.HasPrefix(c.Mode, "folded") {
			add("durable commits per new charge", fmt.Sprintf("%.2f (xact_commit %.2f)", c.Durable, c.Xact), "≤ 2", c.Durable >= 0 && c.Durable <= 2.05)
		}
	}
	if n := len(r.Efficiency); n > 0 {
		top := r.Efficiency[n-1]
		add(fmt.Sprintf("new-charge efficiency at %d clients", top.Clients), fmt.Sprintf("%.2f", top.NewCharge), "≥ 0.6", top.NewCharge >= 0.6)
		add(fmt.Sprintf("replay efficiency at %d clients", top.Clients), fmt.Sprintf("%.2f", top.Replay), "≥ 0.5", top.Replay >= 0.5)
	}
	if len(r.Replays) > 0 && len(r.Baseline.Select) > 0 {
		ratio := r.Replays[0].Latency.P50 / r.Baseline.Select[0].LatencyAvg
		add("replay p50 ÷ baseline SELECT latency (1 client)", fmt.Sprintf("%.1f×", ratio), "≤ 3×", ratio <= 3)
	}
	if len(r.NewCharges) > 0 && len(r.Baseline.Insert) > 0 {
		commits := 2.0
		for _, c := range r.Commits {
			if strings.HasPrefix(c.Mode, "folded") && c.Durable > 0 {
				commits = c.Durable
			}
		}
		ratio := r.NewCharges[0].Latency.P50 / (commits * r.Baseline.Insert[0].LatencyAvg)
		add("new-charge p50 ÷ (commits × INSERT latency) (1 client)", fmt.Sprintf("%.1f×", ratio), "≤ 3×", ratio <= 3)
	}
	if n := len(r.Growth); n > 1 && r.Growth[0].ClaimP50 > 0 {
		ratio := r.Growth[n-1].ClaimP50 / r.Growth[0].ClaimP50
		add(fmt.Sprintf("claim p50 at %d keys ÷ at %d", r.Growth[n-1].Keys, r.Growth[0].Keys), fmt.Sprintf("%.2f×", ratio), "≤ 1.2×", ratio <= 1.2)
	}
	dropTotal := r.Retention.DropMs + r.Retention.DetachMs
	add(fmt.Sprintf("partition drop of %d keys (detach + drop)", r.Retention.Rows), fmt.Sprintf("%.0f ms, %d dead tuples", dropTotal, r.Retention.DropDeadTuples),
		"< 100 ms, 0 dead", dropTotal < 100 && r.Retention.DropDeadTuples == 0)
	return out
}

// Table renders the results as Markdown.
func (r *Results) Table() string {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("Measured %s on %s (took %s).\n\n", r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, r.Duration)
	p("| clients | pgbench INSERT tps | pgbench SELECT tps | new charges/s | p50 / p99 / p99.9 ms | replays/s | p50 / p99 ms | 409s/s | p50 ms | new-charge eff. | replay eff. |\n")
	p("|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|\n")
	for i := range r.NewCharges {
		n := r.NewCharges[i]
		var ins, sel Baseline
		if i < len(r.Baseline.Insert) {
			ins, sel = r.Baseline.Insert[i], r.Baseline.Select[i]
		}
		var rep, busy LoadResult
		if i < len(r.Replays) {
			rep = r.Replays[i]
		}
		if i < len(r.InProgress) {
			busy = r.InProgress[i]
		}
		var ef Efficiency
		if i < len(r.Efficiency) {
			ef = r.Efficiency[i]
		}
		p("| %d | %.0f (%.2f ms) | %.0f (%.3f ms) | %.0f | %.2f / %.2f / %.2f | %.0f | %.2f / %.2f | %.0f | %.2f | %.2f | %.2f |\n",
			n.Clients, ins.TPS, ins.LatencyAvg, sel.TPS, sel.LatencyAvg, n.PerSec, n.Latency.P50, n.Latency.P99, n.Latency.P999,
			rep.PerSec, rep.Latency.P50, rep.Latency.P99, busy.PerSec, busy.Latency.P50, ef.NewCharge, ef.Replay)
	}
	p("\nOne commit per phase (ONE_COMMIT_PER_PHASE=true), %d clients: %.0f new charges/s, p50 %.2f ms.\n\n",
		r.NewChargesOneCommit.Clients, r.NewChargesOneCommit.PerSec, r.NewChargesOneCommit.Latency.P50)
	p("| commits per new charge | xact_commit | durable (WAL COMMIT records) |\n|---|---:|---:|\n")
	for _, c := range r.Commits {
		p("| %s (%d charges) | %.2f | %.2f |\n", c.Mode, c.Charges, c.Xact, c.Durable)
	}
	p("\n| keys stored | claim p50 / p99 ms | replay p50 ms |\n|---:|---|---:|\n")
	for _, g := range r.Growth {
		p("| %d | %.3f / %.3f | %.2f |\n", g.Keys, g.ClaimP50, g.ClaimP99, g.ReplayP50)
	}
	rt := r.Retention
	p("\n| retention of %d keys | wall | WAL bytes | dead tuples |\n|---|---:|---:|---:|\n", rt.Rows)
	p("| DETACH CONCURRENTLY + DROP partition | %.0f ms (%.0f + %.0f) | %d | %d |\n", rt.DetachMs+rt.DropMs, rt.DetachMs, rt.DropMs, rt.DropWALBytes, rt.DropDeadTuples)
	p("| DELETE in batches of 10,000 | %.0f ms | %d | %d |\n", rt.DeleteMs, rt.DeleteWALBytes, rt.DeleteDeadTuples)
	p("\n| target | value | goal | met |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		met := "no"
		if t.Met {
			met = "yes"
		}
		p("| %s | %s | %s | %s |\n", t.Name, t.Value, t.Goal, met)
	}
	p("\nGo micro-benchmarks:\n\n```\n%s\n```\n", strings.Join(r.Micro, "\n"))
	return b.String()
}
