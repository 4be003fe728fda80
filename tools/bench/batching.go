package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// What batching gives new charges (internal/phases/batch.go): the api with
// BATCH on (the default) against BATCH=false, in pairs of arms taking
// turns on fresh databases (arms.go), in the same run, at every level. At one client a batch is one request, which runs
// its own statements, so the two should not differ; with more, concurrent
// claims and commits share statements.

// BatchingGain is one level's comparison.
type BatchingGain struct {
	Clients int        `json:"clients"`
	On      LoadResult `json:"on"`
	Off     LoadResult `json:"off"`
	// Gain is the median of the pairs' on ÷ off throughput; P50Ratio the
	// on arms' median p50 over the off arms'.
	Gain     float64 `json:"gain"`
	P50Ratio float64 `json:"p50_ratio"`
	Pairs    Pairs   `json:"pairs"`
	// OnCPU and OffCPU are the CPU per new charge of the api process and
	// of the database's backends, in milliseconds.
	OnCPU  StackCPU `json:"on_cpu"`
	OffCPU StackCPU `json:"off_cpu"`
	// MeanBatch is the mean size of the batches of more than one request
	// the on arms ran (claims and commits together, warm-up included).
	MeanBatch float64 `json:"mean_batch"`
}

// batchTally sums the batch counters of the arms' apis, read as each stops.
type batchTally struct {
	mu                sync.Mutex
	batches, requests int64
}

// counted wraps a's start so that its api's batch counters are added to t
// before the api stops.
func (e *env) counted(a arm, t *batchTally) arm {
	start := a.start
	a.start = func(ctx context.Context, dbURL string) (string, int, func(), error) {
		base, pid, stop, err := start(ctx, dbURL)
		if err != nil {
			return base, pid, stop, err
		}
		return base, pid, func() {
			if b, r, err := e.batchCounts(ctx, base); err == nil {
				t.mu.Lock()
				t.batches, t.requests = t.batches+b, t.requests+r
				t.mu.Unlock()
			}
			stop()
		}, nil
	}
	return a
}

// batching measures new charges with batching on and off, in pairs of
// arms taking turns, each on a fresh database (arms.go), at every level.
func (e *env) batching(ctx context.Context, res *Results) error {
	var onTally, offTally batchTally
	on := e.counted(e.stackArm("batch-on", map[string]string{"BATCH": "true"}), &onTally)
	off := e.counted(e.stackArm("batch-off", map[string]string{"BATCH": "false"}), &offTally)
	for _, c := range e.cfg.Levels {
		b0, r0 := onTally.batches, onTally.requests
		ons, offs, pairs, err := e.onOff(ctx, on, off, c, max(e.cfg.Reps, onOffPairs))
		if err != nil {
			return err
		}
		onL, offL := median(loads(ons)), median(loads(offs))
		g := BatchingGain{Clients: c, On: onL, Off: offL, Gain: 1 - medianFloat(pairs.Costs),
			P50Ratio: ratio(onL.Latency.P50, offL.Latency.P50), Pairs: pairs,
			OnCPU: medianCPU(ons), OffCPU: medianCPU(offs),
			MeanBatch: ratio(float64(onTally.requests-r0), float64(onTally.batches-b0))}
		res.Batching = append(res.Batching, g)
		e.log("  %2d clients: batching on %.0f/s (p50 %.2f ms), off %.0f/s (p50 %.2f ms): %.2f× (median of %d pairs, %.2f× to %.2f×); mean batch %.1f; CPU per charge (api + database) %.3f + %.3f against %.3f + %.3f ms",
			c, onL.PerSec, onL.Latency.P50, offL.PerSec, offL.Latency.P50, g.Gain, len(pairs.Costs), 1-pairs.Max, 1-pairs.Min,
			g.MeanBatch, g.OnCPU.API, g.OnCPU.Database, g.OffCPU.API, g.OffCPU.Database)
	}
	if offTally.batches != 0 {
		return fmt.Errorf("BATCH=false ran %d batches: the comparison would be of nothing", offTally.batches)
	}
	// One lane per kind or two: two batches of a kind in flight at once
	// wait less for each other, and each holds fewer requests.
	c := e.cfg.Levels[len(e.cfg.Levels)-1]
	var twoTally batchTally
	two := e.counted(e.stackArm("batch-lanes-2", map[string]string{"BATCH": "true", "BATCH_LANES": "2"}), &twoTally)
	one := e.counted(e.stackArm("batch-lanes-1", map[string]string{"BATCH": "true", "BATCH_LANES": "1"}), &onTally)
	b0, r0 := onTally.batches, onTally.requests
	twos, ones, pairs, err := e.onOff(ctx, two, one, c, max(e.cfg.Reps, onOffPairs))
	if err != nil {
		return err
	}
	twoL, oneL := median(loads(twos)), median(loads(ones))
	res.BatchLanes = &BatchingGain{Clients: c, On: twoL, Off: oneL, Gain: 1 - medianFloat(pairs.Costs),
		P50Ratio: ratio(twoL.Latency.P50, oneL.Latency.P50), Pairs: pairs, OnCPU: medianCPU(twos), OffCPU: medianCPU(ones),
		MeanBatch: ratio(float64(twoTally.requests), float64(twoTally.batches))}
	e.log("  %2d clients: two lanes per kind %.0f/s (p50 %.2f ms, mean batch %.1f), one lane %.0f/s (p50 %.2f ms, mean batch %.1f): %.2f×",
		c, twoL.PerSec, twoL.Latency.P50, res.BatchLanes.MeanBatch, oneL.PerSec, oneL.Latency.P50,
		ratio(float64(onTally.requests-r0), float64(onTally.batches-b0)), res.BatchLanes.Gain)
	return nil
}

// batchCounts reads the api's batch counters from its /metrics.
func (e *env) batchCounts(ctx context.Context, base string) (batches, requests int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("batch counters: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("batch counters: /metrics answered %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		var into *int64
		switch name {
		case "phasepay_batches_total":
			into = &batches
		case "phasepay_batched_requests_total":
			into = &requests
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("batch counters: %q: %w", line, err)
		}
		*into += int64(f)
	}
	return batches, requests, sc.Err()
}
