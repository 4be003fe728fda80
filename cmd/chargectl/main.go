// Command chargectl creates and reads phasepay charges from a shell, with
// the retry discipline of package client: one idempotency key per charge,
// journaled before the first attempt, so that an interrupted chargectl can
// be resumed without charging twice.
//
//	chargectl charge --amount 1000 --currency usd --payment-method pm_card_visa [--description d] [--metadata k=v ...]
//	chargectl get ch_...
//	chargectl resume
//
// Flags --api-url, --api-key and --journal may come before or after the
// command; they default to PHASEPAY_API_URL (http://127.0.0.1:8080),
// PHASEPAY_API_KEY and PHASEPAY_JOURNAL ($XDG_STATE_HOME/phasepay/journal,
// else ~/.local/state/phasepay/journal).
//
// The final charge is printed to stdout as the server sent it. A final
// error prints one line to stderr and exits 1; a usage error exits 2.
//
// resume prints one line per journaled intent to stdout as it ends, with
// the intent's key, its outcome and the charge's id (see resumeLine), and a
// progress line to stderr every --progress (default 5s) while it runs.
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
	"sync"
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
			fmt.Fprint(stdout, usage)
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
	// Command is "charge", "get" or "resume".
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
	// ChargeID is the charge to read (get).
	ChargeID string
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
	if m.Command == "charge" || m.Command == "resume" {
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
	case "resume":
		return m.resume(ctx, c, prog)
	}
	return fmt.Errorf("unknown command %q", m.Command)
}

// ProgressEveryDefault is how often resume reports progress: often enough
// that a long run visibly moves, rarely enough not to drown its output.
const ProgressEveryDefault = 5 * time.Second

// resume drives every journaled intent and prints one line per intent as
// it ends; any intent without a charge fails the run (exit 1), after a
// summary line on stderr.
func (m *Main) resume(ctx context.Context, c *client.Client, prog *progress) error {
	stop := m.reportProgress(prog)
	defer stop()
	counts := map[string]int{}
	var order []string
	total, notOK := 0, 0
	var werr error
	err := c.ResumeEach(ctx, func(i, n int, r client.Result) {
		prog.done(i, n)
		outcome, line := resumeLine(r)
		if counts[outcome] == 0 {
			order = append(order, outcome)
		}
		counts[outcome]++
		total = n
		if r.Err != nil {
			notOK++
		}
		if werr == nil {
			if _, err := fmt.Fprintln(m.Stdout, line); err != nil {
				werr = fmt.Errorf("write output: %w", err)
			}
		}
	})
	stop()
	if werr != nil {
		return werr
	}
	if total > 0 {
		parts := make([]string, 0, len(order))
		for _, o := range order {
			parts = append(parts, fmt.Sprintf("%d %s", counts[o], o))
		}
		fmt.Fprintf(m.Stderr, "chargectl: resumed %d intents: %s\n", total, strings.Join(parts, ", "))
	}
	if err != nil {
		return err
	}
	if notOK > 0 {
		return fmt.Errorf("%d of %d pending intents did not succeed", notOK, total)
	}
	return nil
}

// resumeLine renders one intent's end as a tab-separated line: key,
// outcome, charge id ("-" when none is known) and, for anything but a
// charge, the server's code and detail. It returns the outcome too.
//
// The outcomes: the charge's status (authorized, ...); declined and failed
// (402: final, the charge exists); unresolved (503 payment_unresolved: an
// operator must act; the intent is kept); unknown (gave up or interrupted:
// the intent is kept for the next resume); error (any other final answer,
// such as a 422: the intent is dropped, nothing was charged under it).
func resumeLine(r client.Result) (outcome, line string) {
	key := r.Intent.Key
	if r.Err == nil {
		status := cmp.Or(string(r.Charge.Status), "ok")
		return status, strings.Join([]string{key, status, cmp.Or(r.Charge.ID, "-")}, "\t")
	}
	var apiErr *client.Error
	charge, why := "-", oneLine(r.Err.Error())
	if errors.As(r.Err, &apiErr) {
		charge = cmp.Or(apiErr.Problem.Charge, "-")
		why = answer(apiErr)
	}
	switch {
	case errors.Is(r.Err, client.ErrDeclined):
		outcome = "declined"
	case errors.Is(r.Err, client.ErrPaymentFailed):
		outcome = "failed"
	case errors.Is(r.Err, client.ErrUnresolved):
		outcome, why = "unresolved", why+" (kept: resume again once an operator resolved it)"
	case errors.Is(r.Err, client.ErrGaveUp), errors.Is(r.Err, context.Canceled), errors.Is(r.Err, context.DeadlineExceeded):
		last := "no answer"
		if apiErr != nil {
			last = "last answer " + why
		}
		outcome, why = "unknown", "gave up retrying, "+last+" (kept for the next resume)"
	default:
		outcome = "error"
	}
	return outcome, strings.Join([]string{key, outcome, charge, why}, "\t")
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

// progress is what resume has done so far, updated by the client's
// attempt hook and by each intent's end, read by the progress reporter.
type progress struct {
	mu          sync.Mutex
	ended, n    int
	current     string
	attempts    int
	lastAttempt string
}

func (p *progress) attempt(in client.Intent, n, status int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current, p.attempts = in.Key, n
	switch {
	case err == nil:
		p.lastAttempt = fmt.Sprintf("%d", status)
	case status != 0:
		var apiErr *client.Error
		if errors.As(err, &apiErr) {
			p.lastAttempt = fmt.Sprintf("%d %s", status, apiErr.Problem.Code)
		} else {
			p.lastAttempt = fmt.Sprintf("%d", status)
		}
	default:
		p.lastAttempt = "no answer"
	}
}

func (p *progress) done(i, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended, p.n, p.current, p.attempts = i, n, "", 0
}

func (p *progress) line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("chargectl: resume: %d of %d intents done", p.ended, p.n)
	if p.n == 0 {
		s = fmt.Sprintf("chargectl: resume: %d intents done", p.ended)
	}
	if p.current != "" {
		s += fmt.Sprintf("; intent %s: attempt %d, last %s", p.current, p.attempts, p.lastAttempt)
	}
	return s
}

// reportProgress prints a progress line to stderr every m.ProgressEvery
// until the returned stop is called (safe to call twice).
func (m *Main) reportProgress(p *progress) (stop func()) {
	if m.ProgressEvery <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(m.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintln(m.Stderr, p.line())
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
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
		if m.Command == "charge" {
			return fmt.Sprintf("%v; outcome unknown, the intent is kept in %s: run `chargectl resume`", err, m.JournalDir)
		}
		return err.Error()
	case errors.Is(err, client.ErrUnresolved) && m.Command == "charge":
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
