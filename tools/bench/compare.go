package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"

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
	// NewCeiling and ReplayCeiling are the throughput ratios phasepay's
	// database work alone allows (CPUCeiling): what the ratios could reach
	// if nothing but the database cost phasepay more than the baseline.
	NewCeiling    float64 `json:"new_per_sec_ceiling"`
	ReplayCeiling float64 `json:"replay_per_sec_ceiling"`
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
	var costs []*CPUCost
	for _, r := range rs {
		if r.CPU != nil {
			costs = append(costs, r.CPU)
		}
	}
	if len(costs) > 0 {
		out.CPU = &CPUCost{
			Machine:  medianOf(costs, func(c *CPUCost) float64 { return c.Machine }),
			Database: medianOf(costs, func(c *CPUCost) float64 { return c.Database }),
		}
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
	bare, err := e.startBare(ctx, e.dbURL, pspURL)
	if err != nil {
		return err
	}
	defer bare.stop()

	var done, bareDone keyList
	for _, c := range e.cfg.Levels {
		b, n := alternate(e.cfg.Reps, func(rep int) LoadResult {
			return e.costed(ctx, func() LoadResult {
				return load(ctx, e.hc, bare.NewURL(), e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
					return request{keyf("bare-%d-%d-%d-%d", c, rep, w, i), []byte(visa)}
				}, bareDone.add)
			})
		}, func(rep int) LoadResult {
			return e.costed(ctx, func() LoadResult {
				return load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
					return request{keyf("new-%d-%d-%d-%d", c, rep, w, i), []byte(visa)}
				}, done.add)
			})
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
			return e.costed(ctx, func() LoadResult {
				return load(ctx, e.hc, bare.ReplayURL(), e.apiKey, c, e.cfg.Duration, http.StatusCreated, bareDone.picker(uint64(c*10+rep)), nil)
			})
		}, func(rep int) LoadResult {
			lr := e.costed(ctx, func() LoadResult {
				return load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration, http.StatusCreated, done.picker(uint64(c*10+rep)), nil)
			})
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
			NewCeiling: CPUCeiling(n.CPU, bn.CPU), ReplayCeiling: CPUCeiling(r.CPU, b.CPU),
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
