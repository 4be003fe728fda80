// Command bench is `make bench`: phasepay against PostgreSQL's own limits
// on this machine (internal/bench). It prints a Markdown table and writes
// the results as JSON to bench/results/.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/phasepay/phasepay/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var cfg bench.Config
	admin := flag.String("admin-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL maintenance database")
	flag.StringVar(&cfg.BinDir, "bin", "bin", "directory with api and mockpsp (make build)")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "duration of each load")
	out := flag.String("out", "bench/results", "directory for the JSON results")
	quick := flag.Bool("quick", false, "small sizes, for a smoke run")
	steps := flag.String("steps", "", "comma-separated step name prefixes to run (default all)")
	flag.Parse()
	cfg.AdminURL = *admin
	if *steps != "" {
		cfg.Steps = strings.Split(*steps, ",")
	}
	cfg.Log = os.Stderr
	wd, _ := os.Getwd()
	cfg.ModuleDir = wd
	cfg.BinDir, _ = filepath.Abs(cfg.BinDir)
	if *quick {
		cfg.Duration = 2 * time.Second
		cfg.GrowthSizes = []int{0, 100_000}
		cfg.RetentionRows = 100_000
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Print(res.Table())
	path, err := res.WriteJSON(*out, *steps == "" && !*quick)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "bench: results written to", path)
}
