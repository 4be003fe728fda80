// Command bench is `make bench`: phasepay against PostgreSQL's own limits
// on this machine (tools/bench). It prints a Markdown table and writes
// the results as JSON to tools/results/.
//
// `bench bare` serves the bare baselines (bench.ServeBare): the benchmark
// re-runs its own executable that way, so that the baselines are a process
// of their own, as the api is.
//
// -h, -help and --help print the usage on stdout and exit 0, and any other
// argument exits 2; neither starts a run.
//
//	go test ./tools/cmd/bench/ -run '^TestBenchHelpStartsNothing$'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/phasepay/phasepay/tools/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const usage = `Usage: bench [flags]
       bench bare
       bench plot [-results FILE] [-out DIR]

` + "`make bench`" + `: phasepay against PostgreSQL's own limits on this machine. Prints
a Markdown table and writes the results as JSON.

bench bare serves the bare baselines (tools/bench/bare.go) on BARE_ADDR,
with DATABASE_URL and PSP_URL, until SIGTERM. The benchmark starts it itself,
from its own executable, so that the baselines are a process of their own, as
the api is; run by hand, it is for profiling them.

bench plot draws the plots of docs/benchmarks.md (SVG) from a results file;
a complete run draws them itself.
`

// run is main with its inputs and exit code explicit; -h writes the usage
// to stdout and starts nothing.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "bare" {
		return runBare(args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "plot" {
		return runPlot(args[1:], stdout, stderr)
	}
	var cfg bench.Config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	admin := fs.String("admin-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL maintenance database")
	fs.StringVar(&cfg.BinDir, "bin", "bin", "directory with api and mockpsp (make build)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "duration of each load")
	out := fs.String("out", "tools/results", "directory for the JSON results")
	plots := fs.String("plots", bench.PlotDir, "directory for the plots a complete run draws")
	quick := fs.Bool("quick", false, "small sizes, for a smoke run")
	steps := fs.String("steps", "", "comma-separated step name prefixes to run (default all); growth runs the background passes' step alone, writing "+bench.PassesResults+" and its plot")
	fs.IntVar(&cfg.Reps, "reps", 2, "runs of each compared load, alternated with the other's (A B A B for 2); medians are reported")
	levels := fs.String("levels", "", "comma-separated client counts of the loads (default 1,8,32)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parse(fs, args, "bench", stdout, stderr); !ok {
		return code
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg.AdminURL = *admin
	if *steps != "" {
		cfg.Steps = strings.Split(*steps, ",")
	}
	for _, l := range strings.Split(*levels, ",") {
		if l == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "bench: -levels: %q is not a client count\n", l)
			return 2
		}
		cfg.Levels = append(cfg.Levels, n)
	}
	cfg.Log = stderr
	wd, _ := os.Getwd()
	cfg.ModuleDir = wd
	cfg.BinDir, _ = filepath.Abs(cfg.BinDir)
	// Under `go run` the executable is a temporary file that lives as long
	// as this process, which is long enough.
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "bench: own executable, to serve the bare baselines:", err)
		return 1
	}
	cfg.BareCmd = []string{exe, "bare"}
	if *quick {
		cfg.Duration = 2 * time.Second
		cfg.GrowthSizes = []int{0, 100_000}
		cfg.RetentionRows = 100_000
		cfg.RowsPerDay = 2_000
		cfg.PassSizes = []int{1_000, 10_000}
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	fmt.Fprint(stdout, res.Table())
	path, err := res.WriteJSON(*out, *steps == "" && !*quick)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	fmt.Fprintln(stderr, "bench: results written to", path)
	if *steps == "" && !*quick {
		paths, err := bench.WritePlots(res, *plots)
		if err != nil {
			fmt.Fprintln(stderr, "bench: plots:", err)
			return 1
		}
		fmt.Fprintln(stderr, "bench: plots drawn:", strings.Join(paths, " "))
	}
	if res.Passes != nil && !*quick {
		// The growth step runs alone too (-steps growth): its results and
		// its plot are kept apart from a complete run's.
		paths, err := bench.WritePasses(res, *out, *plots)
		if err != nil {
			fmt.Fprintln(stderr, "bench: growth:", err)
			return 1
		}
		fmt.Fprintln(stderr, "bench: growth step written:", strings.Join(paths, " "))
	}
	return 0
}

// runPlot is `bench plot`: the plots of a results file.
func runPlot(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench plot", flag.ContinueOnError)
	results := fs.String("results", "tools/results/latest.json", "the results to draw")
	out := fs.String("out", bench.PlotDir, "directory for the plots")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage+"\nFlags of bench plot:\n")
		fs.PrintDefaults()
	}
	if code, ok := parse(fs, args, "bench plot", stdout, stderr); !ok {
		return code
	}
	res, err := bench.ReadResults(*results)
	if err != nil {
		fmt.Fprintln(stderr, "bench plot:", err)
		return 1
	}
	paths, err := bench.WritePlots(res, *out)
	if err != nil {
		fmt.Fprintln(stderr, "bench plot:", err)
		return 1
	}
	fmt.Fprintln(stdout, strings.Join(paths, "\n"))
	return 0
}

// runBare is `bench bare`: it takes no flags and no arguments, only its
// environment.
func runBare(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench bare", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage) }
	if code, ok := parse(fs, args, "bench bare", stdout, stderr); !ok {
		return code
	}
	cfg, err := bench.BareConfigFromEnv(getenv)
	if err != nil {
		fmt.Fprintln(stderr, "bench bare:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := bench.ServeBare(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "bench bare:", err)
		return 1
	}
	return 0
}

// parse parses args, which must hold flags only, into fs. On -h it writes
// the usage to stdout (exit code 0), on a bad flag or an argument the error
// and the usage to stderr (2); ok is false in both cases.
func parse(fs *flag.FlagSet, args []string, name string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, false
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(stderr, name+":", err)
		fs.SetOutput(stderr)
		fs.Usage()
		return 2, false
	}
	return 0, true
}
