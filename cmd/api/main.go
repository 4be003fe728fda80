// Command api serves phasepay's charges API and administers its database.
//
//	api [serve]                    the HTTP API (the default)
//	api migrate                    apply pending migrations and exit
//	api keys create --tenant NAME  print a new secret API key for NAME
//
// Configuration is by environment variable; see Config.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/phasepay/phasepay/internal/telemetry"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// errUsage reports a command line that names no known command.
var errUsage = errors.New("usage: api [serve] | api migrate | api keys create --tenant NAME")

// run is main with its inputs and exit code explicit, so that tests can run
// every subcommand in-process.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	logger := telemetry.NewLogger(stderr)
	cfg, err := ParseEnv(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "api: %v\n", err)
		return 2
	}

	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		hook, err := chaosCrashHook(getenv, logger)
		if err != nil {
			fmt.Fprintf(stderr, "api: %v\n", err)
			return 2
		}
		m := &Main{Config: cfg, Logger: logger, CrashHook: hook}
		if err := m.Run(ctx); err != nil {
			logger.Error("api stopped", "error", err.Error())
			return 1
		}
		return 0
	case "migrate":
		if err := migrate(ctx, cfg); err != nil {
			fmt.Fprintf(stderr, "api migrate: %v\n", err)
			return 1
		}
		logger.Info("migrations applied")
		return 0
	case "keys":
		if len(args) == 0 || args[0] != "create" {
			fmt.Fprintln(stderr, errUsage)
			return 2
		}
		fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
		fs.SetOutput(stderr)
		tenant := fs.String("tenant", "", "tenant name (created if new)")
		if err := fs.Parse(args[1:]); err != nil || *tenant == "" || fs.NArg() > 0 {
			fmt.Fprintln(stderr, "usage: api keys create --tenant NAME")
			return 2
		}
		secret, err := createKey(ctx, cfg, *tenant)
		if err != nil {
			fmt.Fprintf(stderr, "api keys create: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, secret)
		return 0
	default:
		fmt.Fprintln(stderr, errUsage)
		return 2
	}
}
