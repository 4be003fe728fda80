// Command api serves phasepay's charges API and administers its database.
//
//	api [serve]                          the HTTP API (the default)
//	api migrate                          apply pending migrations and exit
//	api keys create --tenant NAME        print a new secret API key for NAME
//	api keys list --tenant NAME [--json] list NAME's keys, never their secrets
//	api keys revoke ID                   refuse a key in every api process within 1 s
//	api requests list|show|retry|resolve the operator's view of requests
//	api webhooks redeliver               a new delivery attempt, due now
//	api console                          the operator console, in a browser
//
// `api -h` lists the commands; -h or --help after any command prints its
// usage. Neither starts anything. Configuration is by environment variable;
// see Config.
//
// METRICS_ADDR moves /metrics to a listener of its own, off the API's
// public port. Request metrics are labelled by route pattern and by the
// configured address, never by the raw path or the Host header: a label
// the client chooses makes a new series with every request.
//
//	go test ./cmd/api/ -run '^TestMetricsAddrMovesMetricsOffAPIPort$'
//	go test ./cmd/api/ -run '^TestRequestMetricsCarryRoutePatternNotRawPath$'
//	go test ./cmd/reaper/ -run '^TestReaperAcceptsMetricsAddr$'
//	go test ./deploy/ -run '^TestDeployedAPIServesMetricsOffItsPort$'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/telemetry"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// commands is the api's command line: one entry per command, or per group
// of commands (`keys …`). A new command or group is one more entry.
var commands = []*command{
	serveCommand,
	migrateCommand,
	{
		name:    "keys",
		summary: "secret API keys of tenants",
		sub:     []*command{keysCreateCommand, keysListCommand, keysRevokeCommand},
	},
	requestsCommand,
	webhooksCommand,
	consoleCommand,
}

// defaultCommand runs when the command line is empty.
const defaultCommand = "serve"

// command is one entry of the command line: a group (sub set) or a command
// that runs (flags set).
type command struct {
	// name selects it, after its group's name.
	name string
	// args is its synopsis after the name, e.g. "--tenant NAME [--json]".
	args string
	// summary is one line for the list of commands.
	summary string
	// help, if set, says more in the command's own -h.
	help string
	// sub are a group's commands.
	sub []*command
	// flags declares the command's flags on fs and returns what runs once
	// they are parsed (and the configuration is read).
	flags func(fs *flag.FlagSet) action
}

// action runs a command. An error wrapping errUsage exits 2 with the
// command's usage; any other exits 1 with the error on one line.
type action func(ctx context.Context, inv *invocation) error

// invocation is what an action runs with.
type invocation struct {
	cfg    Config
	getenv func(string) string
	logger *slog.Logger
	stdout io.Writer
	stderr io.Writer
	// args are the arguments left after the flags.
	args []string
}

// errUsage marks a command line that does not name a command correctly.
var errUsage = errors.New("usage")

// usageErrorf is a command line mistake, told in one line.
func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// errSilent is returned by an action that already reported its failure.
var errSilent = errors.New("failed (reported)")

// errConfig marks bad configuration found by an action: exit 2, as for
// ParseEnv's errors.
var errConfig = errors.New("bad configuration")

// run is main with its inputs and exit code explicit, so that tests can run
// every command in-process.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	root := &command{name: "api", sub: commands}
	if len(args) == 0 {
		args = []string{defaultCommand}
	}
	cmd, path := root, "api"
	for cmd.sub != nil {
		if len(args) == 0 {
			fmt.Fprintf(stderr, "%s: a command is required\n", path)
			writeUsage(stderr, path, cmd, nil, false)
			return 2
		}
		if isHelp(args[0]) {
			writeUsage(stdout, path, cmd, nil, true)
			return 0
		}
		i := slices.IndexFunc(cmd.sub, func(c *command) bool { return c.name == args[0] })
		if i < 0 {
			fmt.Fprintf(stderr, "%s: unknown command %q\n", path, args[0])
			writeUsage(stderr, path, cmd, nil, false)
			return 2
		}
		cmd, path, args = cmd.sub[i], path+" "+cmd.sub[i].name, args[1:]
	}

	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run writes the usage, to stdout or stderr as the case is
	act := cmd.flags(fs)
	// -h anywhere asks for help, even after an argument (api keys revoke
	// key_x -h): it never runs the command.
	if slices.ContainsFunc(args, isHelp) {
		writeUsage(stdout, path, cmd, fs, true)
		return 0
	}
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		writeUsage(stderr, path, cmd, nil, false)
		return 2
	}

	cfg, err := ParseEnv(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "api: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The log is written through a LogWriter: one write(2) for the lines
	// of many requests under load, every warning written at once, and the
	// rest before anything else goes to stderr below.
	logs := telemetry.NewLogWriter(stderr)
	inv := &invocation{cfg: cfg, getenv: getenv, logger: telemetry.NewLogger(logs), stdout: stdout, stderr: stderr, args: positional}
	err = act(ctx, inv)
	_ = logs.Close()
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "%s: %s\n", path, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		writeUsage(stderr, path, cmd, nil, false)
		return 2
	case errors.Is(err, errSilent):
		return 1
	case errors.Is(err, errConfig):
		fmt.Fprintf(stderr, "api: %s\n", oneLine(strings.TrimPrefix(err.Error(), errConfig.Error()+": ")))
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %s\n", path, oneLine(err.Error()))
		return 1
	}
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help"
}

// writeUsage prints a command's usage. For a command that runs: its
// synopsis, then with fs (its -h) what it does and its flags. For a group:
// the synopsis of each of its commands, then with full (its -h) what each
// does. A command-line mistake gets the synopses alone.
func writeUsage(w io.Writer, path string, cmd *command, fs *flag.FlagSet, full bool) {
	if cmd.sub == nil {
		fmt.Fprintf(w, "usage: %s\n", strings.TrimSpace(path+" "+cmd.args))
		if fs == nil {
			return
		}
		fmt.Fprintf(w, "\n%s.\n", upperFirst(cmd.summary))
		if cmd.help != "" {
			fmt.Fprintf(w, "\n%s\n", cmd.help)
		}
		// The flag package would print -tenant; the contract spells flags
		// with two dashes (both are accepted).
		first := true
		fs.VisitAll(func(f *flag.Flag) {
			if first {
				fmt.Fprintf(w, "\nflags:\n")
				first = false
			}
			arg, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "  %s\n    \t%s\n", strings.TrimSpace("--"+f.Name+" "+arg), usage)
		})
		return
	}
	type line struct{ synopsis, summary string }
	var lines []line
	var walk func(prefix string, cs []*command)
	walk = func(prefix string, cs []*command) {
		for _, c := range cs {
			if c.sub != nil {
				walk(prefix+c.name+" ", c.sub)
				continue
			}
			lines = append(lines, line{strings.TrimSpace(prefix + c.name + " " + c.args), c.summary})
		}
	}
	walk(path+" ", cmd.sub)
	if !full {
		lead := "usage: "
		for _, l := range lines {
			fmt.Fprintf(w, "%s%s\n", lead, l.synopsis)
			lead = "       "
		}
		fmt.Fprintf(w, "Run '%s -h' for what each does.\n", path)
		return
	}
	// Summaries in a column, unless a synopsis is too long for it.
	const maxWidth = 40
	width := 0
	for _, l := range lines {
		if len(l.synopsis) <= maxWidth {
			width = max(width, len(l.synopsis))
		}
	}
	if path == "api" {
		fmt.Fprintf(w, "usage: api [COMMAND] (with none, api %s)\n\ncommands:\n", defaultCommand)
	} else {
		fmt.Fprintf(w, "usage: %s COMMAND\n\ncommands:\n", path)
	}
	for _, l := range lines {
		if len(l.synopsis) > width {
			fmt.Fprintf(w, "  %s\n  %-*s  %s\n", l.synopsis, width, "", l.summary)
			continue
		}
		fmt.Fprintf(w, "  %-*s  %s\n", width, l.synopsis, l.summary)
	}
	if path == "api" {
		fmt.Fprint(w, configHelp)
	}
	fmt.Fprintf(w, "\nRun '%s COMMAND -h' for a command's usage.\n", path)
}

// configHelp closes `api -h`.
const configHelp = `
Configuration is by environment variable: DATABASE_URL (PostgreSQL),
DATABASE_POOLER=transaction and DATABASE_DIRECT_URL (behind a transaction
pooler), API_ADDR (listen address), PSP_URL (the PSP, or "embedded" for an
in-process mock) or PSPS and PSP_ROUTING (several PSPs), LEASE and the others
listed in docs/operations.md ("Every variable").
Logs are JSON lines on stderr.
`

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// oneLine keeps an error on one line, whatever a driver put in it.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// serveCommand runs the HTTP API until SIGTERM.
var serveCommand = &command{
	name:    "serve",
	summary: "serve the HTTP API until SIGTERM (the default command)",
	help: `Serves /v1 on API_ADDR, with /healthz, /readyz and /metrics, and keeps
every API key revocation effective within a second. Needs a migrated
database (api migrate).`,
	flags: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) > 0 {
				return usageErrorf("unexpected argument %q", inv.args[0])
			}
			if !inv.cfg.hasPSP() {
				// Bad configuration like ParseEnv's (exit 2), but only
				// serve needs a PSP. Run refuses it too, for in-process use.
				return fmt.Errorf("%w: %w", errConfig, ErrPSPURLRequired)
			}
			hook, wrap, err := chaosFaults(inv.getenv, inv.logger)
			if err != nil {
				return fmt.Errorf("%w: %w", errConfig, err)
			}
			m := &Main{Config: inv.cfg, Logger: inv.logger, CrashHook: hook, WrapPSP: wrap}
			if err := m.Run(ctx); err != nil {
				// One JSON line, like every line a serving process writes.
				inv.logger.Error("api stopped", "error", err.Error())
				return errSilent
			}
			return nil
		}
	},
}

// migrateCommand applies pending migrations.
var migrateCommand = &command{
	name:    "migrate",
	summary: "apply every pending migration and exit (running it twice is harmless)",
	help: `Creates DATABASE_URL's database if the server does not have it, applies the
embedded migrations under an advisory lock, and creates the partitions
ahead. With DATABASE_POOLER=transaction it connects through
DATABASE_DIRECT_URL (required then: DDL and a session lock do not belong
behind a transaction pooler) and makes phasepay's server settings (the
statement, lock and idle timeouts, plan_cache_mode) the database's
defaults, since the pooler passes no startup parameter on.`,
	flags: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) > 0 {
				return usageErrorf("unexpected argument %q", inv.args[0])
			}
			if err := migrate(ctx, inv.cfg); err != nil {
				return err
			}
			inv.logger.Info("migrations applied")
			if off, err := dbpool.AutovacuumOff(ctx, inv.cfg.database().Direct()); err == nil && off {
				inv.logger.Warn("autovacuum is off on this server: nothing refreshes the planner's statistics, and a plan made before a table had any can scan a tenant's every row until ANALYZE runs (docs/operations.md)")
			}
			return nil
		}
	},
}

// parseInterspersed parses flags wherever they stand among the arguments
// (`requests resolve acme k1 --as failed`), which the flag package alone
// does not: it stops at the first argument that is not a flag. "--" ends
// the flags. It returns the arguments that are not flags, in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
}
