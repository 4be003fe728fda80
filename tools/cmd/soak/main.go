// Command soak runs phasepay under steady load for an hour (tools/soak):
// new charges, replays, captures, refunds and webhook deliveries, one api
// worker killed every few minutes, every process's memory, goroutines,
// files and connections, each operation's latency, the tables' dead tuples
// and index size, the partitions kept and WAL per charge sampled every
// minute; it prints a line per sample and a verdict per series, writes
// every sample, slope, limit and verdict as JSON and a plot (SVG) per
// series, and exits 1 when a series climbs or an operation did not end as
// expected.
//
//	soak [-duration 60m] [-sample-every 1m] [-kill-every 3m] [-rate 10] [-bin bin]
//
// The results go to tools/results/soak.json and tools/results/soak/ for a
// run of an hour or more, and to names that carry the duration otherwise
// (tools/results/soak-10m.json, tools/results/soak-10m/), so that a short
// run is never taken for the hour.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/phasepay/phasepay/tools/procs"
	"github.com/phasepay/phasepay/tools/soak"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its arguments explicit; -h writes the usage to stdout.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var cfg soak.Config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.DurationVar(&cfg.Duration, "duration", time.Hour, "how long the load runs (make soak: SOAK)")
	fs.DurationVar(&cfg.SampleEvery, "sample-every", time.Minute, "sampling interval")
	fs.DurationVar(&cfg.KillEvery, "kill-every", 3*time.Minute, "how often the last api worker is SIGKILLed (first at half of it)")
	fs.Float64Var(&cfg.WindowShare, "window", 0.75, "share of the run, at its end, over which the series are judged (the rest is warm-up)")
	fs.Float64Var(&cfg.Rate, "rate", 10, "new charges per second; replays, captures and refunds follow at 1/2, 1/2 and 1/4 of it")
	fs.IntVar(&cfg.Workers, "workers", 3, "api processes, the last of them killed")
	fs.DurationVar(&cfg.Lease, "lease", time.Minute, "LEASE of every process")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the mix")
	fs.StringVar(&cfg.PGBinDir, "pg-bin", "", "directory with initdb and postgres for the run's cluster (default $PGCLUSTER_BIN, else /usr/lib/postgresql/15/bin)")
	binDir := fs.String("bin", "", "directory with api, reaper and mockpsp (default: build them)")
	jsonPath := fs.String("json", "", "results file (default tools/results/soak.json for an hour or more, else tools/results/soak-<duration>.json)")
	plotDir := fs.String("plots", "", "directory of the plots (default tools/results/soak/, else tools/results/soak-<duration>/)")
	replot := fs.String("replot", "", "run nothing: draw the plots of this results file again (into -plots, default beside it)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: soak [flags]\n\nRuns phasepay under a steady mix for -duration, samples every process and the\ndatabase every -sample-every, and judges whether any series climbs over the\nlast -window of the run. Exit status: 0 every series flat, 1 a series climbing,\nan operation without its expected end, or an error, 2 usage.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	} else if err != nil || fs.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
		}
		fmt.Fprintln(stderr, "soak:", err)
		fs.SetOutput(stderr)
		fs.Usage()
		return 2
	}
	if *replot != "" {
		return replotFile(*replot, *plotDir, stdout, stderr)
	}
	name := "soak"
	if cfg.Duration < time.Hour {
		name += "-" + shortDuration(cfg.Duration)
	}
	if *jsonPath == "" {
		*jsonPath = filepath.Join("tools", "results", name+".json")
	}
	if *plotDir == "" {
		*plotDir = filepath.Join("tools", "results", name)
	}
	cfg.Progress = stderr

	dir, cleanup, err := procs.Binaries(ctx, *binDir, "", stderr)
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	defer cleanup()
	*binDir = dir
	cfg.BinDir = *binDir

	res, err := soak.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	fmt.Fprint(stdout, soak.Table(res))
	if err := write(res, *jsonPath, *plotDir); err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s and %d plots in %s\n", *jsonPath, len(res.Series), *plotDir)
	if !res.Pass {
		return 1
	}
	return 0
}

// write writes the results and the plots, replacing the plots of an
// earlier run.
func write(res *soak.Result, jsonPath, plotDir string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(jsonPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(plotDir); err != nil {
		return err
	}
	return soak.WritePlots(plotDir, res.Series)
}

// replotFile draws the plots of a results file again.
func replotFile(path, dir string, stdout, stderr io.Writer) int {
	b, err := os.ReadFile(path)
	var res soak.Result
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	if dir == "" {
		dir = strings.TrimSuffix(path, filepath.Ext(path))
	}
	if err == nil {
		if err = os.RemoveAll(dir); err == nil {
			err = soak.WritePlots(dir, res.Series)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %d plots in %s\n", len(res.Series), dir)
	return 0
}

// shortDuration names a duration for a file: 10m, 90s, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
