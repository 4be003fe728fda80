// Command bench is `make bench`: phasepay against PostgreSQL's own limits
// on this machine (internal/bench). It prints a Markdown table and writes
// the results as JSON to bench/results/.
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
	"strings"
	"syscall"
	"time"

	"github.com/phasepay/phasepay/internal/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its inputs and exit code explicit; -h writes the usage
// to stdout and starts nothing.
func run(args []string, stdout, stderr io.Writer) int {
	var cfg bench.Config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	admin := fs.String("admin-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL maintenance database")
	fs.StringVar(&cfg.BinDir, "bin", "bin", "directory with api and mockpsp (make build)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "duration of each load")
	out := fs.String("out", "bench/results", "directory for the JSON results")
	quick := fs.Bool("quick", false, "small sizes, for a smoke run")
	steps := fs.String("steps", "", "comma-separated step name prefixes to run (default all)")
	fs.IntVar(&cfg.Reps, "reps", 2, "runs of each compared load, alternated with the other's (A B A B for 2); medians are reported")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: bench [flags]\n\n`make bench`: phasepay against PostgreSQL's own limits on this machine. Prints\na Markdown table and writes the results as JSON.\n\nFlags:\n")
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
		fmt.Fprintln(stderr, "bench:", err)
		fs.SetOutput(stderr)
		fs.Usage()
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg.AdminURL = *admin
	if *steps != "" {
		cfg.Steps = strings.Split(*steps, ",")
	}
	cfg.Log = stderr
	wd, _ := os.Getwd()
	cfg.ModuleDir = wd
	cfg.BinDir, _ = filepath.Abs(cfg.BinDir)
	if *quick {
		cfg.Duration = 2 * time.Second
		cfg.GrowthSizes = []int{0, 100_000}
		cfg.RetentionRows = 100_000
		cfg.RowsPerDay = 2_000
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
	return 0
}
