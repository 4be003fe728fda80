package soak

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// Sample is everything read at one moment of the run, by series name
// (series.go names them). What could not be read is left out of Values
// and said in Missing.
type Sample struct {
	At      time.Time          `json:"at"`
	Hours   float64            `json:"h"` // since the load started
	Values  map[string]float64 `json:"values"`
	Missing []string           `json:"missing,omitempty"`
}

// The database's side of a sample. Every statement reads the statistics
// views of the run's own cluster, so nothing but this run is counted.
const (
	// connectionsSQL counts client connections per application_name (each
	// process names its own, procs.WithApplicationName).
	connectionsSQL = `
SELECT application_name, count(*)
  FROM pg_stat_activity
 WHERE datname = current_database() AND backend_type = 'client backend'
 GROUP BY 1`

	// tablesSQL sums each table's cumulative statistics over its
	// partitions (pg_partition_root, which is NULL for a plain table: the
	// table is its own root).
	// n_live_tup and n_dead_tup are the statistics system's counts, which
	// every insert, update and delete moves and every vacuum corrects: what
	// autovacuum decides by.
	tablesSQL = `
SELECT coalesce(pg_partition_root(s.relid), s.relid)::regclass::text, sum(s.n_live_tup)::float8, sum(s.n_dead_tup)::float8
  FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
 WHERE c.relkind = 'r' AND s.relname <> 'goose_db_version'
 GROUP BY 1`

	// indexesSQL sums the size of each table's indexes over its partitions
	// (a partitioned index has no storage of its own; its partitions'
	// indexes do).
	indexesSQL = `
SELECT coalesce(pg_partition_root(i.indrelid), i.indrelid)::regclass::text, sum(pg_relation_size(i.indexrelid))::float8
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r' AND n.nspname = 'public' AND c.relname <> 'goose_db_version'
 GROUP BY 1`

	// partitionsSQL counts the leaf partitions of each partitioned table,
	// DEFAULT partitions included.
	partitionsSQL = `
SELECT pg_partition_root(c.oid)::regclass::text, count(*)::float8
  FROM pg_class c
 WHERE c.relispartition AND c.relkind = 'r'
 GROUP BY 1`

	// countersSQL is the cluster's WAL position in bytes, its WAL records
	// and full-page images so far (pg_stat_wal: the run's cluster serves
	// nothing else), and the charges made so far (inserts into charges).
	countersSQL = `
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8,
       (SELECT wal_records FROM pg_stat_wal)::float8,
       (SELECT wal_fpi FROM pg_stat_wal)::float8,
       (SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE coalesce(pg_partition_root(relid), relid) = 'charges'::regclass)::float8`
)

// counters are the cumulative values whose difference between two samples
// makes a series (WAL per charge).
type counters struct {
	walBytes, walRecords, walFPI, charges float64
}

// minRows is the fewest rows a table needs for its dead share and index
// bytes per row to be sampled: below it (the tenant, its API key, the
// webhook endpoints) an index is its first page and a share of one row
// says nothing.
const minRows = 10

// floorReads is how many times per sample interval the processes' levels
// (memory, goroutines, open files, connections) are read; a sample keeps
// each one's lowest reading, what the process held at its quietest in the
// interval. A leak raises the floor; a burst of requests in flight (an
// answer stalled by other work on the machine, and the connections,
// goroutines and files it took) does not.
const floorReads = 6

// sampler reads a sample: every process's /metrics, the database's
// statistics, and what the load recorded since the last sample.
type sampler struct {
	pool    *pgxpool.Pool
	hc      *http.Client
	watched []watched
	load    *driver
	hooks   *receiver
	start   time.Time
	last    counters

	mu      sync.Mutex
	floor   map[string]float64 // the lowest level read since the last sample
	missing []string           // what the level reads since the last sample could not read
}

// watched is a process whose /metrics the sampler reads.
type watched struct {
	name    string // api-0, reaper-0: also its application_name
	metrics string // its /metrics URL
}

// baseline reads the cumulative counters at the start of the load, so the
// first sample's differences are over its own interval.
func (s *sampler) baseline(ctx context.Context) error {
	c, err := s.counters(ctx)
	s.last = c
	return err
}

// watchLevels reads the levels floorReads times per interval until ctx
// ends.
func (s *sampler) watchLevels(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval / floorReads)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.readLevels(ctx)
		}
	}
}

// readLevels reads every process's levels and its connections, and keeps
// the lowest of each since the last sample.
func (s *sampler) readLevels(ctx context.Context) {
	values := map[string]float64{}
	var missing []string
	for _, p := range s.watched {
		if err := s.scrape(ctx, p, values); err != nil {
			missing = append(missing, fmt.Sprintf("%s /metrics: %v", p.name, err))
		}
	}
	if err := s.connections(ctx, values); err != nil {
		missing = append(missing, fmt.Sprintf("connections: %v", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.floor == nil {
		s.floor = map[string]float64{}
	}
	for name, v := range values {
		if low, ok := s.floor[name]; !ok || v < low {
			s.floor[name] = v
		}
	}
	s.missing = append(s.missing, missing...)
}

// sample reads one sample; a part that cannot be read is noted in Missing
// and the rest is still read.
func (s *sampler) sample(ctx context.Context) Sample {
	now := time.Now()
	sm := Sample{At: now.UTC(), Hours: now.Sub(s.start).Hours(), Values: map[string]float64{}}
	missing := func(what string, err error) { sm.Missing = append(sm.Missing, fmt.Sprintf("%s: %v", what, err)) }
	s.readLevels(ctx)
	s.mu.Lock()
	maps.Copy(sm.Values, s.floor)
	sm.Missing = append(sm.Missing, s.missing...)
	s.floor, s.missing = nil, nil
	s.mu.Unlock()
	tables, err := s.tables(ctx, sm.Values)
	if err != nil {
		missing("tables", err)
	}
	if err := s.indexes(ctx, tables, sm.Values); err != nil {
		missing("indexes", err)
	}
	if err := s.partitions(ctx, sm.Values); err != nil {
		missing("partitions", err)
	}
	if c, err := s.counters(ctx); err != nil {
		missing("wal", err)
	} else {
		made := c.charges - s.last.charges
		if made > 0 {
			sm.Values[seriesName(famWALPerCharge, "")] = (c.walBytes - s.last.walBytes) / made
			sm.Values[seriesName(famRecordsPerCharge, "")] = (c.walRecords - s.last.walRecords) / made
			sm.Values[seriesName(famFPIPerCharge, "")] = (c.walFPI - s.last.walFPI) / made
		}
		sm.Values[seriesName(famChargesMade, "")] = made
		s.last = c
	}
	if b, err := webhooks.Backlog(ctx, s.pool); err != nil {
		missing("webhook backlog", err)
	} else {
		sm.Values[seriesName(famBacklog, "")] = float64(b.Pending)
	}
	for op, lat := range s.load.latencies() {
		addLatency(sm.Values, op, lat)
	}
	addLatency(sm.Values, opWebhook, s.hooks.latencies())
	return sm
}

// scrape reads a process's goroutines, resident memory and open files from
// its /metrics: the Prometheus Go and process collectors every phasepay
// process registers (internal/telemetry).
func (s *sampler) scrape(ctx context.Context, p watched, into map[string]float64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metrics, nil)
	if err != nil {
		return err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	for _, m := range []struct {
		metric string
		family string
		scale  float64
	}{
		{"process_resident_memory_bytes", famRSS, 1.0 / (1 << 20)},
		{"go_goroutines", famGoroutines, 1},
		{"process_open_fds", famOpenFDs, 1},
	} {
		v, ok := gauge(families[m.metric])
		if !ok {
			return fmt.Errorf("no %s", m.metric)
		}
		into[seriesName(m.family, p.name)] = v * m.scale
	}
	return nil
}

// gauge is the value of a family's single gauge.
func gauge(f *dto.MetricFamily) (float64, bool) {
	if f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge() == nil {
		return 0, false
	}
	return f.GetMetric()[0].GetGauge().GetValue(), true
}

// connections counts each watched process's connections; a process with
// none has 0, not a gap.
func (s *sampler) connections(ctx context.Context, into map[string]float64) error {
	rows, err := s.pool.Query(ctx, connectionsSQL)
	if err != nil {
		return err
	}
	byApp := map[string]float64{}
	var (
		app string
		n   int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&app, &n}, func() error { byApp[app] = float64(n); return nil }); err != nil {
		return err
	}
	for _, p := range s.watched {
		into[seriesName(famConnections, p.name)] = byApp[p.name]
	}
	// Every api's API-key revocation listener has a connection of its
	// own, outside its pool, under one name.
	into[seriesName(famConnections, tenants.ListenerApplicationName)] = byApp[tenants.ListenerApplicationName]
	into[seriesName(famConnections, harnessApp)] = byApp[harnessApp]
	return nil
}

// tableStats is a table's row counts, summed over its partitions.
type tableStats struct{ live, dead float64 }

func (s *sampler) tables(ctx context.Context, into map[string]float64) (map[string]tableStats, error) {
	rows, err := s.pool.Query(ctx, tablesSQL)
	if err != nil {
		return nil, err
	}
	out := map[string]tableStats{}
	var (
		name       string
		live, dead float64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &live, &dead}, func() error {
		out[name] = tableStats{live: live, dead: dead}
		into[seriesName(famDeadTuples, name)] = dead
		if live >= minRows {
			into[seriesName(famDeadShare, name)] = dead / (live + dead)
		}
		return nil
	})
	return out, err
}

func (s *sampler) indexes(ctx context.Context, tables map[string]tableStats, into map[string]float64) error {
	rows, err := s.pool.Query(ctx, indexesSQL)
	if err != nil {
		return err
	}
	var (
		name  string
		bytes float64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &bytes}, func() error {
		into[seriesName(famIndexMiB, name)] = bytes / (1 << 20)
		if live := tables[name].live; live >= minRows {
			into[seriesName(famIndexPerRow, name)] = bytes / live
		}
		return nil
	})
	return err
}

func (s *sampler) partitions(ctx context.Context, into map[string]float64) error {
	rows, err := s.pool.Query(ctx, partitionsSQL)
	if err != nil {
		return err
	}
	var (
		name string
		n    float64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		into[seriesName(famPartitions, name)] = n
		return nil
	})
	return err
}

// counters reads the cumulative counters.
func (s *sampler) counters(ctx context.Context) (counters, error) {
	var c counters
	err := s.pool.QueryRow(ctx, countersSQL).Scan(&c.walBytes, &c.walRecords, &c.walFPI, &c.charges)
	return c, err
}
