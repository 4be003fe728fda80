package bench

import (
	"context"
	"fmt"
	"net/http"
)

// Two on/off comparisons of new charges: telemetry on and off, and the
// foreign keys to tenants put back and not.

// Overhead is the new-charge throughput of the api with tracing (sampled
// as deployed, see onSampler; spans exported over OTLP to a sink) and
// metrics on, against both off (OTEL_SDK_DISABLED=true), at one level.
type Overhead struct {
	Clients int `json:"clients"`
	// On and Off are the medians of the arms (arms.go).
	On  LoadResult `json:"on"`
	Off LoadResult `json:"off"`
	// Overhead is the median over the pairs of 1 − on ÷ off throughput.
	Overhead float64 `json:"overhead"`
	// Pairs are the pairs' own costs and their range.
	Pairs Pairs `json:"pairs"`
	// OnCPU and OffCPU are the medians of the arms' CPU per new charge of
	// the api process and of the database's backends, in milliseconds;
	// CPUCost is the median over the pairs of 1 − off ÷ on of their sums.
	// On a machine other work shares, CPU per charge moves far less than
	// throughput does.
	OnCPU   StackCPU `json:"on_cpu"`
	OffCPU  StackCPU `json:"off_cpu"`
	CPUCost float64  `json:"cpu_cost"`
}

// overhead sums up one level's pairs of arms.
func (e *env) overhead(c int, ons, offs []armRun, pairs Pairs) Overhead {
	o := Overhead{Clients: c, On: median(loads(ons)), Off: median(loads(offs)), Overhead: medianFloat(pairs.Costs), Pairs: pairs,
		OnCPU: medianCPU(ons), OffCPU: medianCPU(offs)}
	o.CPUCost = medianFloat(pairs.CPUCosts)
	return o
}

// armCPU is an arm's CPU per request: its api's and its database's.
func armCPU(r armRun) StackCPU {
	c := StackCPU{API: r.apiCPU}
	if r.CPU != nil {
		c.Database = r.CPU.Database
	}
	return c
}

// medianCPU is the median of the arms' CPU per request, each part apart.
func medianCPU(runs []armRun) StackCPU {
	var api, db []float64
	for _, r := range runs {
		c := armCPU(r)
		api, db = append(api, c.API), append(db, c.Database)
	}
	return StackCPU{API: medianFloat(api), Database: medianFloat(db)}
}

// onSampler and onSamplerArg are the sampling of "instrumentation on":
// the deployed one (deploy/k8s/config.yaml, deploy/docker-compose.yml),
// one new trace in ten, a caller's sampled trace always.
const (
	onSampler    = "parentbased_traceidratio"
	onSamplerArg = "0.1"
)

// instrumentation measures new charges with telemetry on and off, in
// pairs of arms taking turns, each on a fresh database (arms.go), at the
// levels above 1 (throughput is the target).
func (e *env) instrumentation(ctx context.Context, res *Results) error {
	sink, err := startOTLPSink()
	if err != nil {
		return err
	}
	defer sink.Close()
	on := e.stackArm("otel-on", map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + sink.Listener.Addr().String(),
		"OTEL_TRACES_SAMPLER":         onSampler,
		"OTEL_TRACES_SAMPLER_ARG":     onSamplerArg,
	})
	off := e.stackArm("otel-off", map[string]string{"OTEL_SDK_DISABLED": "true"})
	for _, c := range e.cfg.Levels {
		if c == 1 && len(e.cfg.Levels) > 1 {
			continue
		}
		ons, offs, pairs, err := e.onOff(ctx, on, off, c, max(e.cfg.Reps, onOffPairs))
		if err != nil {
			return err
		}
		ov := e.overhead(c, ons, offs, pairs)
		res.InstrumentationOverhead = append(res.InstrumentationOverhead, ov)
		e.log("  %2d clients: on %.0f/s, off %.0f/s: overhead %.1f%% (median of %d pairs, %.1f%% to %.1f%%); CPU per charge (api + database) %.3f + %.3f against %.3f + %.3f ms: %.1f%%",
			c, ov.On.PerSec, ov.Off.PerSec, 100*ov.Overhead, len(pairs.Costs), 100*pairs.Min, 100*pairs.Max,
			ov.OnCPU.API, ov.OnCPU.Database, ov.OffCPU.API, ov.OffCPU.Database, 100*ov.CPUCost)
	}
	if sink.spans.Load() == 0 {
		return fmt.Errorf("instrumentation on exported no span: the measurement would be of nothing")
	}
	return nil
}

// TenantFKs compares new charges with the foreign keys to tenants that
// migrations/00008 dropped put back, and without them, alternating.
type TenantFKs struct {
	Clients int        `json:"clients"`
	With    LoadResult `json:"with_foreign_keys"`
	Without LoadResult `json:"without"`
	// Ratio is without ÷ with throughput.
	Ratio float64 `json:"ratio"`
}

// tenantFKSQL puts the foreign keys back (validating the rows stored so far,
// which the benchmark's tenant all pass) or drops them.
var tenantFKSQL = map[bool][]string{
	true: {
		`ALTER TABLE idempotency_keys ADD CONSTRAINT bench_keys_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id)`,
		`ALTER TABLE charges ADD CONSTRAINT bench_charges_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id)`,
	},
	false: {
		`ALTER TABLE idempotency_keys DROP CONSTRAINT IF EXISTS bench_keys_tenant_fkey`,
		`ALTER TABLE charges DROP CONSTRAINT IF EXISTS bench_charges_tenant_fkey`,
	},
}

// tenantFKs measures new charges at 8 clients (the highest level up to 8)
// with and without the tenant foreign keys, alternating.
func (e *env) tenantFKs(ctx context.Context, res *Results) error {
	base, stop, err := e.startStack(ctx, nil)
	if err != nil {
		return err
	}
	defer stop()
	c := e.cfg.Levels[0]
	for _, l := range e.cfg.Levels {
		if l <= 8 {
			c = l
		}
	}
	set := func(with bool) error {
		for _, stmt := range tenantFKSQL[with] {
			if _, err := e.pool.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	}
	defer set(false) //nolint:errcheck
	var setErr error
	run := func(with bool) func(rep int) LoadResult {
		return func(rep int) LoadResult {
			if err := set(with); err != nil {
				setErr = err
				return LoadResult{}
			}
			return load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
				return request{keyf("fk-%v-%d-%d-%d", with, rep, w, i), []byte(visa)}
			}, nil)
		}
	}
	with, without := alternate(e.cfg.Reps, run(true), run(false))
	if setErr != nil {
		return setErr
	}
	res.TenantFKs = TenantFKs{Clients: c, With: with, Without: without, Ratio: ratio(without.PerSec, with.PerSec)}
	e.log("  %d clients: with the foreign keys %.0f/s, without %.0f/s (%.2f×)", c, with.PerSec, without.PerSec, res.TenantFKs.Ratio)
	return nil
}
