// Command chargectl creates, captures, voids, refunds, reads and lists
// phasepay charges from a shell, with the retry discipline of package
// client: one idempotency key per intent that moves money, journaled before
// the first attempt, so that an interrupted chargectl can be resumed without
// charging, capturing or refunding twice.
//
//	chargectl charge --amount 1000 --currency usd --payment-method pm_card_visa [--description d] [--metadata k=v ...]
//	chargectl get ch_...
//	chargectl capture ch_... [--amount N]
//	chargectl void ch_...
//	chargectl refund ch_... [--amount N]
//	chargectl get-refund re_...
//	chargectl list-charges [--limit N] [--starting-after ID] [--all]
//	chargectl list-refunds ch_... [--limit N] [--starting-after ID] [--all]
//	chargectl resume
//
// Flags --api-url, --api-key and --journal may come before or after the
// command; they default to PHASEPAY_API_URL (http://127.0.0.1:8080),
// PHASEPAY_API_KEY and PHASEPAY_JOURNAL ($XDG_STATE_HOME/phasepay/journal,
// else ~/.local/state/phasepay/journal).
//
// The final charge (or refund, or page of a list) is printed to stdout as
// the server sent it. A final
// error prints one line to stderr and exits 1; a usage error exits 2.
//
// resume prints one line per journaled intent to stdout as it ends, with
// the intent's key, its outcome and the charge's id (see resumeLine), and a
// progress line to stderr every --progress (default 5s) while it runs.
//
// -h, -help or --help, alone or after a command, prints its usage on
// stdout and exits 0, and sends nothing.
//
//	go test ./cmd/chargectl/ -run '^TestChargectlHelpStartsNothing$'
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/phasepay/phasepay/client"
)

func main() {
	// SIGINT/SIGTERM end the retries; the intent stays journaled for
	// `chargectl resume`.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // a final error, or the outcome is unknown
	exitUsage = 2
)

// run is main with its inputs and exit code explicit, for tests.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	m := NewMain()
	m.Stdout, m.Stderr = stdout, stderr
	if err := m.ParseFlags(args, getenv); err != nil {
		if errors.Is(err, errHelp) {
			// After a command, its own usage; alone, everything.
			if m.Command != "" {
				fmt.Fprint(stdout, commandUsage(m.Command))
			} else {
				fmt.Fprint(stdout, usage)
			}
			return exitOK
		}
		fmt.Fprintf(stderr, "chargectl: %s\n%s", oneLine(err.Error()), usageHint)
		return exitUsage
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "chargectl: %s\n", oneLine(m.reason(err)))
		return exitError
	}
	return exitOK
}

// Main is the chargectl program; ParseFlags fills it, Run runs it.
type Main struct {
	// Command is "charge", "get", "capture", "void", "refund",
	// "get-refund", "list-charges", "list-refunds", "resume" or "listen".
	Command string
	// APIURL is the API's base URL.
	APIURL string
	// APIKey is the tenant's secret key.
	APIKey string
	// JournalDir is the FileJournal's directory (charge and resume).
	JournalDir string
	// MaxElapsed bounds the retries of one charge (client.Config.MaxElapsed).
	MaxElapsed time.Duration
	// Params is the charge to create (charge).
	Params client.ChargeParams
	// ChargeID is the charge to read (get), capture, void, refund or
	// list the refunds of.
	ChargeID string
	// Amount is the amount to capture or refund; nil: all of it.
	Amount *int64
	// RefundID is the refund to read (get-refund).
	RefundID string
	// List pages through list-charges and list-refunds; ListAll follows
	// every page.
	List    client.ListParams
	ListAll bool
	// HTTPClient, if set, replaces the client's default.
	HTTPClient *http.Client
	// ProgressEvery is the pause between resume's progress lines on
	// stderr; 0 prints none.
	ProgressEvery time.Duration
	// ListenAddr and ListenEvents are where `listen` receives webhooks and
	// which event types it registers for (comma-separated, "*" for all).
	ListenAddr, ListenEvents string
	// ListenReady and ListenReceived, if set, are told the listener's URL
	// once it is registered and each verified event (tests only).
	ListenReady    func(url string)
	ListenReceived func(client.Event)

	Stdout, Stderr io.Writer
}

// NewMain returns a Main with the defaults that do not depend on the
// environment.
func NewMain() *Main {
	return &Main{APIURL: APIURLDefault, MaxElapsed: client.MaxElapsedDefault, ProgressEvery: ProgressEveryDefault,
		ListenAddr: ListenAddrDefault, ListenEvents: "*", Stdout: io.Discard, Stderr: io.Discard}
}

// Run executes the command. Its error is what the user reads.
func (m *Main) Run(ctx context.Context) error {
	if m.Command == "listen" {
		return m.listen(ctx)
	}
	cfg := client.Config{BaseURL: m.APIURL, APIKey: m.APIKey, HTTPClient: m.HTTPClient, MaxElapsed: m.MaxElapsed}
	prog := &progress{}
	if m.Command == "resume" {
		cfg.OnAttempt = prog.attempt
	}
	if journaled(m.Command) {
		j, err := client.NewFileJournal(m.JournalDir)
		if err != nil {
			return err
		}
		cfg.Journal = j
		if m.Command == "resume" {
			// The total, for progress lines before the first intent ends.
			if pending, err := j.List(); err == nil {
				prog.n = len(pending)
			}
		}
	}
	c, err := client.New(cfg)
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()

	switch m.Command {
	case "charge":
		ch, err := c.Charge(ctx, m.Params)
		if err != nil {
			return err
		}
		return m.print(ch.RawBody)
	case "get":
		ch, err := c.Get(ctx, m.ChargeID)
		if err != nil {
			return err
		}
		return m.print(ch.RawBody)
	case "capture", "void", "refund", "get-refund":
		return m.operation(ctx, c)
	case "list-charges", "list-refunds":
		return m.list(ctx, c)
	case "resume":
		return m.resume(ctx, c, prog)
	}
	return fmt.Errorf("unknown command %q", m.Command)
}

// mustAPIError returns the *client.Error in err, which the client's
// sentinels for answers always wrap.
func mustAPIError(err error) *client.Error {
	var e *client.Error
	if !errors.As(err, &e) {
		return &client.Error{Problem: client.Problem{Detail: err.Error()}}
	}
	return e
}

// answer is an API error as status, code and detail, in one line: the
// status is the one the server sent, whatever the code says.
func answer(e *client.Error) string {
	code := cmp.Or(e.Problem.Code, "-")
	return oneLine(fmt.Sprintf("%d %s: %s", e.Status, code, cmp.Or(e.Problem.Detail, e.Problem.Title)))
}

func (m *Main) print(body []byte) error {
	if !bytes.HasSuffix(body, []byte("\n")) {
		body = append(body, '\n')
	}
	if _, err := m.Stdout.Write(body); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// reason turns an error into what a user needs: the problem's code and
// detail for an answer of the API, and what to do next when the outcome is
// unknown.
func (m *Main) reason(err error) string {
	var apiErr *client.Error
	switch {
	case errors.Is(err, client.ErrGaveUp), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The charge may or may not have happened; only a retry with the
		// same key can tell, and the journal holds it.
		if journaled(m.Command) && m.Command != "resume" {
			return fmt.Sprintf("%v; outcome unknown, the intent is kept in %s: run `chargectl resume`", err, m.JournalDir)
		}
		return err.Error()
	case errors.Is(err, client.ErrUnresolved) && journaled(m.Command) && m.Command != "resume":
		return fmt.Sprintf("%s; the server waits for an operator, the intent is kept in %s: run `chargectl resume` once it is resolved",
			answer(mustAPIError(err)), m.JournalDir)
	case errors.As(err, &apiErr):
		p := apiErr.Problem
		code := p.Code
		if code == "" {
			code = fmt.Sprintf("http_%d", apiErr.Status)
		}
		msg := fmt.Sprintf("%s: %s", code, p.Detail)
		if p.Detail == "" {
			msg = fmt.Sprintf("%s: %s", code, p.Title)
		}
		if p.Charge != "" {
			msg += " (charge " + p.Charge + ")"
		}
		var fields []string
		for _, f := range p.Errors {
			// The server's detail may already name the field.
			if fe := f.Field + ": " + f.Message; !strings.Contains(p.Detail, fe) {
				fields = append(fields, fe)
			}
		}
		if len(fields) > 0 {
			msg += " [" + strings.Join(fields, "; ") + "]"
		}
		return msg
	}
	return err.Error()
}

// oneLine folds a message that might hold newlines (a server's detail) into
// the one line the contract promises.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
