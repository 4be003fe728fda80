package profile

import (
	"fmt"
	"io"
	"strings"
)

// Markdown writes one run's tables.
func Markdown(w io.Writer, r *Result) {
	fmt.Fprintf(w, "%d new charges at %d clients in %.1f s (%.0f/s), %d failed; schema %s\n\n",
		r.Charges, r.Clients, r.Seconds, float64(r.Charges)/r.Seconds, r.Failed, r.Schema)
	fmt.Fprintf(w, "| CPU per charge | ms |\n|---|---:|\n")
	fmt.Fprintf(w, "| database (the api's backends) | %.3f |\n| database (background processes) | %.3f |\n| api | %.3f |\n\n",
		r.CPU.Database, r.CPU.Background, r.CPU.API)

	fmt.Fprintf(w, "Statements: %.3f ms of execution per charge\n\n", r.StatementMS)
	fmt.Fprintf(w, "| statement | calls/charge | mean ms | ms/charge | share |\n|---|---:|---:|---:|---:|\n")
	for _, s := range r.Statements {
		if s.SharePct < 0.5 && s.CallsPerCharge < 0.5 {
			continue
		}
		fmt.Fprintf(w, "| `%s` | %.2f | %.4f | %.4f | %.1f%% |\n", shorten(s.Query, 90), s.CallsPerCharge, s.MeanMS, s.MSPerCharge, s.SharePct)
	}

	fmt.Fprintf(w, "\n| table | inserts/charge | updates/charge | HOT/charge | HOT ratio |\n|---|---:|---:|---:|---:|\n")
	for _, name := range sortedKeys(r.Tables, func(t TableRow) float64 { return t.Inserts + t.Updates }) {
		t := r.Tables[name]
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f | %s |\n", name, t.Inserts, t.Updates, t.HOT, ratio(t))
	}

	if r.WaldumpError != "" {
		fmt.Fprintf(w, "\nIndex entries: pg_waldump failed: %s\n", r.WaldumpError)
	} else {
		var total float64
		for _, ix := range r.IndexRows {
			total += ix.Entries
		}
		fmt.Fprintf(w, "\nIndex entries (B-tree WAL records, pg_waldump): %.2f per charge\n\n", total)
		fmt.Fprintf(w, "| index | entries/charge | splits/charge | other/charge |\n|---|---:|---:|---:|\n")
		for _, name := range sortedKeys(r.IndexRows, func(i IndexRow) float64 { return i.Entries }) {
			ix := r.IndexRows[name]
			fmt.Fprintf(w, "| %s | %.2f | %.3f | %.3f |\n", name, ix.Entries, ix.Splits, ix.Other)
		}
	}
	fmt.Fprintf(w, "\n| WAL per charge | |\n|---|---:|\n| bytes (pg_stat_wal) | %.0f |\n| bytes (LSN difference) | %.0f |\n| records | %.1f |\n| full-page images | %.3f |\n",
		r.WAL.Bytes, r.WAL.LSNBytes, r.WAL.Records, r.WAL.FPI)

	if r.PprofError != "" {
		fmt.Fprintf(w, "\napi CPU profile: %s\n", r.PprofError)
	} else if len(r.APITop) > 0 {
		fmt.Fprintf(w, "\n| api function (CPU profile) | cum | flat |\n|---|---:|---:|\n")
		for _, f := range r.APITop {
			fmt.Fprintf(w, "| `%s` | %.1f%% | %.1f%% |\n", shorten(f.Name, 90), f.Cum, f.Flat)
		}
		fmt.Fprintf(w, "\n| api function, by its own time | flat | cum |\n|---|---:|---:|\n")
		for _, f := range r.APIFlat {
			fmt.Fprintf(w, "| `%s` | %.1f%% | %.1f%% |\n", shorten(f.Name, 90), f.Flat, f.Cum)
		}
	}
}

func ratio(t TableRow) string {
	if t.Updates == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*t.HOTRatio)
}

// shorten puts a statement on one line of at most n runes, for a table
// cell.
func shorten(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	q = strings.ReplaceAll(q, "|", "\\|")
	q = strings.ReplaceAll(q, "`", "'")
	if r := []rune(q); len(r) > n {
		q = string(r[:n-1]) + "…"
	}
	return q
}

// ABMarkdown writes the A/B runs, in the order they ran, and B ÷ A of
// their means.
func ABMarkdown(w io.Writer, results []*Result) {
	fmt.Fprintf(w, "| run | schema | db CPU ms/charge | background ms/charge | statement ms/charge | WAL bytes/charge | index entries/charge | charges/s |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	var a, b []*Result
	for i, r := range results {
		fmt.Fprintf(w, "| %d | %s | %.3f | %.3f | %.4f | %.0f | %.2f | %.0f |\n", i+1, r.Schema, r.CPU.Database, r.CPU.Background,
			r.StatementMS, r.WAL.Bytes, entries(r), float64(r.Charges)/r.Seconds)
		if r.SchemaVersion != 0 {
			a = append(a, r)
		} else {
			b = append(b, r)
		}
	}
	ra := ABRatios(a, b)
	fmt.Fprintf(w, "\nB ÷ A (means): database CPU %.3f, statement time %.3f, WAL bytes %.3f, index entries %.3f\n",
		ra.DatabaseCPU, ra.StatementTime, ra.WALBytes, ra.IndexEntries)
	for i := range min(len(a), len(b)) {
		p := ABRatios(a[i:i+1], b[i:i+1])
		fmt.Fprintf(w, "- pair %d: database CPU %.3f, statement time %.3f\n", i+1, p.DatabaseCPU, p.StatementTime)
	}
	fmt.Fprintf(w, "\n| statement | A mean ms | B mean ms | B ÷ A | B lower in |\n|---|---:|---:|---:|---:|\n")
	for _, s := range StatementRatios(a, b) {
		fmt.Fprintf(w, "| `%s` | %.4f | %.4f | %.3f | %d of %d pairs |\n", shorten(s.Query, 70), s.AMeanMS, s.BMeanMS, s.Ratio, s.BLower, s.Pairs)
	}
}

// StatementRatio is one statement's mean time per call on each side.
type StatementRatio struct {
	Query   string  `json:"query"`
	AMeanMS float64 `json:"a_mean_ms"`
	BMeanMS float64 `json:"b_mean_ms"`
	Ratio   float64 `json:"b_over_a"`
	// BLower is in how many of Pairs (the i-th A run against the i-th B
	// run) B's mean was lower.
	BLower int `json:"b_lower"`
	Pairs  int `json:"pairs"`
}

// StatementRatios pairs the statements A and B both ran at least once per
// charge (a migration may change a statement's text only if the code
// changes too, which an A/B of a schema does not), ordered by A's time per
// charge.
func StatementRatios(a, b []*Result) []StatementRatio {
	if len(a) == 0 || len(b) == 0 {
		return nil
	}
	meanOf := func(r *Result, q string) (float64, bool) {
		for _, s := range r.Statements {
			if s.Query == q {
				return s.MeanMS, true
			}
		}
		return 0, false
	}
	var out []StatementRatio
	for _, s := range a[0].Statements {
		if s.CallsPerCharge < 0.5 {
			continue
		}
		sr := StatementRatio{Query: s.Query}
		var sa, sb float64
		ok := true
		for i := range min(len(a), len(b)) {
			ma, okA := meanOf(a[i], s.Query)
			mb, okB := meanOf(b[i], s.Query)
			if !okA || !okB {
				ok = false
				break
			}
			sa, sb = sa+ma, sb+mb
			sr.Pairs++
			if mb < ma {
				sr.BLower++
			}
		}
		if !ok || sr.Pairs == 0 || sa == 0 {
			continue
		}
		sr.AMeanMS, sr.BMeanMS, sr.Ratio = sa/float64(sr.Pairs), sb/float64(sr.Pairs), sb/sa
		out = append(out, sr)
	}
	return out
}

func entries(r *Result) float64 {
	var s float64
	for _, ix := range r.IndexRows {
		s += ix.Entries
	}
	return s
}

// Ratios is B ÷ A of the means of each side's runs.
type Ratios struct {
	DatabaseCPU   float64 `json:"database_cpu"`
	StatementTime float64 `json:"statement_time"`
	WALBytes      float64 `json:"wal_bytes"`
	IndexEntries  float64 `json:"index_entries"`
}

// ABRatios is B ÷ A of the means of a's and b's runs; 0 where A's mean is
// 0.
func ABRatios(a, b []*Result) Ratios {
	q := func(f func(*Result) float64) float64 {
		ma, mb := mean(a, f), mean(b, f)
		if ma == 0 {
			return 0
		}
		return mb / ma
	}
	return Ratios{
		DatabaseCPU:   q(func(r *Result) float64 { return r.CPU.Database }),
		StatementTime: q(func(r *Result) float64 { return r.StatementMS }),
		WALBytes:      q(func(r *Result) float64 { return r.WAL.Bytes }),
		IndexEntries:  q(entries),
	}
}

func mean(rs []*Result, f func(*Result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	var s float64
	for _, r := range rs {
		s += f(r)
	}
	return s / float64(len(rs))
}
