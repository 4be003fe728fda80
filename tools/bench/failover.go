package bench

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/phasepay/phasepay/tools/procs"
)

// PrimaryDown is new-charge throughput routed between two PSPs, with both
// healthy and with the first of the route down (every request answered
// 503, lookups too), once its breaker in the api is open: new charges then
// start at the second PSP without waiting on the first. The charges caught
// while the breaker opened, and the probe sent to the first every
// cool-down, wait there (503 to the client) and do not count. Goal: within
// 20% of the healthy figure.
type PrimaryDown struct {
	Clients int        `json:"clients"`
	Healthy LoadResult `json:"healthy"`
	Down    LoadResult `json:"primary_down"`
	// Ratio is Down.PerSec / Healthy.PerSec.
	Ratio float64 `json:"ratio"`
}

// primaryDownClients is the load of this step: past the knee of new
// charges on a small machine, below the pool's size.
const primaryDownClients = 16

// primaryDown alternates runs with the primary healthy and down, each on a
// fresh stack (two mock PSPs and one api with PSPS and PSP_ROUTING), so
// that every down run starts with a closed breaker that it must open.
func (e *env) primaryDown(ctx context.Context, res *Results) error {
	c := primaryDownClients
	var failed error
	run := func(down bool, rep int) LoadResult {
		if failed != nil {
			return LoadResult{}
		}
		base, primaryURL, stop, err := e.startRouted(ctx)
		if err != nil {
			failed = err
			return LoadResult{}
		}
		defer stop()
		name := "healthy"
		if down {
			name = "down"
			if err := setFaults(ctx, primaryURL, `{"error_rate": 1}`); err != nil {
				failed = err
				return LoadResult{}
			}
			// Until the breaker opens: a few charges end at the primary
			// (503), and then every new one goes to the secondary.
			load(ctx, e.hc, base, e.apiKey, c, time.Second, http.StatusCreated, func(w, i int) request {
				return request{keyf("pd-warm-%d-%d-%d", rep, w, i), []byte(visa)}
			}, nil)
		}
		return load(ctx, e.hc, base, e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
			return request{keyf("pd-%s-%d-%d-%d", name, rep, w, i), []byte(visa)}
		}, nil)
	}
	healthy, down := alternate(e.cfg.Reps, func(rep int) LoadResult { return run(false, rep) },
		func(rep int) LoadResult { return run(true, rep) })
	if failed != nil {
		return failed
	}
	res.PrimaryDown = PrimaryDown{Clients: c, Healthy: healthy, Down: down, Ratio: ratio(down.PerSec, healthy.PerSec)}
	e.log("  new charges, %d clients, two PSPs: healthy %.0f/s, primary down (breaker open) %.0f/s: %.2f× (statuses down: %v)",
		c, healthy.PerSec, down.PerSec, res.PrimaryDown.Ratio, down.Statuses)
	return nil
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
	return fmt.Sprintf("Two PSPs (PSPS, PSP_ROUTING), %d clients: %.0f new charges/s healthy, %.0f/s with the primary down "+
		"and its breaker open (%.2f×; goal ≥ 0.80).\n\n", p.Clients, p.Healthy.PerSec, p.Down.PerSec, p.Ratio)
}
