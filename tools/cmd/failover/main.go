// Command failover runs phasepay's chaos workload (tools/chaos: new
// charges, payment lives, webhooks, workers killed and frozen under PSP
// faults) against a throw-away pg_auto_failover formation
// (tools/formation: a monitor and two data nodes on this machine), with
// every api and reaper on the formation's multi-host URL
// (target_session_attrs=read-write), and makes the primary fail during
// the load: kill -9 and planned switchover in turn. It checks what chaos
// checks (no intent lost, none charged twice, every 2xx still stored and
// identical, every request ends, no 500) and measures, per failover, the
// seconds until writes succeed again and the requests answered 503.
//
//	failover [-async] [-failovers 4] [-intents 800] [-json tools/results/failover-sync.json]
//
// -async disables synchronous replication (replication-quorum false on
// both nodes): commits the standby had not received when the primary died
// are lost at the promotion, and the run reports what that cost; it fails
// only on a double charge, which derived object ids close.
//
// Both modes route between three mock PSPs (-psps) with the route's first
// PSP down from each kill until 5 s after its promotion, so that every
// breaker for it is open while the retries of what the kill lost arrive;
// both record every client request and check it with Porcupine
// (tools/chaos/history), and report whether at most one PSP holds an
// authorization per charge, failing when one does not.
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

	"github.com/phasepay/phasepay/tools/chaos"
	"github.com/phasepay/phasepay/tools/formation"
	"github.com/phasepay/phasepay/tools/procs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

// Result is what a run writes as JSON: the formation's replication mode
// and the chaos summary, failovers included.
type Result struct {
	Replication string         `json:"replication"`
	Measured    string         `json:"measured"`
	Summary     *chaos.Summary `json:"summary"`
}

func run(args []string, stdout io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var cfg chaos.Config
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	async := fs.Bool("async", false, "asynchronous replication (replication-quorum false on both nodes); default synchronous, pg_auto_failover's own")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of every random choice")
	fs.IntVar(&cfg.Intents, "intents", 800, "charge intents to drive")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "intents in flight at once")
	fs.IntVar(&cfg.Failovers, "failovers", 4, "failures of the primary during the load: kill -9 and switchover in turn, kill first")
	fs.DurationVar(&cfg.FailoverLag, "lag", time.Second, "before each kill, hold the standby's WAL receiver stopped this long: the replication lag the crash meets")
	fs.DurationVar(&cfg.ChaosInterval, "interval", 600*time.Millisecond, "mean pause between worker kills and pauses")
	fs.DurationVar(&cfg.KeyTTL, "psp-key-ttl", 5*time.Minute, "how long the mock PSP remembers an idempotency key (longer than a failover: see docs/operations.md)")
	fs.DurationVar(&cfg.RecoverWithin, "recover-within", 40*time.Second, "after each failure, every api must answer /readyz 200 and every reaper reconnect within this")
	fs.DurationVar(&cfg.GiveUpAfter, "give-up-after", 60*time.Second, "GIVE_UP_AFTER of every process")
	fs.IntVar(&cfg.PSPs, "psps", 3, "mock PSPs to route between (PSPS, PSP_ROUTING); above 1, the route's first PSP is also down from each kill until 5 s after its promotion, so every breaker for it opens while the retries of what the kill lost arrive")
	jsonPath := fs.String("json", "", "write the result as JSON to this file, the HTML report and the client history beside it")
	binDir := fs.String("bin", "", "directory with api, reaper and mockpsp built with -tags chaos (default: build them)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: failover [flags]\n\nRuns the chaos workload on a throw-away pg_auto_failover formation whose primary\nfails during the load (kill -9 and switchover in turn), then checks every intent\nfor exactly-once and reports, per failover, the seconds until writes succeed\nagain and the requests answered 503. Exit status: 0 no violation, 1 a violation\nor an error, 2 usage.\n\nFlags:\n")
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
		fmt.Fprintln(os.Stderr, "failover:", err)
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return 2
	}
	// PSP faults as in chaos, but no long PSP outage: this run is about
	// the database.
	cfg.Outages = 2
	cfg.OutageLength = 3 * time.Second
	cfg.OutageGap = 15 * time.Second
	cfg.Progress = os.Stderr

	dir, cleanup, err := procs.Binaries(ctx, *binDir, "chaos", os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		return 1
	}
	defer cleanup()
	*binDir = dir
	cfg.BinDir = *binDir

	started := time.Now()
	f, err := formation.Start(ctx, formation.Config{Async: *async, Log: func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", a...)
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		return 1
	}
	defer f.Stop()
	names, err := f.SynchronousStandbyNames(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "formation up in %s: %s, synchronous_standby_names = %q\n", time.Since(started).Truncate(time.Millisecond), f.URL(), names)
	cfg.Formation = f
	cfg.HistoryFile = chaos.HistoryPath(*jsonPath)

	sum, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		return 1
	}
	fmt.Fprint(stdout, sum.Table())
	fmt.Fprintln(stdout, sum.Line())
	res := Result{Replication: sum.Failover.Replication, Measured: started.UTC().Format(time.RFC3339), Summary: sum}
	if *jsonPath != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		err := os.MkdirAll(filepath.Dir(*jsonPath), 0o755)
		if err == nil {
			err = os.WriteFile(*jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "failover: write result:", err)
			return 1
		}
		html := strings.TrimSuffix(*jsonPath, filepath.Ext(*jsonPath)) + ".html"
		report, err := chaos.Report(sum, "http://127.0.0.1:8081")
		if err == nil {
			err = os.WriteFile(html, report, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "failover: write report:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "failover: report written to", html)
	}
	return verdict(sum, *async, stdout)
}

// verdict is the exit status. Synchronous replication loses nothing: any
// violation fails the run. Asynchronous replication loses what the standby
// had not received, and the run reports it (Losses); it fails only on a
// loss the design closes: an intent authorized twice because its retry
// made a second charge (pitfall F2 "A claim lost in a failover").
//
// Both modes print the independent checker's verdict on the clients'
// history (Porcupine) and what the PSPs' books hold; a charge authorized
// at more than one PSP fails either.
func verdict(sum *chaos.Summary, async bool, stdout io.Writer) int {
	h := sum.History
	fmt.Fprintf(stdout, "client history (Porcupine): %s, %d of %d keys rejected (%d requests, %d without an answer), checked in %s\n",
		h.Verdict, h.Rejected, h.Partitions, h.Checked, h.Lost, h.CheckTime)
	fmt.Fprintf(stdout, "PSP books: %s\n", h.Books.Line())
	if !async {
		if len(sum.Violations) > 0 {
			return 1
		}
		return 0
	}
	l := sum.Failover.Losses
	fmt.Fprintf(stdout, "asynchronous replication lost: %d violations, %d PSP authorizations of charges lost with the old primary (%d double charges, %d orphans)\n",
		len(sum.Violations), l.UnknownAuthorizations, l.DoubleCharges, l.Orphans)
	if l.DoubleCharges > 0 || !h.Books.Kept() {
		return 1
	}
	return 0
}
