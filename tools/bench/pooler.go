package bench

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
)

// PoolerCost is what a transaction pooler costs at one level: new charges
// and replays through PgBouncer in transaction mode
// (DATABASE_POOLER=transaction) against the api connected directly, and,
// to tell the two costs apart, directly in the exec mode the pooler
// imposes (no prepared statement: every statement parsed and planned at
// each execution) without the pooler's hop; the three alternating.
type PoolerCost struct {
	Clients      int        `json:"clients"`
	DirectNew    LoadResult `json:"direct_new"`
	ExecNew      LoadResult `json:"direct_exec_mode_new"`
	PooledNew    LoadResult `json:"pooled_new"`
	DirectReplay LoadResult `json:"direct_replay"`
	ExecReplay   LoadResult `json:"direct_exec_mode_replay"`
	PooledReplay LoadResult `json:"pooled_replay"`
	// NewRatio and ReplayRatio are pooled ÷ direct throughput; the Exec
	// ratios direct exec mode ÷ direct.
	NewRatio        float64 `json:"new_ratio"`
	ReplayRatio     float64 `json:"replay_ratio"`
	ExecNewRatio    float64 `json:"exec_new_ratio"`
	ExecReplayRatio float64 `json:"exec_replay_ratio"`
}

// poolerPoolSize is the pooler's server connections: the api's own pool
// size, so that the comparison is of the pooler, not of fewer
// connections.
const poolerPoolSize = dbpool.PoolMaxConnsDefault

// pooler measures new charges and replays through a PgBouncer in front of
// the run's database against a direct api, alternating, at every level.
// The database's defaults are phasepay's settings meanwhile (as `api
// migrate` makes them behind a pooler) and are reset afterwards: the
// other steps seed for minutes, past the 5 s statement timeout.
func (e *env) pooler(ctx context.Context, res *Results) error {
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := dbpool.ApplySettings(ctx, conn); err != nil {
		return err
	}
	defer func() {
		for _, s := range dbpool.Settings {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ALTER DATABASE "+pgx.Identifier{e.dbName}.Sanitize()+" RESET "+s.Name)
		}
	}()
	b, err := pgbouncer.Start(ctx, pgbouncer.Config{Server: e.dbURL, PoolSize: poolerPoolSize})
	if err != nil {
		return err
	}
	defer b.Close() //nolint:errcheck // a throw-away pooler
	direct, stopDirect, err := e.startStack(ctx, nil)
	if err != nil {
		return err
	}
	defer stopDirect()
	pooled, stopPooled, err := e.startStackOn(ctx, b.URL(e.dbURL), map[string]string{
		"DATABASE_POOLER": "transaction", "DATABASE_DIRECT_URL": e.dbURL,
	})
	if err != nil {
		return err
	}
	defer stopPooled()
	exec, stopExec, err := e.startStackOn(ctx, e.dbURL+"&default_query_exec_mode=exec", nil)
	if err != nil {
		return err
	}
	defer stopExec()

	arms := []struct {
		name string
		base string
	}{{"direct", direct}, {"exec", exec}, {"pooled", pooled}}
	for _, c := range e.cfg.Levels {
		done := make([]keyList, len(arms))
		news := make([]func(rep int) LoadResult, len(arms))
		replays := make([]func(rep int) LoadResult, len(arms))
		for a, arm := range arms {
			news[a] = func(rep int) LoadResult {
				return load(ctx, e.hc, arm.base, e.apiKey, c, e.cfg.Duration, http.StatusCreated, func(w, i int) request {
					return request{keyf("pooler-%s-%d-%d-%d-%d", arm.name, c, rep, w, i), []byte(visa)}
				}, done[a].add)
			}
			replays[a] = func(rep int) LoadResult {
				return load(ctx, e.hc, arm.base, e.apiKey, c, e.cfg.Duration, http.StatusCreated, done[a].picker(uint64(c*10+rep)), nil)
			}
		}
		n := alternateAll(e.cfg.Reps, news...)
		for a := range arms {
			if len(done[a].keys) == 0 {
				return fmt.Errorf("%d clients, %s: no new charge succeeded (%v)", c, arms[a].name, n[a].Statuses)
			}
		}
		r := alternateAll(e.cfg.Reps, replays...)
		pc := PoolerCost{Clients: c, DirectNew: n[0], ExecNew: n[1], PooledNew: n[2], DirectReplay: r[0], ExecReplay: r[1], PooledReplay: r[2],
			NewRatio: ratio(n[2].PerSec, n[0].PerSec), ReplayRatio: ratio(r[2].PerSec, r[0].PerSec),
			ExecNewRatio: ratio(n[1].PerSec, n[0].PerSec), ExecReplayRatio: ratio(r[1].PerSec, r[0].PerSec)}
		res.Pooler = append(res.Pooler, pc)
		e.log("  %2d clients: new charges direct %.0f/s, exec mode %.0f/s, through PgBouncer %.0f/s (%.2f×); replays direct %.0f/s, exec mode %.0f/s, through PgBouncer %.0f/s (%.2f×)",
			c, n[0].PerSec, n[1].PerSec, n[2].PerSec, pc.NewRatio, r[0].PerSec, r[1].PerSec, r[2].PerSec, pc.ReplayRatio)
	}
	return nil
}

// alternateAll runs each of fs reps times, in turn (a b c a b c …), and
// returns their medians, as alternate does for two.
func alternateAll(reps int, fs ...func(rep int) LoadResult) []LoadResult {
	runs := make([][]LoadResult, len(fs))
	for rep := range reps {
		for i, f := range fs {
			runs[i] = append(runs[i], f(rep))
		}
	}
	out := make([]LoadResult, len(fs))
	for i := range fs {
		out[i] = median(runs[i])
	}
	return out
}

// poolerTable renders the pooler step's results.
func (r *Results) poolerTable() string {
	if len(r.Pooler) == 0 {
		return ""
	}
	s := fmt.Sprintf("\nBehind PgBouncer 1.18 in transaction mode (DATABASE_POOLER=transaction), against the api connected directly and directly in the exec mode the pooler imposes (medians of %d runs each, the three alternated):\n\n", r.Alternations)
	s += "| clients | new charges/s: direct / exec mode / through PgBouncer | pooled ÷ direct | p50 ms direct / pooled | replays/s: direct / exec mode / through PgBouncer | pooled ÷ direct | p50 ms direct / pooled |\n|---:|---|---:|---|---|---:|---|\n"
	for _, p := range r.Pooler {
		s += fmt.Sprintf("| %d | %.0f / %.0f / %.0f | %.2f | %.2f / %.2f | %.0f / %.0f / %.0f | %.2f | %.2f / %.2f |\n", p.Clients,
			p.DirectNew.PerSec, p.ExecNew.PerSec, p.PooledNew.PerSec, p.NewRatio, p.DirectNew.Latency.P50, p.PooledNew.Latency.P50,
			p.DirectReplay.PerSec, p.ExecReplay.PerSec, p.PooledReplay.PerSec, p.ReplayRatio, p.DirectReplay.Latency.P50, p.PooledReplay.Latency.P50)
	}
	return s + "\n"
}
