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
// metrics on,
// against both off (OTEL_SDK_DISABLED=true), at one level.
type Overhead struct {
	Clients int        `json:"clients"`
	On      LoadResult `json:"on"`
	Off     LoadResult `json:"off"`
	// Overhead is 1 − on ÷ off throughput.
	Overhead float64 `json:"overhead"`
}

// onSampler and onSamplerArg are the sampling of "instrumentation on":
// the deployed one (deploy/k8s/config.yaml, deploy/docker-compose.yml),
// one new trace in ten, a caller's sampled trace always.
const (
	onSampler    = "parentbased_traceidratio"
	onSamplerArg = "0.1"
)

// instrumentation measures new charges with telemetry on and off,
// alternating, at the levels above 1 (throughput is the target).
func (e *env) instrumentation(ctx context.Context, res *Results) error {
	sink, err := startOTLPSink()
	if err != nil {
		return err
	}
	defer sink.Close()
	on := map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + sink.Listener.Addr().String(),
		"OTEL_TRACES_SAMPLER":         onSampler,
		"OTEL_TRACES_SAMPLER_ARG":     onSamplerArg,
	}
	off := map[string]string{"OTEL_SDK_DISABLED": "true"}
	onBase, stopOn, err := e.startStack(ctx, on)
	if err != nil {
		return err
	}
	defer stopOn()
	offBase, stopOff, err := e.startStack(ctx, off)
	if err != nil {
		return err
	}
	defer stopOff()
	for _, c := range e.cfg.Levels {
		if c == 1 && len(e.cfg.Levels) > 1 {
			continue
		}
		// A 5% target is within one run's noise here: at least three runs
		// of each, alternating, and their medians.
		o, f := alternate(max(e.cfg.Reps, 3), func(rep int) LoadResult {
			return load(ctx, e.hc, onBase, e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
				return request{keyf("otel-on-%d-%d-%d-%d", c, rep, w, i), []byte(visa)}
			}, nil)
		}, func(rep int) LoadResult {
			return load(ctx, e.hc, offBase, e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
				return request{keyf("otel-off-%d-%d-%d-%d", c, rep, w, i), []byte(visa)}
			}, nil)
		})
		ov := Overhead{Clients: c, On: o, Off: f, Overhead: 1 - ratio(o.PerSec, f.PerSec)}
		res.InstrumentationOverhead = append(res.InstrumentationOverhead, ov)
		e.log("  %2d clients: on %.0f/s, off %.0f/s: overhead %.1f%%", c, o.PerSec, f.PerSec, 100*ov.Overhead)
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
