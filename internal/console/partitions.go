package console

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// partitionDay is one day of the day-partitioned tables on the overview:
// each table's partition of that day, as big as it is and going when it
// goes.
type partitionDay struct {
	Day time.Time
	// Rows counts each table's live rows that day, by table, as the
	// statistics system has them (pg_stat_user_tables): kept up to date by
	// every insert and delete without reading the table, and an estimate
	// for that (a moment behind the last commits).
	Rows map[string]int64
	// Unfinished counts the day's keys not done, up to unfinishedLimit:
	// while there are any, the day's partition of idempotency_keys is kept
	// past its date.
	Unfinished int64
	// KeysDropAfter is when the reaper may drop the day's keys (RETENTION
	// after the day's end), EventsDropAfter its events, deliveries and
	// attempts (EVENTS_RETENTION after it).
	KeysDropAfter, EventsDropAfter time.Time
	// KeysKept: past KeysDropAfter and still here (unfinished keys, or no
	// reaper ran since).
	KeysKept bool
}

// dayPartitionedTables are the tables partitioned by day, each with the
// retention that decides when a day goes (reaper: RETENTION for keys,
// EVENTS_RETENTION for events, deliveries and attempts).
func (s *Server) dayPartitionedTables() map[string]time.Duration {
	return map[string]time.Duration{
		"idempotency_keys":   s.cfg.Retention,
		"events":             s.cfg.EventsRetention,
		"webhook_deliveries": s.cfg.EventsRetention,
		"webhook_attempts":   s.cfg.EventsRetention,
	}
}

// partitionsSQL lists the attached partitions of the day-partitioned
// tables with the statistics system's live-row counts: reading the
// catalog, never the tables.
const partitionsSQL = `
SELECT p.relname, c.relname, coalesce(s.n_live_tup, 0)
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
  JOIN pg_class p ON p.oid = i.inhparent
  LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE p.relname = ANY($1) AND pg_table_is_visible(p.oid)
 ORDER BY p.relname, c.relname`

// unfinishedLimit is where the count of a day's unfinished keys stops:
// the count reads what it counts, and a page refreshes every few seconds.
const unfinishedLimit = 1000

// unfinishedInSQL counts the keys not done in one day's partition of
// idempotency_keys (%[1]s, its name), up to unfinishedLimit (%[2]d). The
// partition is named, not found by a range of created_at: against a range
// of parameters the planner guesses a handful of rows and reads them with
// a bitmap scan, which reads every entry before a LIMIT can stop it. The
// overview counted every unfinished key of every day at each refresh:
// during a PSP outage, millions (pitfall Q9 "A backlog every pass reads
// again").
const unfinishedInSQL = `SELECT '%[1]s', (SELECT count(*) FROM (SELECT FROM %[1]s WHERE state <> 'done' LIMIT %[2]d) u)`

// dayPartitionName is the name of one of phasepay's day partitions of
// idempotency_keys, which unfinishedInSQL may name as is.
var dayPartitionName = regexp.MustCompile(`^idempotency_keys_p[0-9]{8}$`)

// unfinishedByPartition counts the unfinished keys of each named day
// partition of idempotency_keys, in one statement of unfinishedInSQL's,
// sent with the simple protocol: its text changes with the days, and is
// planned for them.
func (s *Server) unfinishedByPartition(ctx context.Context, names []string) (pgx.Rows, error) {
	var parts []string
	for _, n := range names {
		if dayPartitionName.MatchString(n) {
			parts = append(parts, fmt.Sprintf(unfinishedInSQL, n, unfinishedLimit))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, `SELECT '', 0::bigint WHERE false`)
	}
	return s.cfg.Pool.Query(ctx, strings.Join(parts, "\nUNION ALL\n"), pgx.QueryExecModeSimpleProtocol)
}

func (s *Server) partitions(ctx context.Context) ([]partitionDay, error) {
	tables := s.dayPartitionedTables()
	names := make([]string, 0, len(tables))
	for t := range tables {
		names = append(names, t)
	}
	rows, err := s.cfg.Pool.Query(ctx, partitionsSQL, names)
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	days := map[time.Time]*partitionDay{}
	var (
		table, name string
		n           int64
		keyDays     []string
	)
	_, err = pgx.ForEachRow(rows, []any{&table, &name, &n}, func() error {
		if table == "idempotency_keys" {
			keyDays = append(keyDays, name)
		}
		day, err := time.Parse("20060102", name[strings.LastIndex(name, "_p")+2:])
		if err != nil {
			return nil // not one of phasepay's day partitions (an operator's DEFAULT one)
		}
		d := days[day]
		if d == nil {
			end := day.AddDate(0, 0, 1)
			d = &partitionDay{Day: day, Rows: map[string]int64{}, KeysDropAfter: end.Add(s.cfg.Retention), EventsDropAfter: end.Add(s.cfg.EventsRetention)}
			d.KeysKept = time.Now().After(d.KeysDropAfter)
			days[day] = d
		}
		d.Rows[table] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	rows, err = s.unfinishedByPartition(ctx, keyDays)
	if err != nil {
		return nil, fmt.Errorf("unfinished keys by partition: %w", err)
	}
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		if day, err := time.Parse("20060102", name[strings.LastIndex(name, "_p")+2:]); err == nil && days[day] != nil {
			days[day].Unfinished = n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("unfinished keys by partition: %w", err)
	}
	out := make([]partitionDay, 0, len(days))
	for _, d := range days {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b partitionDay) int { return b.Day.Compare(a.Day) })
	return out, nil
}
