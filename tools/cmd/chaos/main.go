// Command chaos runs phasepay's chaos harness (tools/chaos): workers
// killed and frozen mid-phase under PSP faults (503s, lost answers, final
// failures, failed lookups, a PSP that forgets keys after 2s, outages
// longer than that and one longer than GIVE_UP_AFTER), and PostgreSQL (a
// throw-away cluster of the run's own) stopped immediately and started
// again during the load; then every intent checked for exactly-once and
// every api and reaper for having survived. Authorized intents live on:
// captured (all or part) and refunded up to 3 times, or voided, each
// operation under the same chaos and held against the mock PSP's books. A
// webhook sink with faults of its own (5xx, dropped connections, slow and
// too-late answers) receives every event, each checked against what
// committed. It prints a summary table and a one-line verdict, writes the
// summary as JSON and beside it an HTML report (the faults and what the
// requests did on one time axis, tools/chaos/report.go), and exits 1 on
// any violation.
//
//	chaos [-seed 1] [-intents 2000] [-concurrency 24] [-db-restarts 3] [-json tools/results/chaos.json]
//
// -h, -help and --help print the usage on stdout and exit 0, and start no
// run.
//
//	go test ./tools/cmd/chaos/ -run '^TestChaosHelpStartsNothing$'
package main

import (
	"cmp"
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

	"github.com/phasepay/phasepay/internal/testutil/faults"
	"github.com/phasepay/phasepay/tools/chaos"
	"github.com/phasepay/phasepay/tools/chaos/history"
	"github.com/phasepay/phasepay/tools/procs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

// run is main with its arguments explicit; -h writes the usage to stdout.
func run(args []string, stdout io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var cfg chaos.Config
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of every random choice")
	fs.IntVar(&cfg.Intents, "intents", 2000, "charge intents to drive")
	fs.IntVar(&cfg.Concurrency, "concurrency", 24, "intents in flight at once")
	fs.IntVar(&cfg.Workers, "workers", 3, "bin/api processes")
	fs.IntVar(&cfg.Reapers, "reapers", 2, "bin/reaper processes")
	fs.DurationVar(&cfg.ChaosInterval, "interval", 300*time.Millisecond, "mean pause between kills and pauses")
	fs.Float64Var(&cfg.ErrorRate, "psp-error-rate", 0.05, "mock PSP 503 rate")
	fs.Float64Var(&cfg.DropRate, "psp-drop-rate", 0.05, "mock PSP dropped-response rate")
	fs.Float64Var(&cfg.RejectRate, "psp-reject-rate", 0.03, "mock PSP final-failure (400) rate")
	fs.Float64Var(&cfg.LookupErrorRate, "psp-lookup-error-rate", 0.1, "mock PSP failed-lookup (503) rate")
	fs.DurationVar(&cfg.KeyTTL, "psp-key-ttl", 2*time.Second, "how long the mock PSP remembers an idempotency key (MOCKPSP_KEY_TTL)")
	fs.IntVar(&cfg.Outages, "psp-outages", 4, "PSP outages (error_rate 1, lookups too) during the load")
	fs.DurationVar(&cfg.OutageLength, "psp-outage", 3*time.Second, "shortest PSP outage (each lasts up to twice this; keep it above -psp-key-ttl)")
	fs.DurationVar(&cfg.OutageGap, "psp-outage-gap", 8*time.Second, "mean time between PSP outages")
	fs.DurationVar(&cfg.LongOutage, "psp-long-outage", 15*time.Second, "one more PSP outage this long, past -give-up-after, so that requests end needs_attention (0: none)")
	fs.DurationVar(&cfg.RetryBase, "retry-base", 100*time.Millisecond, "RETRY_BASE of every process")
	fs.DurationVar(&cfg.RetryMax, "retry-max", 2*time.Second, "RETRY_MAX of every process")
	fs.DurationVar(&cfg.GiveUpAfter, "give-up-after", 10*time.Second, "GIVE_UP_AFTER of every process")
	fs.Float64Var(&cfg.CrashProbability, "crash", 0.02, "crash probability at each crash point")
	fs.IntVar(&cfg.DBRestarts, "db-restarts", 3, "immediate PostgreSQL restarts during the load, on a throw-away cluster of the run's own (0: none, a database on -admin-url instead)")
	fs.DurationVar(&cfg.DBDown, "db-down", 3*time.Second, "mean time the database stays down per restart")
	fs.DurationVar(&cfg.RecoverWithin, "recover-within", 20*time.Second, "after each database restart, every api must answer /readyz 200 and every reaper reconnect within this")
	fs.StringVar(&cfg.PGBinDir, "pg-bin", "", "directory with initdb and postgres for the throw-away cluster (default $PGCLUSTER_BIN, else /usr/lib/postgresql/15/bin)")
	fs.Float64Var(&cfg.WebhookFaults.ErrorRate, "webhook-error-rate", 0.05, "webhook sink: share of deliveries answered 500 or 503")
	fs.Float64Var(&cfg.WebhookFaults.DropRate, "webhook-drop-rate", 0.03, "webhook sink: share of deliveries read and then dropped without an answer")
	fs.Float64Var(&cfg.WebhookFaults.HangRate, "webhook-hang-rate", 0.01, "webhook sink: share of deliveries answered 200 after 0.5-3s")
	fs.Float64Var(&cfg.WebhookFaults.TimeoutRate, "webhook-timeout-rate", 0.002, "webhook sink: share of deliveries answered only after the 10s delivery timeout")
	fs.DurationVar(&cfg.WebhookDrainWithin, "webhook-drain", 2*time.Minute, "after the load, every event must reach the webhook sink within this")
	fs.BoolVar(&cfg.KeepDatabase, "keep-db", false, "keep the run's database (with -db-restarts 0 only)")
	fs.BoolVar(&cfg.Pooler, "pooler", false, "put a PgBouncer in transaction mode between the workers and reapers and the database (DATABASE_POOLER=transaction; every other process with DATABASE_DIRECT_URL, the others polling)")
	fs.IntVar(&cfg.PSPs, "psps", 1, "mock PSPs to route between (PSPS, PSP_ROUTING); above 1, one of them is down, refusing or dropping answers for stretches")
	dialect := fs.String("psp-dialect", "mock", "the PSP's dialect: mock (the mock PSP) or stripe (a stand-in keeping Stripe's semantics, reached through the Stripe connector; with -psps 1)")
	var stripe chaos.StripeDialect
	fs.DurationVar(&stripe.KeyWindow, "stripe-key-window", 10*time.Second, "with -psp-dialect stripe: how long the stand-in remembers an idempotency key (Stripe: 24h)")
	fs.DurationVar(&stripe.SearchLag, "stripe-search-lag", time.Second, "with -psp-dialect stripe: the stand-in's longest search lag (Stripe: up to an hour)")
	admin := fs.String("admin-url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL URL to create the run's database on (with -db-restarts 0)")
	jsonPath := fs.String("json", "", "write the summary as JSON to this file, and the HTML report beside it (its name ending .html)")
	htmlPath := fs.String("html", "", "write the HTML report to this file (default: beside -json)")
	consoleURL := fs.String("console-url", "http://127.0.0.1:8081", "where the report's links of violations open the operator console (api console)")
	render := fs.String("render", "", "run nothing: draw the HTML report of the summary in this JSON file (a run's -json) beside it, or to -html")
	historyPath := fs.String("history", "", "write every client request and its answer to this file (gzipped JSON lines) and, if Porcupine rejects some keys, its drawing of them beside it (default: beside -json, its name ending -history.jsonl.gz)")
	check := fs.String("check", "", "run nothing: check the client history in this file (a run's -history) with Porcupine, and draw the rejected keys beside it")
	binDir := fs.String("bin", "", "directory with api, reaper and mockpsp built with -tags chaos (default: build them)")
	fs.StringVar(&cfg.Defect, "defect", "", "run the workers with a deliberate defect, to see the harness fail: "+faults.DefectFreshPSPKey+" or "+faults.DefectFailoverOnUnknown)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: chaos [flags]\n\nDrives charge intents through api workers and reapers that are killed, frozen\nand cut off from a restarting PostgreSQL, then checks every intent for\nexactly-once and every request for an end. Exit status: 0 no violation, 1 a violation or an error, 2 usage.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// -h asks for the usage on stdout and exit 0, before anything is
	// built or started; a bad flag gets it on stderr and exit 2.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return 0
	} else if err != nil || fs.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
		}
		fmt.Fprintln(os.Stderr, "chaos:", err)
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return 2
	}
	cfg.AdminURL = *admin
	switch {
	case *dialect == "stripe" && cfg.PSPs <= 1:
		cfg.Stripe = &stripe
	case *dialect != "mock":
		fmt.Fprintln(os.Stderr, "chaos: -psp-dialect: mock, or stripe with -psps 1")
		return 2
	}
	cfg.Progress = os.Stderr

	if *check != "" {
		return checkHistory(*check, stdout)
	}
	if *render != "" {
		b, err := os.ReadFile(*render)
		var sum chaos.Summary
		if err == nil {
			err = json.Unmarshal(b, &sum)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos: -render:", err)
			return 1
		}
		if *htmlPath == "" {
			*htmlPath = strings.TrimSuffix(*render, filepath.Ext(*render)) + ".html"
		}
		if err := writeReport(&sum, *htmlPath, *consoleURL); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
		return 0
	}

	dir, cleanup, err := procs.Binaries(ctx, *binDir, "chaos", os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	defer cleanup()
	*binDir = dir
	cfg.BinDir = *binDir
	cfg.HistoryFile = cmp.Or(*historyPath, chaos.HistoryPath(*jsonPath))

	sum, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	fmt.Print(sum.Table())
	fmt.Println(sum.Line())
	if *jsonPath != "" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		err := os.MkdirAll(filepath.Dir(*jsonPath), 0o755)
		if err == nil {
			err = os.WriteFile(*jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos: write summary:", err)
			return 1
		}
	}
	if *htmlPath == "" && *jsonPath != "" {
		*htmlPath = strings.TrimSuffix(*jsonPath, filepath.Ext(*jsonPath)) + ".html"
	}
	if *htmlPath != "" {
		if err := writeReport(sum, *htmlPath, *consoleURL); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
	}
	if len(sum.Violations) > 0 {
		return 1
	}
	return 0
}

// writeReport draws sum's HTML report into path.
func writeReport(sum *chaos.Summary, path, consoleURL string) error {
	report, err := chaos.Report(sum, consoleURL)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o755)
	}
	if err == nil {
		err = os.WriteFile(path, report, 0o644)
	}
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	fmt.Fprintln(os.Stderr, "chaos: report written to", path)
	return nil
}

// checkHistory checks a recorded history again, offline: exit 0 when
// Porcupine accepts it, 1 when it rejects it (the drawing written beside
// it) or cannot be read.
func checkHistory(path string, stdout io.Writer) int {
	ops, _, err := history.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	v, draw := history.Check(ops, 0)
	fmt.Fprintf(stdout, "history %s: %s, %d requests with a key (%d without an answer) in %d keys, %d rejected, checked in %s\n",
		path, v.Verdict, v.Checked, v.Lost, v.Partitions, v.Rejected, v.CheckTime)
	for _, k := range v.RejectedKeys {
		fmt.Fprintln(stdout, "rejected:", k)
	}
	if draw == nil {
		return 0
	}
	html := chaos.VisualizationPath(path)
	f, err := os.Create(html)
	if err == nil {
		err = errors.Join(draw(f), f.Close())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "chaos: the rejected keys drawn in", html)
	return 1
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
