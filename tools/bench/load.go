package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Latency summarises a sample of request latencies.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Mean float64 `json:"mean_ms"`
}

func summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	q := func(p float64) float64 {
		i := int(float64(len(d)-1) * p)
		return float64(d[i].Microseconds()) / 1000
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return Latency{P50: q(0.50), P99: q(0.99), P999: q(0.999), Mean: float64((sum / time.Duration(len(d))).Microseconds()) / 1000}
}

// LoadResult is one closed-loop load run.
type LoadResult struct {
	Clients  int         `json:"clients"`
	Requests int         `json:"requests"`
	PerSec   float64     `json:"per_sec"`
	Latency  Latency     `json:"latency"`
	Statuses map[int]int `json:"statuses"`
	Errors   int         `json:"errors"`
	// CPU is where the load's CPU went per request (cpu.go), where the
	// step measured it.
	CPU *CPUCost `json:"cpu_ms_per_request,omitempty"`
}

// request is what one load worker sends as its i-th request.
type request struct {
	key  string
	body []byte
}

// load runs clients closed-loop workers for dur, each sending next(worker,
// i) as POST /v1/charges, and returns the throughput and latencies of the
// answers with status want.
func load(ctx context.Context, hc *http.Client, base, apiKey string, clients int, dur time.Duration, want int,
	next func(worker, i int) request, onOK func(request)) LoadResult {
	return loadAt(ctx, hc, base, "/v1/charges", apiKey, clients, dur, want, func(w, i int) (string, request, bool) {
		return "", next(w, i), true
	}, onOK)
}

// loadAt is load for any POST: next also gives the request's path (path
// when empty), and false when the worker has nothing more to send, which
// ends it early; the throughput is over the time the workers ran.
func loadAt(ctx context.Context, hc *http.Client, base, path, apiKey string, clients int, dur time.Duration, want int,
	next func(worker, i int) (string, request, bool), onOK func(request)) LoadResult {
	var (
		mu       sync.Mutex
		lat      []time.Duration
		statuses = map[int]int{}
		errs     int
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(dur)
	start := time.Now()
	for w := range clients {
		wg.Go(func() {
			var local []time.Duration
			localStatus := map[int]int{}
			localErrs := 0
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				p, r, ok := next(w, i)
				if !ok {
					break
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+cmp.Or(p, path), bytes.NewReader(r.body))
				req.Header.Set("Authorization", "Bearer "+apiKey)
				req.Header.Set("Idempotency-Key", r.key)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					localErrs++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				el := time.Since(t0)
				localStatus[resp.StatusCode]++
				if resp.StatusCode == want {
					local = append(local, el)
					if onOK != nil {
						onOK(r)
					}
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			for k, v := range localStatus {
				statuses[k] += v
			}
			errs += localErrs
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	return LoadResult{
		Clients: clients, Requests: len(lat), PerSec: float64(len(lat)) / elapsed.Seconds(),
		Latency: summarize(lat), Statuses: statuses, Errors: errs,
	}
}

func keyf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

const visa = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`
