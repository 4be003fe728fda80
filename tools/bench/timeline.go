package bench

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/phasepay/phasepay/tools/procs"
)

// What the request timeline costs new charges (migrations/00022): the
// api with TIMELINE on (the default) against TIMELINE=off, alternating,
// in the same run, at the levels above 1. The timeline adds no statement
// (TestTimelineCostsNoStatementOfItsOwn); what it costs is its bytes: the
// entries encoded by the api, parsed and appended by the database in the
// claim and the finish, and a wider key row written to the WAL.
//
// Throughput is what the target is about; the CPU per charge of the api
// process and of the database's backends is measured beside it, since on
// a machine other work shares it moves far less than throughput does.

// TimelineCost is one level's comparison.
type TimelineCost struct {
	Overhead
	// OnCPU and OffCPU are the CPU per new charge of the api process and
	// of the database's backends, in milliseconds; CPUCost is 1 − off ÷ on
	// of their sum.
	OnCPU   StackCPU `json:"on_cpu"`
	OffCPU  StackCPU `json:"off_cpu"`
	CPUCost float64  `json:"cpu_cost"`
}

// StackCPU is the CPU per request of an api and its database.
type StackCPU struct {
	API      float64 `json:"api_ms"`
	Database float64 `json:"database_ms"`
}

func (c StackCPU) total() float64 { return c.API + c.Database }

// timelineCost measures new charges with the timeline on and off.
func (e *env) timelineCost(ctx context.Context, res *Results) error {
	pspURL, psp, err := e.startPSP(ctx)
	if err != nil {
		return err
	}
	defer psp.stop()
	start := func(timeline string) (string, *server, error) {
		addr, err := procs.FreeAddr()
		if err != nil {
			return "", nil, err
		}
		api, err := startServer(ctx, filepath.Join(e.cfg.BinDir, "api"),
			map[string]string{"DATABASE_URL": e.dbURL, "API_ADDR": addr, "PSP_URL": pspURL, "TIMELINE": timeline},
			"http://"+addr+"/healthz", "serve")
		return "http://" + addr, api, err
	}
	onBase, onAPI, err := start("on")
	if err != nil {
		return err
	}
	defer onAPI.stop()
	offBase, offAPI, err := start("off")
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
				// The api's CPU per request rides in Machine's place: what
				// this step compares is the api's and the database's.
				r.CPU.Machine = procs.TicksToMillis(processTicks(api.cmd.Process.Pid)-before) / float64(r.Requests)
			}
			return r
		}
	}
	for _, c := range e.cfg.Levels {
		if c == 1 && len(e.cfg.Levels) > 1 {
			continue
		}
		// A 3% target is within one run's noise here: at least three runs
		// of each, alternating, and their medians.
		on, off := alternate(max(e.cfg.Reps, 3), measure(onBase, onAPI, "timeline-on", c), measure(offBase, offAPI, "timeline-off", c))
		tc := TimelineCost{
			Overhead: Overhead{Clients: c, On: on, Off: off, Overhead: 1 - ratio(on.PerSec, off.PerSec)},
			OnCPU:    stackCPU(on), OffCPU: stackCPU(off),
		}
		tc.CPUCost = 1 - ratio(tc.OffCPU.total(), tc.OnCPU.total())
		res.TimelineCost = append(res.TimelineCost, tc)
		e.log("  %2d clients: timeline on %.0f/s, off %.0f/s: cost %.1f%%; CPU per charge (api + database) %.3f + %.3f against %.3f + %.3f ms: %.1f%%",
			c, on.PerSec, off.PerSec, 100*tc.Overhead.Overhead, tc.OnCPU.API, tc.OnCPU.Database, tc.OffCPU.API, tc.OffCPU.Database, 100*tc.CPUCost)
	}
	// A comparison of nothing is no measurement: the on stack recorded
	// timelines and the off stack none.
	var recorded, unrecorded, offRecorded int64
	err = e.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE key LIKE 'timeline-on-%' AND timeline IS NOT NULL),
		       count(*) FILTER (WHERE key LIKE 'timeline-on-%' AND timeline IS NULL),
		       count(*) FILTER (WHERE key LIKE 'timeline-off-%' AND timeline IS NOT NULL)
		  FROM idempotency_keys WHERE key LIKE 'timeline-%'`).Scan(&recorded, &unrecorded, &offRecorded)
	switch {
	case err != nil:
		return fmt.Errorf("timeline check: %w", err)
	case recorded == 0 || unrecorded > 0 || offRecorded > 0:
		return fmt.Errorf("timeline on recorded %d keys and missed %d, off recorded %d: the measurement would be of nothing",
			recorded, unrecorded, offRecorded)
	}
	return nil
}

// stackCPU is a load's CPU per request: the api's (in Machine's place, see
// timelineCost) and the database's.
func stackCPU(r LoadResult) StackCPU {
	if r.CPU == nil {
		return StackCPU{}
	}
	return StackCPU{API: r.CPU.Machine, Database: r.CPU.Database}
}
