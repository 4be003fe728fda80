package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/phasepay/phasepay/tools/procs"
)

// What batching gives new charges (internal/phases/batch.go): the api with
// BATCH on (the default) against BATCH=false, alternating, in the same
// run, at every level. At one client a batch is one request, which runs
// its own statements, so the two should not differ; with more, concurrent
// claims and commits share statements.

// BatchingGain is one level's comparison.
type BatchingGain struct {
	Clients int        `json:"clients"`
	On      LoadResult `json:"on"`
	Off     LoadResult `json:"off"`
	// Gain is on ÷ off throughput; P50Ratio on ÷ off p50 latency.
	Gain     float64 `json:"gain"`
	P50Ratio float64 `json:"p50_ratio"`
	// OnCPU and OffCPU are the CPU per new charge of the api process and
	// of the database's backends, in milliseconds.
	OnCPU  StackCPU `json:"on_cpu"`
	OffCPU StackCPU `json:"off_cpu"`
	// MeanBatch is the mean size of the batches of more than one request
	// the on stack ran during these loads (claims and commits together),
	// and Batched the share of its requests' transactions that went in one.
	MeanBatch float64 `json:"mean_batch"`
	Batched   float64 `json:"batched_share"`
}

// batching measures new charges with batching on and off.
func (e *env) batching(ctx context.Context, res *Results) error {
	pspURL, psp, err := e.startPSP(ctx)
	if err != nil {
		return err
	}
	defer psp.stop()
	start := func(batch string) (string, *server, error) {
		addr, err := procs.FreeAddr()
		if err != nil {
			return "", nil, err
		}
		api, err := startServer(ctx, filepath.Join(e.cfg.BinDir, "api"),
			map[string]string{"DATABASE_URL": e.dbURL, "API_ADDR": addr, "PSP_URL": pspURL, "BATCH": batch},
			"http://"+addr+"/healthz", "serve")
		return "http://" + addr, api, err
	}
	onBase, onAPI, err := start("true")
	if err != nil {
		return err
	}
	defer onAPI.stop()
	offBase, offAPI, err := start("false")
	if err != nil {
		return err
	}
	defer offAPI.stop()

	measure := func(base string, api *server, prefix string, c int) func(rep int) LoadResult {
		return func(rep int) LoadResult {
			before := processTicks(api.cmd.Process.Pid)
			r := e.costed(ctx, func() LoadResult {
				return load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
					return request{keyf("%s-%d-%d-%d-%d", prefix, c, rep, w, i), []byte(visa)}
				}, nil)
			})
			if r.CPU != nil && r.Requests > 0 {
				// The api's CPU per request rides in Machine's place, as in
				// timelineCost.
				r.CPU.Machine = procs.TicksToMillis(processTicks(api.cmd.Process.Pid)-before) / float64(r.Requests)
			}
			return r
		}
	}
	var offBatches int64
	for _, c := range e.cfg.Levels {
		b0, r0, err := e.batchCounts(ctx, onBase)
		if err != nil {
			return err
		}
		on, off := alternate(max(e.cfg.Reps, 3), measure(onBase, onAPI, "batch-on", c), measure(offBase, offAPI, "batch-off", c))
		b1, r1, err := e.batchCounts(ctx, onBase)
		if err != nil {
			return err
		}
		ob, _, err := e.batchCounts(ctx, offBase)
		if err != nil {
			return err
		}
		offBatches = ob
		g := BatchingGain{Clients: c, On: on, Off: off, Gain: ratio(on.PerSec, off.PerSec),
			P50Ratio: ratio(on.Latency.P50, off.Latency.P50), OnCPU: stackCPU(on), OffCPU: stackCPU(off),
			MeanBatch: ratio(float64(r1-r0), float64(b1-b0))}
		// Each new charge sends two batchable transactions (its claim and
		// its commit after the PSP's answer).
		if n := float64(on.Requests) * 2; n > 0 {
			g.Batched = float64(r1-r0) / n
		}
		res.Batching = append(res.Batching, g)
		e.log("  %2d clients: batching on %.0f/s (p50 %.2f ms), off %.0f/s (p50 %.2f ms): %.2f×; mean batch %.1f, %.0f%% of transactions batched; CPU per charge (api + database) %.3f + %.3f against %.3f + %.3f ms",
			c, on.PerSec, on.Latency.P50, off.PerSec, off.Latency.P50, g.Gain, g.MeanBatch, 100*g.Batched,
			g.OnCPU.API, g.OnCPU.Database, g.OffCPU.API, g.OffCPU.Database)
	}
	if offBatches != 0 {
		return fmt.Errorf("BATCH=false ran %d batches: the comparison would be of nothing", offBatches)
	}
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
