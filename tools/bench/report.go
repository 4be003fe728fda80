package bench

import (
	"bytes"
	"fmt"
	"strings"
)

// Efficiency compares phasepay with the baselines at one level.
type Efficiency struct {
	Clients int `json:"clients"`
	// NewCharge = charges/s × durable commits per charge ÷ baseline INSERT tps.
	NewCharge float64 `json:"new_charge"`
	// Replay = replays/s ÷ baseline SELECT tps.
	Replay float64 `json:"replay"`
}

// Target is one goal of the benchmark issue and whether this run met it.
type Target struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Goal  string `json:"goal"`
	Met   bool   `json:"met"`
}

// targets are the goals of the benchmark issue, each with this run's value.
// A target whose measurement did not run (a -steps run) is not listed.
func targets(r *Results) []Target {
	var out []Target
	add := func(name, value, goal string, met bool) {
		out = append(out, Target{Name: name, Value: value, Goal: goal, Met: met})
	}
	// The goals since batching: new charges ≥ 0.55 of bare-new at 8
	// clients and ≥ 0.7 at 32, replays ≥ 0.65 of bare-replay at both.
	newGoal := map[int]float64{8: 0.55, 32: 0.7}
	for i, br := range r.Bare.Ratios {
		if br.Clients < 8 || i >= len(r.NewCharges) {
			continue
		}
		goal := newGoal[br.Clients]
		if goal == 0 {
			goal = 0.7
		}
		add(fmt.Sprintf("new charges/s ÷ bare-new at %d clients", br.Clients),
			fmt.Sprintf("%.2f (%.0f ÷ %.0f)", br.NewPerSec, r.NewCharges[i].PerSec, r.Bare.New[i].PerSec), fmt.Sprintf("≥ %.2f", goal), br.NewPerSec >= goal)
		add(fmt.Sprintf("replays/s ÷ bare-replay at %d clients", br.Clients),
			fmt.Sprintf("%.2f (%.0f ÷ %.0f)", br.ReplayPerSec, r.Replays[i].PerSec, r.Bare.Replay[i].PerSec), "≥ 0.65", br.ReplayPerSec >= 0.65)
		if br.Clients >= 32 {
			n, b := r.NewCharges[i].CPU, r.Bare.New[i].CPU
			if n != nil && b != nil && b.Database > 0 {
				cpu := n.Database / b.Database
				add(fmt.Sprintf("database CPU per new charge ÷ bare-new's at %d clients", br.Clients),
					fmt.Sprintf("%.2f× (%.3f ÷ %.3f ms)", cpu, n.Database, b.Database), "≤ 2×", cpu <= 2)
			}
			if i < len(r.Replays) && r.Replays[i].Latency.P50 > 0 {
				rp := r.Replays[i].Latency
				tail := rp.P99 / rp.P50
				add(fmt.Sprintf("replay p99 ÷ p50 at %d clients", br.Clients),
					fmt.Sprintf("%.2f× (%.2f ÷ %.2f ms)", tail, rp.P99, rp.P50), "≤ 2×", tail <= 2)
			}
		}
	}
	if len(r.Bare.Ratios) > 0 && r.Bare.Ratios[0].Clients == 1 {
		br := r.Bare.Ratios[0]
		add("new-charge p50 ÷ bare-new p50 (1 client)", fmt.Sprintf("%.2f× (%.2f ÷ %.2f ms)", br.NewP50, r.NewCharges[0].Latency.P50, r.Bare.New[0].Latency.P50),
			"≤ 1.8×", br.NewP50 <= 1.8)
	}
	for _, g := range r.Batching {
		switch {
		case g.Clients == 1:
			add("new-charge p50, batching on ÷ off (1 client)", fmt.Sprintf("%.2f× (%.2f ÷ %.2f ms)", g.P50Ratio, g.On.Latency.P50, g.Off.Latency.P50),
				"≤ 1.05×", g.P50Ratio <= 1.05)
		case g.Clients >= 32:
			add(fmt.Sprintf("new charges/s, batching on ÷ off at %d clients", g.Clients),
				fmt.Sprintf("%.2f× (%.0f ÷ %.0f, mean batch %.1f)", g.Gain, g.On.PerSec, g.Off.PerSec, g.MeanBatch), "≥ 1.5×", g.Gain >= 1.5)
		}
	}
	if len(r.Replays) > 0 && r.Replays[0].Clients == 1 && r.Bare.PKSelect1.LatencyAvg > 0 {
		sel := r.Bare.PKSelect1.LatencyAvg
		ratio := r.Replays[0].Latency.P50 / sel
		add("replay p50 ÷ PK SELECT latency (1 client, alternating)", fmt.Sprintf("%.1f× (%.3f ÷ %.3f ms)", ratio, r.Replays[0].Latency.P50, sel), "≤ 3×", ratio <= 3)
	}
	if rt := r.RoundTrips; rt.Requests > 0 {
		add("round trips per new charge", fmt.Sprintf("%.2f (bare-new %.2f)", rt.NewCharge, rt.BareNew), "≤ 3", rt.NewCharge <= 3.05)
		add("round trips per replay", fmt.Sprintf("%.2f (bare-replay %.2f)", rt.Replay, rt.BareReplay), "≤ 1", rt.Replay <= 1.05)
	}
	for _, c := range r.Commits {
		if strings.HasPrefix(c.Mode, "folded") {
			add("durable commits per new charge", fmt.Sprintf("%.2f (xact_commit %.2f)", c.Durable, c.Xact), "2", c.Durable >= 1.95 && c.Durable <= 2.05)
		}
	}
	if n := len(r.ClaimByPartitions); n > 1 && r.ClaimByPartitions[0].ClaimP50 > 0 {
		first, last := r.ClaimByPartitions[0], r.ClaimByPartitions[n-1]
		ratio := last.ClaimP50 / first.ClaimP50
		add(fmt.Sprintf("claim p50 at %d partitions ÷ at %d", last.Partitions, first.Partitions),
			fmt.Sprintf("%.2f× (%.3f ÷ %.3f ms)", ratio, last.ClaimP50, first.ClaimP50), "≤ 1.2×", ratio <= 1.2)
	}
	if d := r.DropImpact; d.Rows > 0 {
		add(fmt.Sprintf("claim p99 during a %d-key partition drop ÷ without", d.Rows),
			fmt.Sprintf("%.2f× (%.3f ÷ %.3f ms, %d claims)", d.Ratio, d.DuringP99, d.QuietP99, d.DuringClaims), "≤ 2×", d.Ratio <= 2)
	}
	for _, o := range r.InstrumentationOverhead {
		add(fmt.Sprintf("instrumentation overhead at %d clients (throughput, on vs off)", o.Clients),
			fmt.Sprintf("%.1f%% (%.0f vs %.0f/s; %s; CPU per charge %.1f%%)", 100*o.Overhead, o.On.PerSec, o.Off.PerSec, o.Pairs.span(), 100*o.CPUCost),
			"≤ 5%", o.Overhead <= 0.05)
	}
	for _, o := range r.TimelineCost {
		add(fmt.Sprintf("request timeline cost at %d clients (throughput, on vs off)", o.Clients),
			fmt.Sprintf("%.1f%% (%.0f vs %.0f/s; %s; CPU per charge %.1f%%)", 100*o.Overhead.Overhead, o.On.PerSec, o.Off.PerSec, o.Pairs.span(), 100*o.CPUCost),
			"≤ 3%", o.Overhead.Overhead <= 0.03)
	}
	if p := r.Passes; p != nil && len(p.Sizes) > 1 {
		for _, name := range passNames {
			ratio, first, last := p.Ratio(name)
			if first == 0 {
				continue
			}
			add(fmt.Sprintf("%s p50 at %d backlog rows ÷ at %d", name, p.Sizes[len(p.Sizes)-1], p.Sizes[0]),
				fmt.Sprintf("%.2f× (%.3f ÷ %.3f ms)", ratio, last, first), "≤ 1.5×", ratio <= 1.5)
		}
	}
	if n := len(r.Growth); n > 1 && r.Growth[0].ClaimP50 > 0 {
		ratio := r.Growth[n-1].ClaimP50 / r.Growth[0].ClaimP50
		add(fmt.Sprintf("claim p50 at %d keys ÷ at %d", r.Growth[n-1].Keys, r.Growth[0].Keys), fmt.Sprintf("%.2f×", ratio), "≤ 1.2×", ratio <= 1.2)
	}
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
	if len(r.Captures) > 0 {
		p("| clients | captures/s | p50 / p99 ms | refunds/s | p50 / p99 ms |\n|---:|---:|---|---:|---|\n")
		for i, c := range r.Captures {
			var ref LoadResult
			if i < len(r.Refunds) {
				ref = r.Refunds[i]
			}
			p("| %d | %.0f | %.2f / %.2f | %.0f | %.2f / %.2f |\n", c.Clients, c.PerSec, c.Latency.P50, c.Latency.P99,
				ref.PerSec, ref.Latency.P50, ref.Latency.P99)
		}
		p("\n")
	}
	p("%s", r.primaryDownRow())
	p("%s", r.poolerTable())
	p("| commits per new charge | xact_commit | durable (WAL COMMIT records) |\n|---|---:|---:|\n")
	for _, c := range r.Commits {
		p("| %s (%d charges) | %.2f | %.2f |\n", c.Mode, c.Charges, c.Xact, c.Durable)
	}
	p("\nBare baselines (medians of %d runs each, alternated with phasepay's):\n\n", r.Alternations)
	p("| clients | bare-new/s | p50 ms | phasepay ÷ bare (throughput, p50) | bare-replay/s | p50 ms | phasepay ÷ bare (throughput, p50) |\n|---:|---:|---:|---|---:|---:|---|\n")
	for i, br := range r.Bare.Ratios {
		bn, brp := r.Bare.New[i], r.Bare.Replay[i]
		p("| %d | %.0f | %.2f | %.2f, %.2f× | %.0f | %.2f | %.2f, %.2f× |\n", br.Clients, bn.PerSec, bn.Latency.P50, br.NewPerSec, br.NewP50,
			brp.PerSec, brp.Latency.P50, br.ReplayPerSec, br.ReplayP50)
	}
	p("\nCPU per request, ms (machine: every process; database: this run's server processes), and the throughput ratio phasepay's database work alone allows (cpu.go):\n\n")
	p("| clients | new: phasepay machine / database | bare-new | ceiling | replay: phasepay machine / database | bare-replay | ceiling |\n|---:|---|---|---:|---|---|---:|\n")
	for i, br := range r.Bare.Ratios {
		p("| %d | %s | %s | %.2f | %s | %s | %.2f |\n", br.Clients, cpuCell(r.NewCharges[i].CPU), cpuCell(r.Bare.New[i].CPU), br.NewCeiling,
			cpuCell(r.Replays[i].CPU), cpuCell(r.Bare.Replay[i].CPU), br.ReplayCeiling)
	}
	rt := r.RoundTrips
	p("\nDatabase round trips, counted on the wire: %.2f per new charge, %.2f per replay (bare: %.2f, %.2f).\n", rt.NewCharge, rt.Replay, rt.BareNew, rt.BareReplay)
	st := rt.Statements
	p("Statements sent, on the same wire: %.2f per new charge, %.2f per replay (bare: %.2f, %.2f).\n", st.NewCharge, st.Replay, st.BareNew, st.BareReplay)
	p("\n| daily partitions | claim p50 / p99 ms | missing lookup p50 ms |\n|---:|---|---:|\n")
	for _, c := range r.ClaimByPartitions {
		p("| %d | %.3f / %.3f | %.3f |\n", c.Partitions, c.ClaimP50, c.ClaimP99, c.LookupP50)
	}
	p("\n| instrumentation | clients | on /s | off /s | overhead (median of pairs) | each pair, in the order run |\n|---|---:|---:|---:|---:|---|\n")
	for _, o := range r.InstrumentationOverhead {
		p("| tracing (sampled as deployed, OTLP) + metrics | %d | %.0f | %.0f | %.1f%% | %s |\n", o.Clients, o.On.PerSec, o.Off.PerSec, 100*o.Overhead, o.Pairs.list())
	}
	for _, o := range r.TimelineCost {
		p("| request timeline (TIMELINE on vs off) | %d | %.0f | %.0f | %.1f%% | %s |\n", o.Clients, o.On.PerSec, o.Off.PerSec, 100*o.Overhead.Overhead, o.Pairs.list())
	}
	for _, o := range r.InstrumentationOverhead {
		p("\nInstrumentation, %d clients: CPU per new charge, api + database, %.3f + %.3f ms on against %.3f + %.3f ms off (%.1f%%, median of the pairs).\n",
			o.Clients, o.OnCPU.API, o.OnCPU.Database, o.OffCPU.API, o.OffCPU.Database, 100*o.CPUCost)
	}
	for _, o := range r.TimelineCost {
		p("\nRequest timeline, %d clients: CPU per new charge, api + database, %.3f + %.3f ms on against %.3f + %.3f ms off (%.1f%%).\n",
			o.Clients, o.OnCPU.API, o.OnCPU.Database, o.OffCPU.API, o.OffCPU.Database, 100*o.CPUCost)
	}
	if f := r.TenantFKs; f.Clients > 0 {
		p("\nNew charges at %d clients with the foreign keys to tenants put back: %.0f/s; without: %.0f/s (%.2f×).\n",
			f.Clients, f.With.PerSec, f.Without.PerSec, f.Ratio)
	}
	d := r.DropImpact
	p("\nClaims during the drop of a %d-key partition: p50 / p99 %.3f / %.3f ms over %d claims; without: %.3f / %.3f ms.\n",
		d.Rows, d.DuringP50, d.DuringP99, d.DuringClaims, d.QuietP50, d.QuietP99)
	p("\n| keys stored | claim p50 / p99 ms | replay p50 ms |\n|---:|---|---:|\n")
	for _, g := range r.Growth {
		p("| %d | %.3f / %.3f | %.2f |\n", g.Keys, g.ClaimP50, g.ClaimP99, g.ReplayP50)
	}
	p("%s", r.Passes.table())
	ret := r.Retention
	p("\n| retention of %d keys | wall | WAL bytes | dead tuples |\n|---|---:|---:|---:|\n", ret.Rows)
	p("| DETACH CONCURRENTLY + DROP partition | %.0f ms (%.0f + %.0f) | %d | %d |\n", ret.DetachMs+ret.DropMs, ret.DetachMs, ret.DropMs, ret.DropWALBytes, ret.DropDeadTuples)
	p("| DELETE in batches of 10,000 | %.0f ms | %d | %d |\n", ret.DeleteMs, ret.DeleteWALBytes, ret.DeleteDeadTuples)
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

func efficiency(res *Results) []Efficiency {
	commits := 2.0
	for _, c := range res.Commits {
		if strings.HasPrefix(c.Mode, "folded") && c.Durable > 0 {
			commits = c.Durable
		}
	}
	var out []Efficiency
	for i, n := range res.NewCharges {
		ef := Efficiency{Clients: n.Clients}
		if i < len(res.Baseline.Insert) && res.Baseline.Insert[i].TPS > 0 {
			ef.NewCharge = n.PerSec * commits / res.Baseline.Insert[i].TPS
		}
		if i < len(res.Replays) && i < len(res.Baseline.Select) && res.Baseline.Select[i].TPS > 0 {
			ef.Replay = res.Replays[i].PerSec / res.Baseline.Select[i].TPS
		}
		out = append(out, ef)
	}
	return out
}

func cpuCell(c *CPUCost) string {
	if c == nil {
		return "–"
	}
	return fmt.Sprintf("%.3f / %.3f", c.Machine, c.Database)
}

// span is the pairs' range as the targets table gives it.
func (p Pairs) span() string {
	if len(p.Costs) == 0 {
		return "no pairs"
	}
	return fmt.Sprintf("%d pairs %.1f%% to %.1f%%", len(p.Costs), 100*p.Min, 100*p.Max)
}

// list is each pair's cost in the order run.
func (p Pairs) list() string {
	var parts []string
	for _, c := range p.Costs {
		parts = append(parts, fmt.Sprintf("%.1f%%", 100*c))
	}
	return strings.Join(parts, ", ")
}
