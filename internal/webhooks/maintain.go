package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/events"
)

// maintenanceLockID is the session advisory lock (namespace 0x70700012)
// that lets one deliverer at a time maintain the events partitions.
const maintenanceLockID = 0x70700012

// maintain creates the events tables' days ahead and drops the days past
// Retention (never one with a pending delivery), if it is time and no
// other deliverer is doing it.
func (d *Deliverer) maintain(ctx context.Context) error {
	if !d.lastMaintenance.IsZero() && time.Since(d.lastMaintenance) < d.cfg.MaintenanceInterval {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, maintenanceLockID).Scan(&locked); err != nil {
		return fmt.Errorf("maintenance lock: %w", err)
	}
	if !locked {
		return nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, maintenanceLockID); err != nil {
			conn.Conn().Close(context.Background()) //nolint:errcheck // closing drops the lock
		}
	}()
	d.lastMaintenance = time.Now()
	created, cerr := events.EnsurePartitions(ctx, conn)
	if created > 0 {
		d.log.InfoContext(ctx, "created event partitions ahead", "count", created)
	}
	report, derr := events.DropExpiredPartitions(ctx, conn, d.cfg.Retention)
	if len(report.Dropped) > 0 {
		d.log.InfoContext(ctx, "dropped event days past retention", "days", report.Dropped, "retention", d.cfg.Retention.String())
	}
	if len(report.Kept) > 0 {
		d.log.WarnContext(ctx, "kept event days past retention: a delivery is still being retried", "days", report.Kept)
	}
	return errors.Join(cerr, derr)
}
