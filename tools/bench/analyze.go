package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A server without autovacuum keeps no statistics of the rows a run
// writes, and phasepay plans each statement once per connection
// (plan_cache_mode = force_generic_plan, internal/dbpool): a plan made
// while charges was empty and never analyzed walked charges_tenant_created
// (tenant_id, created_at, id) for "tenant_id = $1 AND id = $2", every charge
// of the tenant per authorization, and stayed that way for the whole run,
// since only new statistics make PostgreSQL plan a prepared statement
// again. A run measured that scan, growing with every charge (the database
// CPU of a new charge doubled within a minute), not phasepay: the
// instrumentation step read it as a 20–28% overhead of telemetry, by which
// stack's connections happened to plan first. A production server runs
// autovacuum, which analyzes a table once its changes pass a threshold and
// so makes every connection plan again. This machine's server runs with
// autovacuum = off (its CI configuration), so while phasepay serves load the
// run analyzes what autovacuum would: see analyzer.

// analyzerEvery is how often the analyzer looks. Autovacuum's naptime is a
// minute; a run's loads last seconds, so the analyzer looks sooner, with
// autovacuum's own threshold.
const analyzerEvery = 5 * time.Second

// dueForAnalyzeSQL lists the tables autovacuum would analyze now: changed
// rows past autovacuum_analyze_threshold + autovacuum_analyze_scale_factor
// × the rows the last ANALYZE counted (none for a table never analyzed).
// Plain tables and partitions only: autovacuum never analyzes a
// partitioned table itself either.
const dueForAnalyzeSQL = `
SELECT format('%I.%I', s.schemaname, s.relname)
  FROM pg_stat_user_tables s
  JOIN pg_class c ON c.oid = s.relid
 WHERE c.relkind = 'r'
   AND s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8
                              + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)`

// autovacuumOn reports whether the server runs autovacuum.
func autovacuumOn(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var on bool
	err := pool.QueryRow(ctx, `SELECT current_setting('autovacuum')::bool`).Scan(&on)
	return on, err
}

// analyzer is autovacuum's ANALYZE for a server that runs without it.
type analyzer struct {
	pool *pgxpool.Pool
	// emulate is set when the server's autovacuum is off.
	emulate  bool
	analyzed atomic.Int64
	errs     atomic.Int64
}

// pass analyzes every table due, one by one, and returns how many.
func (a *analyzer) pass(ctx context.Context) (int, error) {
	rows, err := a.pool.Query(ctx, dueForAnalyzeSQL)
	if err != nil {
		return 0, fmt.Errorf("tables due for ANALYZE: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("tables due for ANALYZE: %w", err)
	}
	for _, t := range tables {
		if _, err := a.pool.Exec(ctx, "ANALYZE "+t); err != nil {
			return 0, fmt.Errorf("ANALYZE %s: %w", t, err)
		}
		a.analyzed.Add(1)
	}
	return len(tables), nil
}

// start runs a pass every analyzerEvery until the returned stop is called.
// A failed pass (a table dropped between the list and its ANALYZE, say) is
// counted and the next pass tries again.
func (a *analyzer) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(analyzerEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := a.pass(ctx); err != nil && ctx.Err() == nil {
					a.errs.Add(1)
				}
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// Statistics says how the run kept the planner's statistics.
type Statistics struct {
	// Autovacuum is the server's setting.
	Autovacuum bool `json:"autovacuum"`
	// Emulated is true when the run analyzed tables itself, during the
	// steps that load phasepay, because the server does not.
	Emulated bool `json:"emulated"`
	// Analyzes counts the ANALYZEs the run made so; FailedPasses the
	// passes that failed.
	Analyzes     int64 `json:"analyzes"`
	FailedPasses int64 `json:"failed_passes"`
}

// withStatistics runs step with the analyzer on, when the server has no
// autovacuum: the steps that load phasepay, whose plans must be those of a
// server that keeps statistics. The steps that seed and ANALYZE tables
// themselves (growth, retention, partitions) run without it, so that no
// ANALYZE of ours runs inside what they time.
func (e *env) withStatistics(step func(context.Context, *Results) error) func(context.Context, *Results) error {
	return func(ctx context.Context, res *Results) error {
		if !e.analyzer.emulate {
			return step(ctx, res)
		}
		// Statistics of what earlier steps wrote first, as autovacuum
		// would have had them by now.
		if _, err := e.analyzer.pass(ctx); err != nil {
			return err
		}
		stop := e.analyzer.start(ctx)
		err := step(ctx, res)
		stop()
		res.Statistics.Analyzes = e.analyzer.analyzed.Load()
		res.Statistics.FailedPasses = e.analyzer.errs.Load()
		return err
	}
}
