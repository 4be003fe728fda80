package soak

import (
	"maps"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat"
)

// A series is named "<family>/<subject>": rss_mib/api-0,
// dead_share/idempotency_keys, latency_p99_ms/capture; a family with one
// series has no subject (wal_bytes_per_charge).
func seriesName(family, subject string) string {
	if subject == "" {
		return family
	}
	return family + "/" + subject
}

func splitName(name string) (family, subject string) {
	family, subject, _ = strings.Cut(name, "/")
	return family, subject
}

// The families. Each has a unit, and a limit for the subjects it judges
// (limitFor); the limits' reasons are in docs/operations.md too.
const (
	famRSS         = "rss_mib"
	famGoroutines  = "goroutines"
	famOpenFDs     = "open_fds"
	famConnections = "db_connections"
	famLatencyP50  = "latency_p50_ms"
	famLatencyP99  = "latency_p99_ms"
	famAnswers     = "answers"
	famDeadTuples  = "dead_tuples"
	famDeadShare   = "dead_share"
	famIndexMiB    = "index_mib"
	famIndexPerRow = "index_bytes_per_row"
	famPartitions  = "partitions"
	// famWALPerCharge is the WAL the whole mix wrote per charge made: the
	// captures, refunds, replays, webhook deliveries and maintenance that
	// go with a charge at this mix are in it.
	famWALPerCharge = "wal_bytes_per_charge"
	// famRecordsPerCharge counts WAL records instead of bytes: what the
	// mix writes, without the full-page images that the first change of a
	// page after each checkpoint adds (famFPIPerCharge counts those).
	famRecordsPerCharge = "wal_records_per_charge"
	famFPIPerCharge     = "wal_fpi_per_charge"
	famChargesMade      = "charges_made"
	famBacklog          = "webhook_backlog"
)

var units = map[string]string{
	famRSS: "MiB", famGoroutines: "goroutines", famOpenFDs: "files", famConnections: "connections",
	famLatencyP50: "ms", famLatencyP99: "ms", famAnswers: "answers", famDeadTuples: "tuples",
	famDeadShare: "share", famIndexMiB: "MiB", famIndexPerRow: "bytes/row", famPartitions: "partitions",
	famWALPerCharge: "bytes/charge", famRecordsPerCharge: "records/charge", famFPIPerCharge: "FPI/charge", famChargesMade: "charges",
	famBacklog: "deliveries",
}

// The limits, per hour over the judged window. Each says why in Why; see
// docs/operations.md, "An hour of steady load".
var (
	limitRSS = &Limit{PerHour: 16, Why: "a Go process's heap reaches its working size within minutes of a constant mix, and the GC " +
		"and the scavenger hold resident memory there; 16 MiB/h is ~0.6 KiB kept per request a surviving api serves at the " +
		"default rate, and several times the wander of GC cycles in a 45-point fit"}
	limitGoroutines = &Limit{PerHour: 30, Why: "goroutines follow the requests in flight, a few tens that vary between samples; " +
		"a goroutine left behind by one request in a thousand, or by every kill of the other worker (20 an hour), climbs past 30/h"}
	limitOpenFDs = &Limit{PerHour: 10, Why: "files are the listeners, the pool's connections and the clients' keep-alive " +
		"connections, a handful that vary with bursts; a descriptor left open per kill of the other worker (20/h) or per reconnect climbs past 10/h"}
	limitConnections = &Limit{PerHour: 2, Why: "a pool at a constant mix keeps the connections its peak concurrency needed and " +
		"closes those idle for 30 minutes; one more connection kept per kill (20/h), per LISTEN reconnect or per revocation check " +
		"climbs past 2/h, while a pool growing by one burst in the window stays below it"}
	limitP50 = &Limit{PerHour: 0.25, Relative: true, Why: "the median answer at a constant mix is the same work each minute; a plan " +
		"or index that degrades with the rows kept shows as a median rising by a quarter within the hour"}
	limitP99 = &Limit{PerHour: 0.5, Relative: true, Why: "the 99th percentile of a minute is its few slowest answers, which the " +
		"other worker's kills, checkpoints and autovacuum move; half its mean per hour is past that noise and well below a " +
		"doubling within the hour"}
	limitDeadShare = &Limit{PerHour: 0.05, SawTop: 0.35, Why: "autovacuum (on, at PostgreSQL's defaults, on the run's own cluster) vacuums " +
		"a table once its dead tuples pass 50 + 20% of its rows, so the dead share saws between 0 and ~0.2 without climbing; " +
		"dead tuples vacuum cannot remove (a transaction or a connection holding the xmin horizon back) climb by far more than 5 points an hour. " +
		"A short run's window holds a few teeth of the saw, so there the share must stay under 0.35 instead: the saw's top in a young " +
		"table (50 rows of threshold, a minute of naptime); a held horizon keeps every updated row's old version, half the rows or more"}
	limitIndexPerRow = &Limit{PerHour: 0.1, Relative: true, Why: "with daily partitions and 24 h retention nothing is dropped " +
		"within the hour, so index size grows with the rows kept; bloat is bytes per row growing: vacuum recycles the " +
		"entries of dead tuples and index pages settle at their fill, so more than a tenth per hour is bloat vacuum does not keep up with"}
	limitPartitions = &Limit{DayStep: true, Why: "the reaper keeps partitions a day at a time: within the hour the count changes " +
		"only when a UTC day begins (one more ahead), and retention drops nothing of a fresh database"}
	limitWAL = &Limit{PerHour: 0.5, Relative: true, Why: "WAL bytes per charge include the full-page images of the first " +
		"change to each page after a checkpoint (every 5 minutes): random keys (the clients' idempotency keys) touch every " +
		"leaf of a growing index each cycle, so the images per charge grow with the day's partition until each write has " +
		"a page of its own; a calibration hour here measured +23% of the mean per hour, all of it images (records per " +
		"charge fell); half the mean per hour fails a doubling"}
	limitWALRecords = &Limit{PerHour: 0.1, Relative: true, Why: "the WAL records a charge writes at this mix are the " +
		"same statements each minute (94 a charge, ±4%, in the calibration hour); a tenth more per hour is phasepay " +
		"writing more per charge as it runs"}
	limitBacklog = &Limit{PerHour: 60, Why: "deliverers that keep up hold the backlog at what a few seconds of events and the " +
		"retries of failed deliveries leave; one more delivery pending each minute is deliverers falling behind"}
)

// limitFor is the limit a series is judged by, nil for one only recorded:
// the killed worker's process series (every restart starts them afresh),
// the harness's own connections, raw sizes and counts that grow with the
// rows kept, and the answer counts that show the mix held steady.
func limitFor(name string, killed []string) *Limit {
	family, subject := splitName(name)
	if slices.Contains(killed, subject) || subject == harnessApp {
		return nil
	}
	switch family {
	case famRSS:
		return limitRSS
	case famGoroutines:
		return limitGoroutines
	case famOpenFDs:
		return limitOpenFDs
	case famConnections:
		return limitConnections
	case famLatencyP50:
		return limitP50
	case famLatencyP99:
		return limitP99
	case famDeadShare:
		return limitDeadShare
	case famIndexPerRow:
		return limitIndexPerRow
	case famPartitions:
		return limitPartitions
	case famWALPerCharge:
		return limitWAL
	case famRecordsPerCharge:
		return limitWALRecords
	case famBacklog:
		return limitBacklog
	}
	return nil
}

// Series is one series of the run, every sample of it, and its verdict.
type Series struct {
	Name   string  `json:"name"`
	Unit   string  `json:"unit"`
	Limit  *Limit  `json:"limit,omitempty"`
	Points []Point `json:"points"`
	Judgement
}

// buildSeries turns samples into series, each judged over the window that
// starts at windowFrom hours.
func buildSeries(samples []Sample, windowFrom float64, killed []string, start time.Time) []Series {
	byName := map[string][]Point{}
	for _, s := range samples {
		for name, v := range s.Values {
			byName[name] = append(byName[name], Point{Hours: s.Hours, Value: v})
		}
	}
	var out []Series
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		family, _ := splitName(name)
		limit := limitFor(name, killed)
		out = append(out, Series{Name: name, Unit: units[family], Limit: limit, Points: byName[name],
			Judgement: judge(byName[name], windowFrom, limit, start)})
	}
	return out
}

// addLatency adds an operation's median and 99th percentile over the
// interval, in milliseconds, and how many answers they are of.
func addLatency(into map[string]float64, op string, d []time.Duration) {
	into[seriesName(famAnswers, op)] = float64(len(d))
	if len(d) == 0 {
		return
	}
	ms := make([]float64, len(d))
	for i, x := range d {
		ms[i] = float64(x) / float64(time.Millisecond)
	}
	slices.Sort(ms)
	into[seriesName(famLatencyP50, op)] = stat.Quantile(0.5, stat.Empirical, ms, nil)
	into[seriesName(famLatencyP99, op)] = stat.Quantile(0.99, stat.Empirical, ms, nil)
}
