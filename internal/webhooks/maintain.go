package webhooks

import (
	"context"
	"errors"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/maintenance"
)

// MaintenanceLockID is the advisory lock (namespace 0x70700012) that lets
// one deliverer at a time maintain the events partitions; the maintenance
// service holds it on the connection the chore runs on (package
// maintenance).
const MaintenanceLockID = 0x70700012

// EventsMaintenance says what one run of the events partition maintenance
// did.
type EventsMaintenance struct {
	Created int // days created ahead
	events.Report
}

// newMaintenance is the deliverer's partition maintenance service, which
// Run starts beside the deliveries.
func newMaintenance(d *Deliverer) (*maintenance.Service[EventsMaintenance], error) {
	return maintenance.New(d.pool, maintenance.Config{
		Name:     "event partition maintenance",
		LockID:   MaintenanceLockID,
		Interval: d.cfg.MaintenanceInterval,
		Logger:   d.log,
		Pooled:   d.cfg.Pooled,
	}, d.maintainPartitions)
}

// Maintenance is the deliverer's partition maintenance service (exposed
// for tests: its RunOnce and TestSignals).
func (d *Deliverer) Maintenance() *maintenance.Service[EventsMaintenance] { return d.maintenance }

// maintainPartitions is the maintenance chore: it creates the events
// tables' days ahead and drops the days past Retention (never one with a
// pending delivery), on conn, the connection that holds the maintenance
// lock. It sets nothing in a session: a DETACH … CONCURRENTLY cut off by
// the statement timeout is left pending and finished by a later run; behind
// a transaction pooler the plain DETACH is used (maintenance.Conn).
func (d *Deliverer) maintainPartitions(ctx context.Context, conn *maintenance.Conn) (EventsMaintenance, error) {
	var res EventsMaintenance
	created, cerr := events.EnsurePartitions(ctx, conn)
	res.Created = created
	if created > 0 {
		d.log.InfoContext(ctx, "created event partitions ahead", "count", created)
	}
	report, derr := events.DropExpiredPartitions(ctx, conn, d.cfg.Retention)
	res.Report = report
	if len(report.Dropped) > 0 {
		d.log.InfoContext(ctx, "dropped event days past retention", "days", report.Dropped, "retention", d.cfg.Retention.String())
	}
	if len(report.Kept) > 0 {
		d.log.WarnContext(ctx, "kept event days past retention: a delivery is still being retried", "days", report.Kept)
	}
	return res, errors.Join(cerr, derr)
}
