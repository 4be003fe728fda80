package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// APIURLDefault is the API's URL when neither --api-url nor
// PHASEPAY_API_URL is given: the contract's default API_ADDR.
const APIURLDefault = "http://127.0.0.1:8080"

const usage = `Usage:
  chargectl charge --amount N --currency CUR --payment-method PM [--description D] [--metadata K=V ...]
  chargectl get CHARGE_ID
  chargectl capture CHARGE_ID [--amount N]
  chargectl void CHARGE_ID
  chargectl refund CHARGE_ID [--amount N]
  chargectl get-refund REFUND_ID
  chargectl list-charges [--limit N] [--starting-after ID] [--all]
  chargectl list-refunds CHARGE_ID [--limit N] [--starting-after ID] [--all]
  chargectl resume [--progress DUR]
  chargectl listen [--addr HOST:PORT] [--events TYPE,TYPE|*]

charge, capture, void and refund move money: each makes one idempotency
key, journals it before the first attempt and sends that same key on every
retry (a 409 charge_pending is retried after its Retry-After). When the
outcome stays unknown (gave up, Ctrl-C, 503 payment_unresolved) the intent
stays journaled for resume. capture takes all of the authorized amount and
refund all that is left to refund unless --amount is given. The final
charge (capture, void) or refund is printed as the server sent it.

list-charges and list-refunds print one page as the server sent it (newest
first, --limit 1..100 objects, default 10, after --starting-after), with
the id to continue from on stderr when there is more; with --all they
follow every page and print one object per line.

resume drives every journaled charge to its end and prints one line per
charge: key, outcome (the charge's status, declined, failed, unresolved,
unknown or error), charge id, and the server's status, code and detail. A
progress line goes to stderr every --progress (default 5s; 0: none).

listen (development) receives webhooks on --addr (default a free port on
127.0.0.1), registers itself as a webhook endpoint for --events (default
*; the api must run with WEBHOOK_ALLOW_PRIVATE=1), verifies each
delivery's signature and prints each event on its own line. Ctrl-C
deletes the endpoint and exits.

Flags of every command (before or after it):
  --api-url URL      API base URL (env PHASEPAY_API_URL, default ` + APIURLDefault + `)
  --api-key KEY      secret API key (env PHASEPAY_API_KEY)
  --journal DIR      journal of pending charges (env PHASEPAY_JOURNAL,
                     default $XDG_STATE_HOME/phasepay/journal or ~/.local/state/phasepay/journal)
  --max-elapsed DUR  give up retrying one call after DUR (default 2m)

Exit status: 0 success, 1 final error or unknown outcome, 2 usage error.
`

const usageHint = "Run 'chargectl -h' for usage.\n"

// commandUsage is one command's usage (chargectl COMMAND -h): its
// synopsis, what usage says of it, and the flags every command takes, all
// taken from usage so that the two never differ.
func commandUsage(command string) string {
	head, flags, _ := strings.Cut(usage, "\nFlags of every command")
	blocks := strings.Split(head, "\n\n")
	var b strings.Builder
	b.WriteString("Usage:\n")
	for _, line := range strings.Split(strings.TrimPrefix(blocks[0], "Usage:\n"), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == command {
			b.WriteString(line + "\n")
		}
	}
	for _, para := range blocks[1:] {
		if slices.Contains(namedIn(para), command) {
			b.WriteString("\n" + strings.TrimRight(para, "\n") + "\n")
		}
	}
	return b.String() + "\nFlags of every command" + flags
}

// namedIn returns the commands a paragraph of usage is about: the
// command names it starts with ("charge, capture, void and refund move
// money").
func namedIn(para string) []string {
	var named []string
	for _, w := range strings.Fields(para) {
		w = strings.TrimRight(w, ",")
		switch {
		case w == "and":
		case slices.Contains(strings.Split(strings.ReplaceAll(commandList, " or ", ", "), ", "), w):
			named = append(named, w)
		default:
			return named
		}
	}
	return named
}

// errHelp asks for the usage text on stdout and exit 0.
var errHelp = errors.New("help requested")

// ParseFlags fills m from args (without the program name) and the
// environment; flags win over the environment. Its errors are usage errors,
// one line each.
func (m *Main) ParseFlags(args []string, getenv func(string) string) error {
	if v := getenv("PHASEPAY_API_URL"); v != "" {
		m.APIURL = v
	}
	m.APIKey = getenv("PHASEPAY_API_KEY")
	m.JournalDir = getenv("PHASEPAY_JOURNAL")

	top := m.newFlagSet("chargectl")
	if err := top.Parse(args); err != nil {
		return flagError(err)
	}
	if top.NArg() == 0 {
		return errors.New("missing command: " + commandList)
	}
	m.Command = top.Arg(0)

	fs := m.newFlagSet("chargectl " + m.Command)
	switch m.Command {
	case "charge":
		fs.Int64Var(&m.Params.Amount, "amount", 0, "amount in the currency's minor unit")
		fs.StringVar(&m.Params.Currency, "currency", "", "lower-case ISO 4217 code")
		fs.StringVar(&m.Params.PaymentMethod, "payment-method", "", "payment method, pm_...")
		fs.Func("description", "free text", func(s string) error {
			m.Params.Description = &s
			return nil
		})
		fs.Func("metadata", "K=V, repeatable", func(s string) error {
			k, v, ok := strings.Cut(s, "=")
			if !ok || k == "" {
				return fmt.Errorf("%q is not KEY=VALUE", s)
			}
			if _, dup := m.Params.Metadata[k]; dup {
				return fmt.Errorf("key %q given twice", k)
			}
			if m.Params.Metadata == nil {
				m.Params.Metadata = map[string]string{}
			}
			m.Params.Metadata[k] = v
			return nil
		})
	case "resume":
		fs.DurationVar(&m.ProgressEvery, "progress", m.ProgressEvery, "pause between progress lines on stderr (0: none)")
	case "listen":
		fs.StringVar(&m.ListenAddr, "addr", m.ListenAddr, "listen address of the webhook receiver")
		fs.StringVar(&m.ListenEvents, "events", m.ListenEvents, "event types, comma-separated, or *")
	case "capture", "refund":
		fs.Func("amount", "amount in the currency's minor unit (default: all)", func(s string) error {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("%q is not an integer", s)
			}
			m.Amount = &v
			return nil
		})
	case "list-charges", "list-refunds":
		fs.IntVar(&m.List.Limit, "limit", 0, "objects per page, 1..100 (default: the server's, 10)")
		fs.StringVar(&m.List.StartingAfter, "starting-after", "", "id of the object the page starts after")
		fs.BoolVar(&m.ListAll, "all", false, "follow every page, one object per line")
	case "get", "void", "get-refund":
	default:
		return fmt.Errorf("unknown command %q: want %s", m.Command, commandList)
	}
	pos, err := parseInterspersed(fs, top.Args()[1:])
	if err != nil {
		return flagError(err)
	}

	switch m.Command {
	case "charge":
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, name := range []string{"amount", "currency", "payment-method"} {
			if !set[name] {
				return fmt.Errorf("charge: --%s is required", name)
			}
		}
		if len(pos) > 0 {
			return fmt.Errorf("charge: unexpected argument %q", pos[0])
		}
	case "get", "capture", "void", "refund", "list-refunds":
		if len(pos) != 1 || pos[0] == "" {
			return fmt.Errorf("%s: want exactly one charge id", m.Command)
		}
		m.ChargeID = pos[0]
	case "get-refund":
		if len(pos) != 1 || pos[0] == "" {
			return errors.New("get-refund: want exactly one refund id")
		}
		m.RefundID = pos[0]
	case "resume", "listen", "list-charges":
		if len(pos) > 0 {
			return fmt.Errorf("%s: unexpected argument %q", m.Command, pos[0])
		}
	}

	if m.APIKey == "" {
		return errors.New("missing API key: --api-key or PHASEPAY_API_KEY")
	}
	if m.MaxElapsed <= 0 {
		return errors.New("--max-elapsed must be positive")
	}
	if m.List.Limit < 0 || m.List.Limit > 100 {
		return fmt.Errorf("%s: --limit must be 1..100", m.Command)
	}
	if m.JournalDir == "" && journaled(m.Command) {
		dir, err := defaultJournalDir(getenv)
		if err != nil {
			return err
		}
		m.JournalDir = dir
	}
	return nil
}

// commandList names the commands for usage errors.
const commandList = "charge, get, capture, void, refund, get-refund, list-charges, list-refunds, resume or listen"

// journaled reports whether a command keeps intents in the journal: the
// ones that move money, and resume.
func journaled(command string) bool {
	switch command {
	case "charge", "capture", "void", "refund", "resume":
		return true
	}
	return false
}

// newFlagSet returns a flag set with the flags every command shares, so
// that they may come before or after the command.
func (m *Main) newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints one line and a hint instead
	fs.StringVar(&m.APIURL, "api-url", m.APIURL, "API base URL")
	fs.StringVar(&m.APIKey, "api-key", m.APIKey, "secret API key")
	fs.StringVar(&m.JournalDir, "journal", m.JournalDir, "journal directory")
	fs.DurationVar(&m.MaxElapsed, "max-elapsed", m.MaxElapsed, "retry budget of one call")
	return fs
}

// parseInterspersed parses flags that may follow positional arguments
// (`get ch_1 --api-key k`), which the flag package alone stops at. A "--"
// ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// defaultJournalDir follows the XDG base directory spec: state that should
// survive a restart belongs in $XDG_STATE_HOME, by default ~/.local/state.
func defaultJournalDir(getenv func(string) string) (string, error) {
	if x := getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "phasepay", "journal"), nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "phasepay", "journal"), nil
	}
	return "", errors.New("no journal directory: set --journal or PHASEPAY_JOURNAL (or HOME)")
}

func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return errHelp
	}
	return err
}
