package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/tools/procs"
)

// Where a load's CPU went, per request: the machine's (every process: the
// server under test, the mock PSP, the load generator, PostgreSQL and its
// background writers) and the database's (the server processes of this
// run's database). On these two cores throughput follows the machine's CPU
// per request, so the two say how much of a gap between phasepay and a
// bare baseline is the database's work, which no saving in the api can
// remove (CPUCeiling).

// CPUCost is a load's CPU per request, in milliseconds.
type CPUCost struct {
	Machine  float64 `json:"machine_ms"`
	Database float64 `json:"database_ms"`
}

// The /proc readers live in tools/procs, shared with tools/profile.
var (
	machineTicks = procs.MachineTicks
	processTicks = procs.ProcessTicks
)

// backendsSQL lists the server processes connected to this database: the
// server under test's pool among them, and the one asking, which must not
// be left out: the snapshot after a load may ask on another connection of
// the pool, and a backend missing from the one before would count its
// whole life.
const backendsSQL = `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`

// cpuSnapshot is the CPU used so far by the machine and by each backend of
// the run's database.
type cpuSnapshot struct {
	machine  int64
	backends map[int]int64
}

func cpuSnapshotOf(ctx context.Context, pool *pgxpool.Pool) (cpuSnapshot, error) {
	m, err := machineTicks()
	if err != nil {
		return cpuSnapshot{}, err
	}
	rows, err := pool.Query(ctx, backendsSQL)
	if err != nil {
		return cpuSnapshot{}, fmt.Errorf("backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return cpuSnapshot{}, fmt.Errorf("backends: %w", err)
	}
	s := cpuSnapshot{machine: m, backends: map[int]int64{}}
	for _, pid := range pids {
		s.backends[int(pid)] = processTicks(int(pid))
	}
	return s, nil
}

// costed runs f and records its CPU per answered request in its result.
// A backend that connected during the load counts from zero (its start
// included); one that ended during it is missed, which a pool under load
// does not do. A failed snapshot leaves the cost out.
func (e *env) costed(ctx context.Context, f func() LoadResult) LoadResult {
	return e.costedOn(ctx, e.pool, f)
}

// costedOn is costed for the backends of pool's database.
func (e *env) costedOn(ctx context.Context, pool *pgxpool.Pool, f func() LoadResult) LoadResult {
	before, err := cpuSnapshotOf(ctx, pool)
	r := f()
	if err != nil || r.Requests == 0 {
		return r
	}
	after, err := cpuSnapshotOf(ctx, pool)
	if err != nil {
		return r
	}
	perReq := func(ticks int64) float64 { return procs.TicksToMillis(ticks) / float64(r.Requests) }
	r.CPU = &CPUCost{Machine: perReq(after.machine - before.machine), Database: perReq(procs.TicksSince(before.backends, after.backends))}
	return r
}

// CPUCeiling is the highest phasepay ÷ bare throughput that phasepay's
// database work allows, if everything else it spends per request (its api,
// the PSP call, the load generator) cost what the baseline spends: the
// baseline's machine CPU per request over the same with phasepay's
// database CPU in place of the baseline's. 0 when either cost is missing.
func CPUCeiling(phasepay, bare *CPUCost) float64 {
	if phasepay == nil || bare == nil {
		return 0
	}
	with := bare.Machine - bare.Database + phasepay.Database
	if with <= 0 {
		return 0
	}
	return bare.Machine / with
}
