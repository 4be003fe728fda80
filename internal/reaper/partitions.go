package reaper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/maintenance"
)

// MaintenanceLockID is the advisory lock (namespace 0x70700004) that lets
// one reaper at a time maintain the key partitions; the maintenance
// service holds it on the connection the chore runs on (package
// maintenance).
const MaintenanceLockID = 0x70700004

// MaintenanceResult says what one partition maintenance run did.
type MaintenanceResult struct {
	Created    int // partitions created
	Partitions idempotency.PartitionReport
}

// maintainPartitions is the maintenance chore: it creates partitions ahead
// and drops the expired ones, on conn, the connection that holds the
// maintenance lock (package maintenance).
//
// Without a pooler, conn is a session of the run's own, closed after it:
// it may take up to the run's own timeout for its reads of whole
// partitions and a DETACH … CONCURRENTLY waiting for old transactions
// (which blocks no one), so it raises its statement and lock timeouts,
// which end with the session. Behind a transaction pooler there is no
// session to raise them in (a SET would land on whichever server
// connection is free, and stay there for others): the statements run under
// the database's own timeouts (5 s, 2 s), each in a transaction that holds
// the lock, so a partition is detached with the plain DETACH (held to
// idempotency.MaintenanceLockTimeout), and a partition too large to check
// within 5 s is kept until one does (docs/operations.md, "Behind a
// pooler", says how to give the reapers a role of their own with longer
// limits). The statements that could make claims queue behind them set a
// short lock_timeout of their own either way.
func (r *Reaper) maintainPartitions(ctx context.Context, conn *maintenance.Conn) (*MaintenanceResult, error) {
	res := &MaintenanceResult{}
	if !r.cfg.Pooled {
		timeout := fmt.Sprintf("%dms", r.cfg.MaintenanceTimeout.Milliseconds())
		if _, err := conn.Exec(ctx, raiseTimeoutsSQL, timeout); err != nil {
			return res, fmt.Errorf("maintenance settings: %w", err)
		}
	}
	var err error

	// A failure to create partitions (a lock timeout behind a long
	// reader, say) must not stop retention, nor the other way round.
	var errs []error
	if res.Created, err = idempotency.EnsurePartitions(ctx, conn); err != nil {
		errs = append(errs, err)
	}
	r.m.partitionsCreated.Add(ctx, int64(res.Created))
	if res.Created > 0 {
		r.log.InfoContext(ctx, "created partitions ahead", "count", res.Created)
	}
	if missing, err := idempotency.MissingDays(ctx, conn); err != nil {
		errs = append(errs, err)
	} else if len(missing) > 0 {
		r.log.WarnContext(ctx, "days without a partition of their own (their keys go to the DEFAULT partition; see docs/operations.md)",
			"days", formatDays(missing))
	}
	ahead, err := idempotency.DaysAhead(ctx, conn)
	if err != nil {
		errs = append(errs, err)
	} else {
		r.m.daysAhead.Record(ctx, int64(ahead))
	}

	start := time.Now()
	report, err := idempotency.DropExpiredPartitions(ctx, conn, r.cfg.Retention)
	res.Partitions = report
	r.m.partitionsDropped.Add(ctx, int64(len(report.Dropped)))
	for _, name := range report.Dropped {
		r.log.InfoContext(ctx, "dropped partition past retention", "partition", name, "retention", r.cfg.Retention.String())
	}
	if len(report.Dropped) > 0 {
		r.log.InfoContext(ctx, "retention pass", "dropped", len(report.Dropped), "duration", time.Since(start))
	}
	for _, k := range report.Kept {
		r.log.WarnContext(ctx, "kept partition past retention", "partition", k.Name, "reason", k.Reason)
	}
	return res, errors.Join(append(errs, err)...)
}

// raiseTimeoutsSQL gives the maintenance session the run's timeout ($1).
const raiseTimeoutsSQL = `SELECT set_config('statement_timeout', $1, false), set_config('lock_timeout', $1, false)`

func formatDays(days []time.Time) []string {
	out := make([]string, len(days))
	for i, d := range days {
		out[i] = d.Format(time.DateOnly)
	}
	return out
}
