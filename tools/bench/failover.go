package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/phasepay/phasepay/tools/procs"
)

// PrimaryDown is new-charge throughput routed between two PSPs with both
// healthy, and with the first of the route refusing (every authorization
// answered 400: a final failure, nothing done there): each new charge then
// moves to the second PSP after one refused call, its refusal and its next
// attempt committed together. Goal: at least half the healthy figure (two
// calls and one more transaction per charge).
//
// With the first PSP down instead (every request answered 503, lookups
// too), new charges do not start at the second: a charge's id is derived
// from its request, so its first attempt must go where a lost claim of the
// same request went, the route's first PSP (pitfall F3 "A second PSP after
// a lost claim"). Once the api's breaker is open they are held back without
// a call: the step measures how fast those 503s come, and how few requests
// reach the PSP that is down.
type PrimaryDown struct {
	Clients  int        `json:"clients"`
	Healthy  LoadResult `json:"healthy"`
	Refusing LoadResult `json:"primary_refusing"`
	// Ratio is Refusing.PerSec / Healthy.PerSec.
	Ratio float64 `json:"ratio"`
	// Down is the load with the primary down, once its breaker is open:
	// the 503 psp_unavailable answers and their latency.
	Down LoadResult `json:"primary_down"`
	// DownSends is how many authorizations reached the primary during the
	// down runs, warm-up included (the breaker's threshold and its probes).
	DownSends int `json:"primary_down_sends"`
}

// primaryDownClients is the load of this step: past the knee of new
// charges on a small machine, below the pool's size.
const primaryDownClients = 16

// primaryDown alternates runs with the primary healthy and refusing, each
// on a fresh stack (two mock PSPs and one api with PSPS and PSP_ROUTING),
// then one run with the primary down.
func (e *env) primaryDown(ctx context.Context, res *Results) error {
	c := primaryDownClients
	var failed error
	run := func(name, faults string, want, rep int) (LoadResult, int) {
		if failed != nil {
			return LoadResult{}, 0
		}
		base, primaryURL, stop, err := e.startRouted(ctx)
		if err != nil {
			failed = err
			return LoadResult{}, 0
		}
		defer stop()
		if faults != "" {
			if err := setFaults(ctx, primaryURL, faults); err != nil {
				failed = err
				return LoadResult{}, 0
			}
		}
		if want == http.StatusServiceUnavailable {
			// Until the breaker opens: the first charges wait out the
			// PSP's quick retries before their 503.
			load(ctx, e.hc, base, e.apiKey, c, time.Second, want, func(w, i int) request {
				return request{keyf("pd-warm-%d-%d-%d", rep, w, i), []byte(visa)}
			}, nil)
		}
		r := load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration, want, func(w, i int) request {
			return request{keyf("pd-%s-%d-%d-%d", name, rep, w, i), []byte(visa)}
		}, nil)
		sends, err := authorizationsReceived(ctx, primaryURL)
		if err != nil {
			failed = err
		}
		return r, sends
	}
	healthy, refusing := alternate(e.cfg.Reps,
		func(rep int) LoadResult { r, _ := run("healthy", "", http.StatusCreated, rep); return r },
		func(rep int) LoadResult {
			r, _ := run("refusing", `{"reject_rate": 1}`, http.StatusCreated, rep)
			return r
		})
	down, sends := run("down", `{"error_rate": 1}`, http.StatusServiceUnavailable, 0)
	if failed != nil {
		return failed
	}
	res.PrimaryDown = PrimaryDown{Clients: c, Healthy: healthy, Refusing: refusing, Ratio: ratio(refusing.PerSec, healthy.PerSec),
		Down: down, DownSends: sends}
	e.log("  new charges, %d clients, two PSPs: healthy %.0f/s, primary refusing %.0f/s: %.2f×; primary down: %.0f answers 503/s, p99 %.1f ms, %d authorizations reached it (statuses: %v)",
		c, healthy.PerSec, refusing.PerSec, res.PrimaryDown.Ratio, down.PerSec, down.Latency.P99, sends, down.Statuses)
	return nil
}

// authorizationsReceived counts the authorizations a mock PSP received,
// answered or not (its request log).
func authorizationsReceived(ctx context.Context, pspURL string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pspURL+"/_admin/requests", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("psp requests: %w", err)
	}
	defer resp.Body.Close()
	var log struct {
		Data []struct{ Method, Path string } `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&log); err != nil {
		return 0, fmt.Errorf("psp requests: %w", err)
	}
	n := 0
	for _, r := range log.Data {
		if r.Method == http.MethodPost && r.Path == "/v1/authorizations" {
			n++
		}
	}
	return n, nil
}

// startRouted starts two mock PSPs and an api routing primary>secondary.
func (e *env) startRouted(ctx context.Context) (base, primaryURL string, stop func(), err error) {
	primaryURL, primary, err := e.startPSP(ctx)
	if err != nil {
		return "", "", nil, err
	}
	secondaryURL, secondary, err := e.startPSP(ctx)
	if err != nil {
		primary.stop()
		return "", "", nil, err
	}
	apiAddr, err := procs.FreeAddr()
	if err != nil {
		primary.stop()
		secondary.stop()
		return "", "", nil, err
	}
	api, err := startServer(ctx, filepath.Join(e.cfg.BinDir, "api"), map[string]string{
		"DATABASE_URL": e.dbURL, "API_ADDR": apiAddr,
		"PSPS":        "primary=" + primaryURL + ",secondary=" + secondaryURL,
		"PSP_ROUTING": "*:primary>secondary",
	}, "http://"+apiAddr+"/healthz", "serve")
	if err != nil {
		primary.stop()
		secondary.stop()
		return "", "", nil, err
	}
	return "http://" + apiAddr, primaryURL, func() { api.stop(); primary.stop(); secondary.stop() }, nil
}

func setFaults(ctx context.Context, pspURL, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, pspURL+"/_admin/faults", strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set faults: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("set faults: %s", resp.Status)
	}
	return nil
}

// primaryDownRow is the step's line of the report.
func (r *Results) primaryDownRow() string {
	p := r.PrimaryDown
	if p.Clients == 0 {
		return ""
	}
	return fmt.Sprintf("Two PSPs (PSPS, PSP_ROUTING), %d clients: %.0f new charges/s healthy, %.0f/s with the primary refusing "+
		"every charge, each moved to the secondary (%.2f×; goal ≥ 0.50). With the primary down, new charges wait there "+
		"(a derived id starts where a lost claim of it went): %.0f answers 503/s, p99 %.1f ms once its breaker is open, %d authorizations reached it.\n\n",
		p.Clients, p.Healthy.PerSec, p.Refusing.PerSec, p.Ratio, p.Down.PerSec, p.Down.Latency.P99, p.DownSends)
}
