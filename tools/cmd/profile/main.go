// Command profile is `make profile`: what one new charge costs the
// database (tools/profile). It prints Markdown tables and writes the
// result as JSON; with -ab VERSION it profiles the schema migrated up to
// VERSION against the latest, alternating, and prints B ÷ A.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/phasepay/phasepay/tools/profile"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var cfg profile.Config
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Charges, "charges", 3000, "new charges measured per run")
	fs.IntVar(&cfg.Clients, "clients", 8, "concurrent clients")
	fs.IntVar(&cfg.Warmup, "warmup", 300, "charges sent before each run, not measured")
	fs.StringVar(&cfg.BinDir, "bin", "", "directory with api and mockpsp (empty: build them into a temporary directory)")
	fs.IntVar(&cfg.PprofSeconds, "pprof-seconds", 5, "seconds of the api's CPU profile, from the start of the run (0: none)")
	fs.Int64Var(&cfg.AB, "ab", 0, "A/B: profile the schema migrated up to this version (A) against the latest (B), alternating")
	fs.IntVar(&cfg.Rounds, "rounds", 2, "A/B rounds (2: A B A B)")
	jsonPath := fs.String("json", "", "where to write the results (default tools/results/profile.json, or profile-callgrind.json with -callgrind; -: nowhere)")
	var cc profile.CallgrindConfig
	callgrind := fs.Bool("callgrind", false, "count the backends' instructions per request under valgrind's callgrind (slope between -short and -long runs of one client) instead of timing them")
	fs.IntVar(&cc.Short, "short", 50, "-callgrind: requests of the short run")
	fs.IntVar(&cc.Long, "long", 250, "-callgrind: requests of the long run")
	fs.StringVar(&cc.BinB, "bin-b", "", "-callgrind: directory with variant B's api (code A/B: A is -bin's, both on the latest schema)")
	fs.BoolVar(&cc.Replays, "replays", false, "-callgrind: count replays too")
	fs.IntVar(&cc.Clients, "counted-clients", 1, "-callgrind: clients sending the counted new charges at once")
	fs.BoolVar(&cc.BatchAB, "batch-ab", false, "-callgrind: count the api with BATCH=false (A) against BATCH=true (B), alternating")
	fs.BoolVar(&cc.NoCharges, "only-replays", false, "-callgrind: count replays only")
	fs.StringVar(&cc.Keep, "keep", "", "-callgrind: directory for the counted backends' files of the long runs")
	fs.IntVar(&cc.Functions, "functions", 30, "-callgrind: functions listed by inclusive instructions per request (negative: none)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Progress = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *callgrind {
		counts, err := profile.RunCallgrind(ctx, cfg, cc)
		if err != nil {
			fmt.Fprintln(stderr, "profile:", err)
			return 1
		}
		profile.CallgrindMarkdown(stdout, counts, cc.Functions)
		return writeJSON(cmp.Or(*jsonPath, "tools/results/profile-callgrind.json"), counts, stderr)
	}
	results, err := profile.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "profile:", err)
		return 1
	}
	var doc any = results[0]
	if cfg.AB != 0 {
		profile.ABMarkdown(stdout, results)
		var a, b []*profile.Result
		for _, r := range results {
			if r.SchemaVersion != 0 {
				a = append(a, r)
			} else {
				b = append(b, r)
			}
		}
		doc = map[string]any{"ab_version": cfg.AB, "runs": results, "b_over_a": profile.ABRatios(a, b),
			"statements_b_over_a": profile.StatementRatios(a, b)}
	} else {
		profile.Markdown(stdout, results[0])
	}
	return writeJSON(cmp.Or(*jsonPath, "tools/results/profile.json"), doc, stderr)
}

// writeJSON writes doc to path, unless path is "-".
func writeJSON(path string, doc any, stderr io.Writer) int {
	if path == "-" {
		return 0
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o755)
	}
	if err == nil {
		err = os.WriteFile(path, append(b, '\n'), 0o644)
	}
	if err != nil {
		fmt.Fprintln(stderr, "profile:", err)
		return 1
	}
	return 0
}
