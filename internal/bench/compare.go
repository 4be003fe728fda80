package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/phasepay/phasepay/internal/charges"
)

// Bare holds the bare baselines' loads and phasepay's ratio to them, per
// level; every figure is the median of Results.Alternations runs, each
// run alternated with phasepay's.
type Bare struct {
	New    []LoadResult `json:"new"`
	Replay []LoadResult `json:"replay"`
	Ratios []BareRatio  `json:"ratios"`
	// PKSelect1 is pgbench's primary-key read at 1 client (pgbenchSelect),
	// each run right after one of phasepay's 1-client replay runs: the
	// denominator of the replay-latency target, measured beside what it
	// divides rather than minutes before it.
	PKSelect1 Baseline `json:"pk_select_1_client"`
}

// BareRatio is phasepay ÷ bare at one level.
type BareRatio struct {
	Clients int `json:"clients"`
	// NewPerSec and ReplayPerSec are throughput ratios (higher is better).
	NewPerSec    float64 `json:"new_per_sec"`
	ReplayPerSec float64 `json:"replay_per_sec"`
	// NewP50 and ReplayP50 are latency ratios (lower is better).
	NewP50    float64 `json:"new_p50"`
	ReplayP50 float64 `json:"replay_p50"`
}

// RoundTrips are database round trips counted on the wire (wireCounter),
// per request, at one client.
type RoundTrips struct {
	NewCharge float64 `json:"per_new_charge"`
	Replay    float64 `json:"per_replay"`
	// BareNew and BareReplay are the bare baselines', for comparison.
	BareNew    float64 `json:"bare_per_new"`
	BareReplay float64 `json:"bare_per_replay"`
	Requests   int     `json:"requests"`
	// Statements are the statements sent (Execute and Query messages),
	// counted on the same wire: what the server runs, however it travels.
	Statements Statements `json:"statements"`
}

// Statements per request, counted on the wire (see RoundTrips).
type Statements struct {
	NewCharge  float64 `json:"per_new_charge"`
	Replay     float64 `json:"per_replay"`
	BareNew    float64 `json:"bare_per_new"`
	BareReplay float64 `json:"bare_per_replay"`
}

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

// medianOf is the median of f over xs (0 for none).
func medianOf[T any](xs []T, f func(T) float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// medianBaseline takes each figure's median on its own, as median does.
func medianBaseline(bs []Baseline) Baseline {
	if len(bs) == 0 {
		return Baseline{}
	}
	return Baseline{
		Clients:    bs[0].Clients,
		TPS:        medianOf(bs, func(b Baseline) float64 { return b.TPS }),
		LatencyAvg: medianOf(bs, func(b Baseline) float64 { return b.LatencyAvg }),
	}
}

// median returns a LoadResult whose throughput and latencies are the
// medians of rs (each taken on its own) and whose counts are their sums.
func median(rs []LoadResult) LoadResult {
	if len(rs) == 0 {
		return LoadResult{}
	}
	med := func(f func(LoadResult) float64) float64 { return medianOf(rs, f) }
	out := LoadResult{Clients: rs[0].Clients, Statuses: map[int]int{}}
	for _, r := range rs {
		out.Requests += r.Requests
		out.Errors += r.Errors
		for k, v := range r.Statuses {
			out.Statuses[k] += v
		}
	}
	out.PerSec = med(func(r LoadResult) float64 { return r.PerSec })
	out.Latency = Latency{
		P50:  med(func(r LoadResult) float64 { return r.Latency.P50 }),
		P99:  med(func(r LoadResult) float64 { return r.Latency.P99 }),
		P999: med(func(r LoadResult) float64 { return r.Latency.P999 }),
		Mean: med(func(r LoadResult) float64 { return r.Latency.Mean }),
	}
	return out
}

// alternate runs a and b reps times each, a b a b …, and returns the
// medians.
func alternate(reps int, a, b func(rep int) LoadResult) (LoadResult, LoadResult) {
	var as, bs []LoadResult
	for rep := range reps {
		as = append(as, a(rep))
		bs = append(bs, b(rep))
	}
	return median(as), median(bs)
}

// keyList collects the keys of successful requests, for replays.
type keyList struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyList) add(r request) {
	k.mu.Lock()
	k.keys = append(k.keys, r.key)
	k.mu.Unlock()
}

// picker returns a next func replaying random keys of k.
func (k *keyList) picker(seed uint64) func(w, i int) request {
	rnd := rand.New(rand.NewPCG(seed, 2))
	var mu sync.Mutex
	return func(w, i int) request {
		mu.Lock()
		defer mu.Unlock()
		k.mu.Lock()
		key := k.keys[rnd.IntN(len(k.keys))]
		k.mu.Unlock()
		return request{key, []byte(visa)}
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// loads measures new charges and replays, each level alternating with the
// bare baselines, then 409s and one commit per phase.
func (e *env) loads(ctx context.Context, res *Results) error {
	base, stop, err := e.startStack(ctx, nil)
	if err != nil {
		return err
	}
	defer stop()
	pspURL, psp, err := e.startPSP(ctx)
	if err != nil {
		return err
	}
	defer psp.stop()
	bare, err := startBare(ctx, e.dbURL, pspURL)
	if err != nil {
		return err
	}
	defer bare.stop()

	var done, bareDone keyList
	for _, c := range e.cfg.Levels {
		b, n := alternate(e.cfg.Reps, func(rep int) LoadResult {
			return load(ctx, e.hc, bare.NewURL(), e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
				return request{keyf("bare-%d-%d-%d-%d", c, rep, w, i), []byte(visa)}
			}, bareDone.add)
		}, func(rep int) LoadResult {
			return load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
				return request{keyf("new-%d-%d-%d-%d", c, rep, w, i), []byte(visa)}
			}, done.add)
		})
		res.Bare.New = append(res.Bare.New, b)
		res.NewCharges = append(res.NewCharges, n)
		e.log("  new charges, %2d clients: %.0f/s, p50 %.2f ms, p99 %.2f ms; bare-new %.0f/s, p50 %.2f ms: %.2f× the throughput",
			c, n.PerSec, n.Latency.P50, n.Latency.P99, b.PerSec, b.Latency.P50, ratio(n.PerSec, b.PerSec))
	}
	var pkSelects []Baseline
	var pkErr error
	if slices.Contains(e.cfg.Levels, 1) {
		pkErr = e.selectTable(ctx)
	}
	for li, c := range e.cfg.Levels {
		b, r := alternate(e.cfg.Reps, func(rep int) LoadResult {
			return load(ctx, e.hc, bare.ReplayURL(), e.apiKey, c, e.cfg.Duration, http.StatusCreated, bareDone.picker(uint64(c*10+rep)), nil)
		}, func(rep int) LoadResult {
			lr := load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration, http.StatusCreated, done.picker(uint64(c*10+rep)), nil)
			if c == 1 && pkErr == nil {
				var sel Baseline
				if sel, pkErr = runPgbench(ctx, e.dbURL, pgbenchSelect, 1, e.cfg.Duration); pkErr == nil {
					pkSelects = append(pkSelects, sel)
				}
			}
			return lr
		})
		if pkErr != nil {
			return fmt.Errorf("PK SELECT beside the replays: %w", pkErr)
		}
		if c == 1 {
			res.Bare.PKSelect1 = medianBaseline(pkSelects)
			e.log("  PK SELECT (pgbench), 1 client, beside the replays: %.3f ms", res.Bare.PKSelect1.LatencyAvg)
		}
		res.Bare.Replay = append(res.Bare.Replay, b)
		res.Replays = append(res.Replays, r)
		n, bn := res.NewCharges[li], res.Bare.New[li]
		res.Bare.Ratios = append(res.Bare.Ratios, BareRatio{
			Clients: c, NewPerSec: ratio(n.PerSec, bn.PerSec), ReplayPerSec: ratio(r.PerSec, b.PerSec),
			NewP50: ratio(n.Latency.P50, bn.Latency.P50), ReplayP50: ratio(r.Latency.P50, b.Latency.P50),
		})
		e.log("  replays,     %2d clients: %.0f/s, p50 %.2f ms, p99 %.2f ms; bare-replay %.0f/s, p50 %.2f ms: %.2f× the throughput",
			c, r.PerSec, r.Latency.P50, r.Latency.P99, b.PerSec, b.Latency.P50, ratio(r.PerSec, b.PerSec))
	}
	// Keys held by a live worker: a lease far in the future.
	canon, _, err := charges.ParseCreateRequest([]byte(visa))
	if err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body,
		                              recovery_point, locked_until)
		SELECT t.id, 'busy-' || g, $1, 'POST', '/v1/charges', $2, 'charge_created', phasepay_now() + interval '1 hour'
		  FROM generate_series(1, 2000) g, tenants t WHERE t.name = 'bench'`, canon.Fingerprint[:], canon.Body); err != nil {
		return err
	}
	for _, c := range e.cfg.Levels {
		r := load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration/2, http.StatusConflict, func(w, i int) request {
			return request{keyf("busy-%d", 1+(w*7919+i)%2000), []byte(visa)}
		}, nil)
		res.InProgress = append(res.InProgress, r)
		e.log("  409s,        %2d clients: %.0f/s, p50 %.2f ms, p99 %.2f ms", c, r.PerSec, r.Latency.P50, r.Latency.P99)
	}
	stop()

	// The highest level again, one commit per phase.
	base, stop2, err := e.startStack(ctx, map[string]string{"ONE_COMMIT_PER_PHASE": "true"})
	if err != nil {
		return err
	}
	defer stop2()
	top := e.cfg.Levels[len(e.cfg.Levels)-1]
	res.NewChargesOneCommit = load(ctx, e.hc, base, e.apiKey, top, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
		return request{keyf("one-%d-%d", w, i), []byte(visa)}
	}, nil)
	e.log("  new charges, one commit per phase, %d clients: %.0f/s", top, res.NewChargesOneCommit.PerSec)
	return nil
}

// roundTrips counts, on the wire, the database round trips of n new
// charges sent one at a time and of n replays of them, for phasepay and
// for the bare baselines. Each server connects to PostgreSQL through a
// wireCounter of its own and is warmed up first (connections, prepared
// statements, the auth cache), so the count is the steady state.
func (e *env) roundTrips(ctx context.Context, res *Results) error {
	const n = 200
	host := pgHost(e.dbURL)
	// count returns round trips and statements per new charge and per
	// replay: {trips, statements} each.
	count := func(base string, w *wireCounter, prefix string) (perNew, perReplay [2]float64, err error) {
		warm := keyList{}
		load(ctx, e.hc, base, e.apiKey, 1, 300*time.Millisecond, http.StatusCreated, func(_, i int) request {
			return request{keyf("%s-warm-%d", prefix, i), []byte(visa)}
		}, warm.add)
		if len(warm.keys) == 0 {
			return perNew, perReplay, fmt.Errorf("%s: no warm-up request succeeded", prefix)
		}
		replayBase := base
		if prefix == "bare" {
			replayBase = base[:len(base)-len("/new")] + "/replay"
		}
		load(ctx, e.hc, replayBase, e.apiKey, 1, 200*time.Millisecond, http.StatusCreated, warm.picker(1), nil)
		var keys keyList
		t0, s0 := w.Trips(), w.Statements()
		for i := range n {
			r := request{keyf("%s-rt-%d", prefix, i), []byte(visa)}
			if code, err := e.send(ctx, base, r); err != nil || code != http.StatusCreated {
				return perNew, perReplay, fmt.Errorf("%s new charge: %d %v", prefix, code, err)
			}
			keys.add(r)
		}
		t1, s1 := w.Trips(), w.Statements()
		for _, k := range keys.keys {
			if code, err := e.send(ctx, replayBase, request{k, []byte(visa)}); err != nil || code != http.StatusCreated {
				return perNew, perReplay, fmt.Errorf("%s replay: %d %v", prefix, code, err)
			}
		}
		t2, s2 := w.Trips(), w.Statements()
		perNew = [2]float64{float64(t1-t0) / n, float64(s1-s0) / n}
		perReplay = [2]float64{float64(t2-t1) / n, float64(s2-s1) / n}
		return perNew, perReplay, nil
	}

	w, err := startWireCounter(host)
	if err != nil {
		return err
	}
	defer w.Close()
	viaURL, err := viaWireCounter(e.dbURL, w.Addr())
	if err != nil {
		return err
	}
	base, stop, err := e.startStackOn(ctx, viaURL, nil)
	if err != nil {
		return err
	}
	rt := RoundTrips{Requests: n}
	newc, replay, err := count(base, w, "phasepay")
	stop()
	if err != nil {
		return err
	}
	rt.NewCharge, rt.Statements.NewCharge = newc[0], newc[1]
	rt.Replay, rt.Statements.Replay = replay[0], replay[1]

	bw, err := startWireCounter(host)
	if err != nil {
		return err
	}
	defer bw.Close()
	bareURL, err := viaWireCounter(e.dbURL, bw.Addr())
	if err != nil {
		return err
	}
	pspURL, psp, err := e.startPSP(ctx)
	if err != nil {
		return err
	}
	defer psp.stop()
	bare, err := startBare(ctx, bareURL, pspURL)
	if err != nil {
		return err
	}
	defer bare.stop()
	bareNew, bareReplay, err := count(bare.NewURL(), bw, "bare")
	if err != nil {
		return err
	}
	rt.BareNew, rt.Statements.BareNew = bareNew[0], bareNew[1]
	rt.BareReplay, rt.Statements.BareReplay = bareReplay[0], bareReplay[1]
	res.RoundTrips = rt
	st := rt.Statements
	e.log("  per new charge %.2f, per replay %.2f (bare: %.2f, %.2f); statements %.2f and %.2f (bare: %.2f, %.2f)",
		rt.NewCharge, rt.Replay, rt.BareNew, rt.BareReplay, st.NewCharge, st.Replay, st.BareNew, st.BareReplay)
	return nil
}

// send posts one request and returns its status.
func (e *env) send(ctx context.Context, base string, r request) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/charges", bytes.NewReader(r.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	req.Header.Set("Idempotency-Key", r.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func pgHost(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		return "127.0.0.1:5432"
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return net.JoinHostPort(u.Host, "5432")
	}
	return u.Host
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
