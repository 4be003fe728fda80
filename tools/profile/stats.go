package profile

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// What the database says it did, read before and after the run: the
// tables' row counters and the WAL's, each a counter whose delta is the
// run's, and pg_stat_statements, reset just before the run.

// TableCounts is a table's row writes; a partitioned table's are its
// partitions' summed.
type TableCounts struct {
	Inserts int64 `json:"inserts"`
	Updates int64 `json:"updates"`
	HOT     int64 `json:"hot_updates"`
}

// tablesSQL sums each partition under its root (pg_partition_root is the
// table itself for one that is not a partition).
const tablesSQL = `
SELECT coalesce(pg_partition_root(relid), relid)::regclass::text, sum(n_tup_ins)::bigint, sum(n_tup_upd)::bigint, sum(n_tup_hot_upd)::bigint
  FROM pg_stat_user_tables GROUP BY 1`

func readTables(ctx context.Context, conn *pgx.Conn) (map[string]TableCounts, error) {
	rows, err := conn.Query(ctx, tablesSQL)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	m := map[string]TableCounts{}
	var name string
	var c TableCounts
	_, err = pgx.ForEachRow(rows, []any{&name, &c.Inserts, &c.Updates, &c.HOT}, func() error {
		m[name] = c
		return nil
	})
	return m, err
}

// tableDeltas is after − before for every table that wrote a row.
func tableDeltas(before, after map[string]TableCounts) map[string]TableCounts {
	d := map[string]TableCounts{}
	for name, a := range after {
		b := before[name]
		c := TableCounts{Inserts: a.Inserts - b.Inserts, Updates: a.Updates - b.Updates, HOT: a.HOT - b.HOT}
		if c != (TableCounts{}) {
			d[name] = c
		}
	}
	return d
}

// WALStats is pg_stat_wal's counters (the whole cluster's).
type WALStats struct {
	Records int64 `json:"records"`
	FPI     int64 `json:"fpi"`
	Bytes   int64 `json:"bytes"`
}

func readWAL(ctx context.Context, conn *pgx.Conn) (w WALStats, lsn string, err error) {
	err = conn.QueryRow(ctx, `SELECT wal_records, wal_fpi, wal_bytes::bigint, pg_current_wal_insert_lsn()::text FROM pg_stat_wal`).
		Scan(&w.Records, &w.FPI, &w.Bytes, &lsn)
	return w, lsn, err
}

// Statement is one statement's share of the run.
type Statement struct {
	Query   string  `json:"query"`
	Calls   int64   `json:"calls"`
	TotalMS float64 `json:"total_ms"`
}

// statementsSQL leaves out the profile's own reads of the statistics.
const statementsSQL = `
SELECT query, calls, total_exec_time FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND query NOT LIKE '%pg_stat%' AND query NOT LIKE '%pg_current_wal%' AND query NOT LIKE '%pg_class%'`

func readStatements(ctx context.Context, conn *pgx.Conn) ([]Statement, error) {
	rows, err := conn.Query(ctx, statementsSQL)
	if err != nil {
		return nil, fmt.Errorf("statements: %w", err)
	}
	s, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Statement])
	if err != nil {
		return nil, fmt.Errorf("statements: %w", err)
	}
	sort.Slice(s, func(i, j int) bool { return s[i].TotalMS > s[j].TotalMS })
	return s, nil
}

// indexNamesSQL names each index's relfilenode after its root (a
// partition's index after the partitioned index it is attached to).
const indexNamesSQL = `
SELECT c.relfilenode, coalesce(pg_partition_root(c.oid), c.oid)::regclass::text
  FROM pg_class c WHERE c.relkind = 'i' AND c.relfilenode <> 0`

func readIndexNames(ctx context.Context, conn *pgx.Conn) (map[uint32]string, error) {
	rows, err := conn.Query(ctx, indexNamesSQL)
	if err != nil {
		return nil, fmt.Errorf("index names: %w", err)
	}
	m := map[uint32]string{}
	var rel uint32
	var name string
	_, err = pgx.ForEachRow(rows, []any{&rel, &name}, func() error {
		m[rel] = name
		return nil
	})
	return m, err
}

// IndexCounts is one index's B-tree records in the run.
type IndexCounts struct {
	// Entries is new leaf entries (INSERT_LEAF, INSERT_POST).
	Entries int `json:"entries"`
	// Splits is page splits (SPLIT_L, SPLIT_R).
	Splits int `json:"splits"`
	// Other is every other B-tree record (downlinks, new roots,
	// deduplication).
	Other int `json:"other"`
}

// indexDeltas sums the WAL's B-tree records per index name; a
// relfilenode no index of this database has (another database's, a
// catalog's) is left out.
func indexDeltas(counts WALCounts, names map[uint32]string) map[string]IndexCounts {
	d := map[string]IndexCounts{}
	for rel, kinds := range counts {
		name, ok := names[rel]
		if !ok {
			continue
		}
		c := d[name]
		for kind, n := range kinds {
			switch kind {
			case "INSERT_LEAF", "INSERT_POST":
				c.Entries += n
			case "SPLIT_L", "SPLIT_R":
				c.Splits += n
			default:
				c.Other += n
			}
		}
		d[name] = c
	}
	return d
}
