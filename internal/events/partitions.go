package events

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RetentionDefault is how long events, their deliveries and their attempts
// are kept (EVENTS_RETENTION): past it, a whole day goes at once.
const RetentionDefault = 30 * 24 * time.Hour

// PartitionsAhead is how many days of partitions, today included, are kept
// created ahead; one more day behind covers a clock that lags.
const PartitionsAhead = 4

// maintenanceLockTimeout bounds the wait of a statement that a write could
// queue behind (the plain DETACH): a later pass tries again.
const maintenanceLockTimeout = "500ms"

// Beginner is what partition maintenance runs on: a *pgxpool.Pool or a
// *pgx.Conn, outside any transaction, or the maintenance lock's
// connection (maintenance.Conn), which behind a transaction pooler runs
// every statement in a transaction (TransactionsOnly).
type Beginner interface {
	DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

// transactionsOnly reports whether q runs every statement in a
// transaction: DETACH … CONCURRENTLY cannot run there.
func transactionsOnly(q DBTX) bool {
	t, ok := q.(interface{ TransactionsOnly() bool })
	return ok && t.TransactionsOnly()
}

// tables are the tables partitioned by the event's day, with the column
// they are partitioned on. A day's partitions are created and dropped
// together; events comes last in a drop so that a delivery never outlives
// its event, even for a moment.
var tables = []struct{ name, col string }{
	{"webhook_attempts", "event_created_at"},
	{"webhook_deliveries", "event_created_at"},
	{"events", "created_at"},
}

// ensureSQL creates the missing days of one table (migrations/00011):
// standalone tables attached with ATTACH PARTITION, never CREATE TABLE …
// PARTITION OF, whose ACCESS EXCLUSIVE lock on the parent would make every
// phase transaction that writes an event wait behind any long reader.
const ensureSQL = `SELECT phasepay_ensure_day_partitions($1, $2, (phasepay_now() AT TIME ZONE 'UTC')::date - 1, $3 + 1)`

// EnsurePartitions creates the partitions events will need soon and
// returns how many it created. The reaper calls it on every maintenance
// pass.
func EnsurePartitions(ctx context.Context, db Beginner) (int, error) {
	total := 0
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, maintenanceLockTimeout); err != nil {
			return err
		}
		for _, t := range tables {
			var n int
			if err := tx.QueryRow(ctx, ensureSQL, t.name, t.col, PartitionsAhead).Scan(&n); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			total += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ensure event partitions: %w", err)
	}
	return total, nil
}

// expiredDaysSQL lists the days whose events partition ended more than
// retention ago, attached or not (a pass that died between DETACH and DROP
// left it detached; it is found by name).
const expiredDaysSQL = `
SELECT substring(c.relname from '[0-9]{8}$')
  FROM pg_class c
 WHERE c.relkind = 'r'
   AND c.relname ~ '^(events|webhook_deliveries|webhook_attempts)_p[0-9]{8}$'
   AND pg_table_is_visible(c.oid)
   AND (to_date(substring(c.relname from '[0-9]{8}$'), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
       <= phasepay_now() - $1 * interval '1 microsecond'
 GROUP BY 1
 ORDER BY 1`

// attachedSQL says whether a partition is attached to parent, and whether
// an interrupted DETACH … CONCURRENTLY left it pending.
const attachedSQL = `
SELECT coalesce(bool_or(true), false), coalesce(bool_or(i.inhdetachpending), false)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = to_regclass($1) AND c.relname = $2`

// Report says what a retention pass did.
type Report struct {
	// Dropped names the days (YYYYMMDD) whose partitions were dropped.
	Dropped []string
	// Kept names the expired days kept because a delivery of theirs is
	// still pending (being retried).
	Kept []string
}

// DropExpiredPartitions drops, whole, the partitions of every day that
// ended more than retention ago: DETACH … CONCURRENTLY (no write waits for
// it), then DROP TABLE; never a row-by-row DELETE. A day that still holds a
// pending delivery (an event still being retried) is kept, whatever its
// age, until the delivery succeeds or is given up. q must not be in a
// transaction.
func DropExpiredPartitions(ctx context.Context, q Beginner, retention time.Duration) (Report, error) {
	var report Report
	rows, err := q.Query(ctx, expiredDaysSQL, retention.Microseconds())
	if err != nil {
		return report, fmt.Errorf("list event partitions: %w", err)
	}
	days, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return report, fmt.Errorf("list event partitions: %w", err)
	}
	for _, day := range days {
		deliveries := pgx.Identifier{"webhook_deliveries_p" + day}.Sanitize()
		var pending bool
		err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "webhook_deliveries_p"+day).Scan(&pending)
		if err == nil && pending {
			err = q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+deliveries+" WHERE state = 'pending')").Scan(&pending)
		}
		if err != nil {
			return report, fmt.Errorf("check day %s: %w", day, err)
		}
		if pending {
			report.Kept = append(report.Kept, day)
			continue
		}
		for _, t := range tables {
			if err := dropPartition(ctx, q, t.name, t.name+"_p"+day); err != nil {
				return report, err
			}
		}
		report.Dropped = append(report.Dropped, day)
	}
	return report, nil
}

func dropPartition(ctx context.Context, q Beginner, parent, part string) error {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, part).Scan(&exists); err != nil {
		return fmt.Errorf("drop %s: %w", part, err)
	}
	if !exists {
		return nil
	}
	var attached, pending bool
	if err := q.QueryRow(ctx, attachedSQL, parent, part).Scan(&attached, &pending); err != nil {
		return fmt.Errorf("drop %s: %w", part, err)
	}
	ident, parentIdent := pgx.Identifier{part}.Sanitize(), pgx.Identifier{parent}.Sanitize()
	switch {
	case pending:
		if _, err := q.Exec(ctx, "ALTER TABLE "+parentIdent+" DETACH PARTITION "+ident+" FINALIZE"); err != nil {
			return fmt.Errorf("finalize detach of %s: %w", part, err)
		}
	case attached && transactionsOnly(q):
		// The maintenance lock's connection behind a transaction pooler
		// runs every statement in a transaction, where CONCURRENTLY
		// cannot: the plain DETACH, which makes writes wait, waits
		// briefly itself, and a later pass tries again.
		err := pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, maintenanceLockTimeout); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "ALTER TABLE "+parentIdent+" DETACH PARTITION "+ident)
			return err
		})
		if err != nil {
			return fmt.Errorf("detach %s: %w", part, err)
		}
	case attached:
		if _, err := q.Exec(ctx, "ALTER TABLE "+parentIdent+" DETACH PARTITION "+ident+" CONCURRENTLY"); err != nil {
			return fmt.Errorf("detach %s: %w", part, err)
		}
	}
	if _, err := q.Exec(ctx, "DROP TABLE "+ident); err != nil {
		return fmt.Errorf("drop %s: %w", part, err)
	}
	return nil
}
