package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
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

// TimelineCost is one level's comparison. Its CPU per charge (Overhead's
// OnCPU, OffCPU and CPUCost) is measured beside the throughput.
type TimelineCost struct {
	Overhead
}

// StackCPU is the CPU per request of an api and its database.
type StackCPU struct {
	API      float64 `json:"api_ms"`
	Database float64 `json:"database_ms"`
}

func (c StackCPU) total() float64 { return c.API + c.Database }

// timelineCost measures new charges with the timeline on and off, in
// pairs of arms taking turns, each on a fresh database (arms.go).
func (e *env) timelineCost(ctx context.Context, res *Results) error {
	side := func(name, timeline string, check func(ctx context.Context, pool *pgxpool.Pool) error) arm {
		a := e.stackArm(name, map[string]string{"TIMELINE": timeline})
		a.check = check
		return a
	}
	// A comparison of nothing is no measurement: each on arm recorded
	// timelines and each off arm none.
	counts := func(ctx context.Context, pool *pgxpool.Pool, prefix string) (with, without int64, err error) {
		err = pool.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE timeline IS NOT NULL), count(*) FILTER (WHERE timeline IS NULL)
			  FROM idempotency_keys WHERE key LIKE $1`, prefix+"-%").Scan(&with, &without)
		return with, without, err
	}
	on := side("timeline-on", "on", func(ctx context.Context, pool *pgxpool.Pool) error {
		with, without, err := counts(ctx, pool, "timeline-on")
		if err == nil && (with == 0 || without > 0) {
			err = fmt.Errorf("timeline on recorded %d keys and missed %d: the measurement would be of nothing", with, without)
		}
		return err
	})
	off := side("timeline-off", "off", func(ctx context.Context, pool *pgxpool.Pool) error {
		with, _, err := counts(ctx, pool, "timeline-off")
		if err == nil && with > 0 {
			err = fmt.Errorf("timeline off recorded %d keys: the measurement would be of nothing", with)
		}
		return err
	})
	for _, c := range e.cfg.Levels {
		if c == 1 && len(e.cfg.Levels) > 1 {
			continue
		}
		ons, offs, pairs, err := e.onOff(ctx, on, off, c, max(e.cfg.Reps, onOffPairs))
		if err != nil {
			return err
		}
		tc := TimelineCost{Overhead: e.overhead(c, ons, offs, pairs)}
		res.TimelineCost = append(res.TimelineCost, tc)
		e.log("  %2d clients: timeline on %.0f/s, off %.0f/s: cost %.1f%% (median of %d pairs, %.1f%% to %.1f%%); CPU per charge (api + database) %.3f + %.3f against %.3f + %.3f ms: %.1f%%",
			c, tc.On.PerSec, tc.Off.PerSec, 100*tc.Overhead.Overhead, len(pairs.Costs), 100*pairs.Min, 100*pairs.Max,
			tc.OnCPU.API, tc.OnCPU.Database, tc.OffCPU.API, tc.OffCPU.Database, 100*tc.CPUCost)
	}
	return nil
}
