package profile

import (
	"sort"

	"github.com/phasepay/phasepay/tools/procs"
)

// Result is one run's cost per new charge.
type Result struct {
	// Schema names the schema profiled: "latest", or an A/B side.
	Schema        string  `json:"schema"`
	SchemaVersion int64   `json:"schema_version,omitempty"`
	Charges       int     `json:"charges"`
	Failed        int     `json:"failed"`
	Clients       int     `json:"clients"`
	Seconds       float64 `json:"seconds"`
	CPU           CPU     `json:"cpu_ms_per_charge"`
	// StatementMS is every statement's execution time per charge
	// (pg_stat_statements' total_exec_time, summed).
	StatementMS float64                `json:"statement_ms_per_charge"`
	Statements  []StatementPerCharge   `json:"statements"`
	Tables      map[string]TableRow    `json:"tables"`
	Indexes     map[string]IndexCounts `json:"-"`
	IndexRows   map[string]IndexRow    `json:"indexes"`
	WAL         WALPerCharge           `json:"wal_per_charge"`
	// WaldumpError says why the index entries are missing.
	WaldumpError string `json:"waldump_error,omitempty"`
	// APITop is the api's functions by cumulative share, APIFlat by
	// their own.
	APITop     []Func `json:"api_cpu_top_cum,omitempty"`
	APIFlat    []Func `json:"api_cpu_top_flat,omitempty"`
	PprofError string `json:"pprof_error,omitempty"`
}

// CPU is CPU time per charge, in milliseconds, from /proc.
type CPU struct {
	// Database is the run's client backends (the api's connections).
	Database float64 `json:"database"`
	// Background is the cluster's other processes (WAL writer,
	// checkpointer, background writer, …).
	Background float64 `json:"background"`
	API        float64 `json:"api"`
}

// StatementPerCharge is one statement's calls and time per charge.
type StatementPerCharge struct {
	Query          string  `json:"query"`
	CallsPerCharge float64 `json:"calls_per_charge"`
	MeanMS         float64 `json:"mean_ms"`
	MSPerCharge    float64 `json:"ms_per_charge"`
	SharePct       float64 `json:"share_pct"`
}

// TableRow is a table's row writes per charge.
type TableRow struct {
	Inserts float64 `json:"inserts"`
	Updates float64 `json:"updates"`
	HOT     float64 `json:"hot_updates"`
	// HOTRatio is HOT updates ÷ updates; 0 with no update.
	HOTRatio float64 `json:"hot_ratio"`
}

// IndexRow is an index's B-tree records per charge.
type IndexRow struct {
	Entries float64 `json:"entries"`
	Splits  float64 `json:"splits"`
	Other   float64 `json:"other"`
}

// WALPerCharge is the WAL written per charge.
type WALPerCharge struct {
	Bytes    float64 `json:"bytes"`
	FPI      float64 `json:"fpi"`
	Records  float64 `json:"records"`
	LSNBytes float64 `json:"lsn_bytes"`
}

func (r *Result) fill(stmts []Statement, tables map[string]TableCounts, before, after snapshot) {
	n := float64(r.Charges)
	ms := func(ticks int64) float64 { return procs.TicksToMillis(ticks) / n }
	r.CPU = CPU{
		Database:   ms(procs.TicksSince(before.backend, after.backend)),
		Background: ms(procs.TicksSince(before.other, after.other)),
		API:        ms(after.api - before.api),
	}
	var total float64
	for _, s := range stmts {
		total += s.TotalMS
	}
	r.StatementMS = total / n
	for _, s := range stmts {
		row := StatementPerCharge{Query: s.Query, CallsPerCharge: float64(s.Calls) / n, MSPerCharge: s.TotalMS / n}
		if s.Calls > 0 {
			row.MeanMS = s.TotalMS / float64(s.Calls)
		}
		if total > 0 {
			row.SharePct = 100 * s.TotalMS / total
		}
		r.Statements = append(r.Statements, row)
	}
	r.Tables = map[string]TableRow{}
	for name, c := range tables {
		row := TableRow{Inserts: float64(c.Inserts) / n, Updates: float64(c.Updates) / n, HOT: float64(c.HOT) / n}
		if c.Updates > 0 {
			row.HOTRatio = float64(c.HOT) / float64(c.Updates)
		}
		r.Tables[name] = row
	}
	r.WAL = WALPerCharge{
		Bytes:   float64(after.wal.Bytes-before.wal.Bytes) / n,
		FPI:     float64(after.wal.FPI-before.wal.FPI) / n,
		Records: float64(after.wal.Records-before.wal.Records) / n,
	}
}

func (r *Result) indexes(d map[string]IndexCounts) {
	n := float64(r.Charges)
	r.Indexes = d
	r.IndexRows = map[string]IndexRow{}
	for name, c := range d {
		r.IndexRows[name] = IndexRow{Entries: float64(c.Entries) / n, Splits: float64(c.Splits) / n, Other: float64(c.Other) / n}
	}
}

// sortedKeys returns m's keys ordered by weight, heaviest first, then by
// name.
func sortedKeys[V any](m map[string]V, weight func(V) float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		wi, wj := weight(m[keys[i]]), weight(m[keys[j]])
		if wi != wj {
			return wi > wj
		}
		return keys[i] < keys[j]
	})
	return keys
}
