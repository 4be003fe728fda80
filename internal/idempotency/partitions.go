package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PartitionsAhead is how many days of partitions, today included, are kept
// created ahead of the clock; one more day behind covers a clock that lags.
const PartitionsAhead = 4

// MaintenanceLockTimeout is the lock_timeout of the partition maintenance
// statements that may take a lock a claim would queue behind: ATTACH with a
// DEFAULT partition present (ACCESS EXCLUSIVE on the DEFAULT partition) and
// a plain DETACH (ACCESS EXCLUSIVE on the parent, used only beside a DEFAULT
// partition). While such a statement waits for a long reader, every claim
// and lookup queues behind it: this bounds that queue. A statement that
// gives up is retried by the next maintenance pass (partitions are kept
// PartitionsAhead days ahead, so a missed pass costs nothing).
const MaintenanceLockTimeout = 500 * time.Millisecond

// DayPartition names the partition of idempotency_keys that holds the keys
// created on day (its UTC day, whatever day's location), as
// idempotency_keys_ensure_partitions (migrations/00016) names the ones it
// creates and the statements below match them: idempotency_keys_pYYYYMMDD.
// Go code that needs a day's name (the tests) takes it from here;
// TestPartitionsCreatedAhead checks it against the names the database
// gives.
func DayPartition(day time.Time) string {
	return dayPartitionPrefix + day.UTC().Format("20060102")
}

const dayPartitionPrefix = "idempotency_keys_p"

// Beginner is what partition maintenance runs on: a *pgxpool.Pool, a
// *pgx.Conn, or the maintenance lock's connection (maintenance.Conn). Its
// statements open transactions of their own (to scope SET LOCAL) or must
// run outside any (DETACH … CONCURRENTLY), unless it runs every statement
// in a transaction (TransactionsOnly).
type Beginner interface {
	DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

// transactionsOnly reports whether q runs every statement in a
// transaction (maintenance.Conn behind a transaction pooler, where each
// takes the maintenance lock): DETACH … CONCURRENTLY, which cannot run in
// one, gives way there to the plain DETACH, held to
// MaintenanceLockTimeout.
func transactionsOnly(q DBTX) bool {
	t, ok := q.(interface{ TransactionsOnly() bool })
	return ok && t.TransactionsOnly()
}

// ensurePartitionsSQL creates the missing daily partitions from yesterday to
// PartitionsAhead days on (UTC), by the database's clock: standalone tables
// attached with ATTACH PARTITION (migrations/00006), never CREATE TABLE …
// PARTITION OF, whose ACCESS EXCLUSIVE lock on the parent would stall every
// claim behind any long reader.
const ensurePartitionsSQL = `
SELECT idempotency_keys_ensure_partitions((phasepay_now() AT TIME ZONE 'UTC')::date - 1, $1 + 1)`

// setLockTimeoutSQL scopes a lock_timeout to the current transaction.
const setLockTimeoutSQL = `SELECT set_config('lock_timeout', $1, true)`

// EnsurePartitions creates the partitions that inserts will need soon and
// returns how many it created. The API runs it at start and the reaper on
// every maintenance pass, so an insert never fails for want of a partition.
// A day whose rows already sit in a DEFAULT partition is skipped, not an
// error (see migrations/00006); MissingDays lists such days.
func EnsurePartitions(ctx context.Context, db Beginner) (int, error) {
	var created int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setLockTimeoutSQL, lockTimeoutSetting(MaintenanceLockTimeout)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, ensurePartitionsSQL, PartitionsAhead).Scan(&created)
	})
	if err != nil {
		return 0, fmt.Errorf("ensure partitions: %w", err)
	}
	return created, nil
}

// missingDaysSQL lists the days from yesterday to PartitionsAhead days on
// that have no attached partition of their own.
const missingDaysSQL = `
SELECT d::date
  FROM generate_series((phasepay_now() AT TIME ZONE 'UTC')::date - 1,
                       (phasepay_now() AT TIME ZONE 'UTC')::date + $1::int - 1, interval '1 day') d
 WHERE NOT EXISTS (
       SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'idempotency_keys'::regclass
          AND c.relname = 'idempotency_keys_p' || to_char(d, 'YYYYMMDD'))
 ORDER BY 1`

// MissingDays returns the days (UTC midnights) EnsurePartitions should have
// partitioned and has not: days whose keys sit in an operator's DEFAULT
// partition, or days a failed maintenance pass left behind. The reaper and
// the api log them as warnings; docs/operations.md says how to repair.
func MissingDays(ctx context.Context, q DBTX) ([]time.Time, error) {
	rows, err := q.Query(ctx, missingDaysSQL, PartitionsAhead)
	if err != nil {
		return nil, fmt.Errorf("missing partitions: %w", err)
	}
	days, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("missing partitions: %w", err)
	}
	return days, nil
}

func lockTimeoutSetting(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// PartitionReport says what a retention pass did.
type PartitionReport struct {
	// Dropped names the partitions dropped.
	Dropped []string
	// Kept names the expired partitions kept, with why.
	Kept []KeptPartition
	// DroppedHeads names the monthly partitions of key heads dropped
	// (migrations/00008): those with no day partition left of their month
	// or before.
	DroppedHeads []string
}

// KeptPartition is an expired partition that was not dropped.
type KeptPartition struct {
	Name   string
	Reason string
}

// listPartitionsSQL finds our daily partitions, attached or not: a table
// left detached by a pass that died between DETACH and DROP is found by its
// name and dropped on the next pass. inhdetachpending marks a DETACH …
// CONCURRENTLY that was interrupted; it must be finished with FINALIZE.
const listPartitionsSQL = `
SELECT c.relname,
       (to_date(substring(c.relname from '[0-9]{8}$'), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
           <= phasepay_now() - $1 * interval '1 microsecond' AS expired,
       i.inhrelid IS NOT NULL AS attached,
       coalesce(i.inhdetachpending, false) AS detach_pending
  FROM pg_class c
  LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = 'idempotency_keys'::regclass
 WHERE c.relkind = 'r'
   AND c.relname ~ '^idempotency_keys_p[0-9]{8}$'
   AND pg_table_is_visible(c.oid)
 ORDER BY c.relname`

// hasDefaultPartitionSQL: DETACH … CONCURRENTLY refuses to run while the
// table has a DEFAULT partition. phasepay creates none, but an operator
// might; then the plain DETACH (a brief ACCESS EXCLUSIVE lock) is used.
const hasDefaultPartitionSQL = `
SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = 'idempotency_keys'::regclass AND partdefid <> 0)`

// DropExpiredPartitions drops every daily partition whose range ended more
// than retention ago, whole: DETACH (CONCURRENTLY, so claims and lookups
// are not blocked), then DROP TABLE. No row is deleted one by one, so no
// WAL per row is written and no dead tuples are left for VACUUM.
//
// A partition that still holds a started key is kept until that key is
// finished: its request may still be resumed, and forgetting its key would
// let a retry charge again. One holding a key finished less than retention
// ago is kept too (see keepReason). (Done keys are terminal, and new keys
// land in today's partition, so a partition with no started key gets none
// later.)
//
// q must not be in a transaction: DETACH … CONCURRENTLY cannot run in one.
// If ctx ends during a concurrent detach, or its wait for older
// transactions outlasts the session's lock_timeout or statement_timeout,
// the partition is left "detach pending", which the next call finishes with
// FINALIZE. A concurrent detach makes no claim wait, so the session's
// timeouts may be generous (the reaper sets its maintenance timeout); the
// plain DETACH used beside a DEFAULT partition is held to
// MaintenanceLockTimeout whatever the session says.
func DropExpiredPartitions(ctx context.Context, q Beginner, retention time.Duration) (PartitionReport, error) {
	type part struct {
		name                             string
		expired, attached, detachPending bool
	}
	rows, err := q.Query(ctx, listPartitionsSQL, retention.Microseconds())
	if err != nil {
		return PartitionReport{}, fmt.Errorf("list partitions: %w", err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (part, error) {
		var p part
		err := row.Scan(&p.name, &p.expired, &p.attached, &p.detachPending)
		return p, err
	})
	if err != nil {
		return PartitionReport{}, fmt.Errorf("list partitions: %w", err)
	}

	var report PartitionReport
	for _, p := range parts {
		if !p.expired {
			continue
		}
		ident := pgx.Identifier{p.name}.Sanitize()
		switch {
		case p.detachPending:
			if err := finalizeDetach(ctx, q, "idempotency_keys", ident); err != nil {
				return report, fmt.Errorf("finalize detach of %s: %w", p.name, err)
			}
		case p.attached:
			reason, err := keepReason(ctx, q, ident, retention)
			if err != nil {
				return report, fmt.Errorf("check %s: %w", p.name, err)
			}
			if reason != "" {
				report.Kept = append(report.Kept, KeptPartition{Name: p.name, Reason: reason})
				continue
			}
			if err := detach(ctx, q, ident); err != nil {
				return report, fmt.Errorf("detach %s: %w", p.name, err)
			}
		}
		if _, err := q.Exec(ctx, "DROP TABLE "+ident); err != nil {
			return report, fmt.Errorf("drop %s: %w", p.name, err)
		}
		report.Dropped = append(report.Dropped, p.name)
	}
	dropped, err := dropExpiredHeadMonths(ctx, q)
	report.DroppedHeads = dropped
	return report, err
}

// listHeadMonthsSQL finds the monthly partitions of key heads (attached or
// left detached by an interrupted pass) that end at or before the oldest
// day any key may still be of: the first day of the oldest day partition
// left, attached or not, or the day of the oldest row of an operator's
// DEFAULT partition ($1, NULL when there is none or it is empty), whichever
// is older. Every key of the months listed is gone. With no key left
// anywhere, none is listed.
//
// *Closes*: a DEFAULT partition (the runbook's missed day) holding a key
// of a month whose day partitions have all been dropped. Counting only the
// named day partitions, retention dropped that month's heads; the key,
// started or finished, became invisible to claims, and a client's retry
// created a second charge with a second authorization while the reaper
// still drove the first (TestRetentionKeepsTheHeadsOfKeysInTheDefaultPartition).
const listHeadMonthsSQL = `
WITH oldest AS (
    SELECT least(min(to_date(substring(relname from '[0-9]{8}$'), 'YYYYMMDD')),
                 ($1::timestamptz AT TIME ZONE 'UTC')::date) AS day
      FROM pg_class
     WHERE relkind = 'r' AND relname ~ '^idempotency_keys_p[0-9]{8}$' AND pg_table_is_visible(oid)
)
SELECT c.relname, i.inhrelid IS NOT NULL AS attached, coalesce(i.inhdetachpending, false) AS detach_pending
  FROM pg_class c
  LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = 'idempotency_key_heads'::regclass
  CROSS JOIN oldest
 WHERE c.relkind = 'r'
   AND c.relname ~ '^idempotency_key_heads_p[0-9]{6}$'
   AND pg_table_is_visible(c.oid)
   AND to_date(substring(c.relname from '[0-9]{6}$') || '01', 'YYYYMMDD') + interval '1 month' <= oldest.day
 ORDER BY c.relname`

// defaultPartitionSQL names the DEFAULT partition of idempotency_keys, if
// an operator made one.
const defaultPartitionSQL = `
SELECT partdefid::regclass::text FROM pg_partitioned_table
 WHERE partrelid = 'idempotency_keys'::regclass AND partdefid <> 0`

// oldestInDefault returns the creation time of the oldest key in the
// DEFAULT partition of idempotency_keys, or nil when there is no such
// partition or it holds no key. It reads the whole DEFAULT partition: it
// holds only the days an operator could not partition in time.
func oldestInDefault(ctx context.Context, q DBTX) (*time.Time, error) {
	var name string
	err := q.QueryRow(ctx, defaultPartitionSQL).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find the DEFAULT partition: %w", err)
	}
	var oldest *time.Time
	// name is the catalog's own quoted spelling (regclass::text).
	if err := q.QueryRow(ctx, "SELECT min(created_at) FROM "+name).Scan(&oldest); err != nil {
		return nil, fmt.Errorf("oldest key in %s: %w", name, err)
	}
	return oldest, nil
}

// dropExpiredHeadMonths drops the months listHeadMonthsSQL lists, as days
// are dropped: DETACH … CONCURRENTLY (heads have no DEFAULT partition),
// then DROP TABLE.
func dropExpiredHeadMonths(ctx context.Context, q Beginner) ([]string, error) {
	type month struct {
		name                    string
		attached, detachPending bool
	}
	inDefault, err := oldestInDefault(ctx, q)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, listHeadMonthsSQL, inDefault)
	if err != nil {
		return nil, fmt.Errorf("list head months: %w", err)
	}
	months, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (month, error) {
		var m month
		err := row.Scan(&m.name, &m.attached, &m.detachPending)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("list head months: %w", err)
	}
	var dropped []string
	for _, m := range months {
		ident := pgx.Identifier{m.name}.Sanitize()
		switch {
		case m.detachPending:
			if err := finalizeDetach(ctx, q, "idempotency_key_heads", ident); err != nil {
				return dropped, fmt.Errorf("finalize detach of %s: %w", m.name, err)
			}
		case m.attached:
			if err := detachFrom(ctx, q, "idempotency_key_heads", ident, transactionsOnly(q)); err != nil {
				return dropped, fmt.Errorf("detach %s: %w", m.name, err)
			}
		}
		if _, err := q.Exec(ctx, "DROP TABLE "+ident); err != nil {
			return dropped, fmt.Errorf("drop %s: %w", m.name, err)
		}
		dropped = append(dropped, m.name)
	}
	return dropped, nil
}

// isPartitionSQL: whether table $1 is still a partition of $2, attached or
// with its detach pending.
const isPartitionSQL = `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = $1::regclass AND inhparent = $2::regclass)`

// finalizeDetach completes the DETACH … CONCURRENTLY of partition ident
// that an earlier pass left pending (its second phase was interrupted).
// That earlier DETACH may complete by itself after the listing saw it
// pending: its cancellation reaches the server only after the wait it was
// cancelled in had ended. Then FINALIZE fails on a table that is no longer
// a partition, and there is nothing left to do but drop it.
func finalizeDetach(ctx context.Context, q DBTX, parent, ident string) error {
	_, err := q.Exec(ctx, "ALTER TABLE "+parent+" DETACH PARTITION "+ident+" FINALIZE")
	if err == nil {
		return nil
	}
	var still bool
	if qerr := q.QueryRow(ctx, isPartitionSQL, ident, parent).Scan(&still); qerr != nil || still {
		return err
	}
	return nil
}

// keepReason says why an expired partition must stay, or "" if it may go.
// RETENTION counts from when a key finished, not from the day it was
// created: a key that was stuck for days (a long PSP outage) and finished
// an hour ago must still replay for its client. Both checks read an index,
// not the partition: the started check idempotency_keys_unfinished, the
// finished_at one idempotency_keys_finished_late (migrations/00026). Only
// a key finished after its own day ended can have finished less than
// RETENTION ago, the day having ended before that; the index holds just
// those. The check read the whole partition, at every maintenance run
// while a late key kept it (pitfall Q9 "A backlog every pass reads
// again").
func keepReason(ctx context.Context, q DBTX, ident string, retention time.Duration) (string, error) {
	// Not done (started or needs_attention): the request may still be
	// resumed, retried by an operator or resolved, and its key must stay
	// to keep a client's retry from charging again, whatever its age.
	var started bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+ident+" WHERE state <> 'done')").Scan(&started); err != nil {
		return "", err
	}
	if started {
		return "holds a started key that is not finished yet", nil
	}
	var until *time.Time
	err := q.QueryRow(ctx, "SELECT max(finished_at) + $1 * interval '1 microsecond' FROM "+ident+
		" WHERE "+finishedLate+
		" HAVING max(finished_at) + $1 * interval '1 microsecond' > phasepay_now()", retention.Microseconds()).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return "holds a key finished less than RETENTION ago; kept until " + until.UTC().Format(time.RFC3339), nil
}

// finishedLate is the predicate of idempotency_keys_finished_late, spelled
// exactly alike so that the planner can prove a query's rows are all in
// it: a key finished after the (UTC) day it was created on.
const finishedLate = `(finished_at AT TIME ZONE 'UTC') >= date_trunc('day', created_at AT TIME ZONE 'UTC') + interval '1 day'`

func detach(ctx context.Context, q Beginner, ident string) error {
	var hasDefault bool
	if err := q.QueryRow(ctx, hasDefaultPartitionSQL).Scan(&hasDefault); err != nil {
		return err
	}
	return detachFrom(ctx, q, "idempotency_keys", ident, hasDefault || transactionsOnly(q))
}

// detachFrom detaches partition ident from parent: CONCURRENTLY, unless
// plain, which takes ACCESS EXCLUSIVE on the parent.
func detachFrom(ctx context.Context, q Beginner, parent, ident string, plain bool) error {
	stmt := "ALTER TABLE " + parent + " DETACH PARTITION " + ident
	if !plain {
		_, err := q.Exec(ctx, stmt+" CONCURRENTLY")
		return err
	}
	// ACCESS EXCLUSIVE on the parent: every claim queues behind it while it
	// waits, so it waits briefly, and a later pass tries again.
	return pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setLockTimeoutSQL, lockTimeoutSetting(MaintenanceLockTimeout)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, stmt)
		return err
	})
}

// partitionsAheadSQL counts the attached partitions from today (UTC) on.
const partitionsAheadSQL = `
SELECT count(*)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'idempotency_keys'::regclass
   AND c.relname ~ '^idempotency_keys_p[0-9]{8}$'
   AND c.relname >= 'idempotency_keys_p' || to_char((phasepay_now() AT TIME ZONE 'UTC')::date, 'YYYYMMDD')`

// DaysAhead returns how many days of partitions exist from today on, today
// included: below 2, tomorrow's inserts are at risk (an alarm).
func DaysAhead(ctx context.Context, q DBTX) (int, error) {
	var n int
	if err := q.QueryRow(ctx, partitionsAheadSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("count partitions ahead: %w", err)
	}
	return n, nil
}
