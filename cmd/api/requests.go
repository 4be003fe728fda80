package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/operator"
	"github.com/phasepay/phasepay/internal/tenants"
)

// The operator's commands (`api requests …`): see, retry and settle the
// requests that did not end by themselves. Each opens its own pool and runs
// under requestsTimeout, so that an unreachable database fails it at once.

const requestsTimeout = 30 * time.Second

var requestsCommand = &command{
	name:    "requests",
	summary: "the operator's view of requests: list, show, retry, resolve",
	sub:     []*command{requestsListCommand, requestsShowCommand, requestsRetryCommand, requestsResolveCommand},
}

// listLimitDefault is how many requests `requests list` prints without
// --limit: a screenful of the most urgent, not every key kept.
const listLimitDefault = 100

// listLimitMax bounds --limit: a page is read and sorted in memory.
const listLimitMax = 10000

var requestsListCommand = &command{
	name:    "list",
	args:    "[--tenant T] [--state " + stateNames("|") + "] [--older-than DURATION] [--limit N] [--after CURSOR] [--json]",
	summary: "list requests in every state, oldest first (or in one state with --state), a page at a time",
	help: `One line per key: tenant, key, endpoint, state, recovery point, failed
attempts, next attempt, last error. --json prints one JSON object per line
with tenant, key, endpoint, state, recovery_point, failed_attempts (and
attempts, the same number under its older name), next_attempt_at,
last_error (the tenant's words), last_error_detail (its raw cause, for
operators only) and created_at. The states are the tenant view's (GET
/v1/idempotency_keys): in_progress (a worker holds it now),
unfinished (waiting for its next attempt),
needs_attention (waiting for an operator),
completed (its answer stored); done is accepted for completed.

A page holds at most --limit requests (default 100). When more follow, a
last line on stderr gives the --after CURSOR that starts the next page
(keyset paging: requests claimed meanwhile never shift a page).`,
	flags: func(fs *flag.FlagSet) action {
		tenant := fs.String("tenant", "", "only this tenant's requests")
		state := fs.String("state", "", "only requests in this state: "+stateNames(", "))
		olderThan := fs.Duration("older-than", 0, "only requests claimed longer ago than this (e.g. 1h)")
		limit := fs.Int("limit", listLimitDefault, fmt.Sprintf("the most requests to print, 1 to %d", listLimitMax))
		after := fs.String("after", "", "start after this cursor (printed at the end of the previous page)")
		asJSON := fs.Bool("json", false, "one JSON object per line")
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) > 0 {
				return usageErrorf("unexpected argument %q", inv.args[0])
			}
			var f idempotency.Filter
			if *state != "" {
				st, err := idempotency.ParseRequestState(*state)
				if err != nil {
					return usageErrorf("--%v", err)
				}
				f.State = st
			}
			if *olderThan < 0 {
				return usageErrorf("--older-than must not be negative")
			}
			if *limit < 1 || *limit > listLimitMax {
				return usageErrorf("--limit must be 1 to %d", listLimitMax)
			}
			if *after != "" {
				c, err := idempotency.ParseCursor(*after)
				if err != nil {
					return usageErrorf("--after: %v", err)
				}
				f.After = &c
			}
			f.OlderThan, f.Limit = *olderThan, *limit+1
			return withPool(ctx, inv, func(ctx context.Context, pool *pgxpool.Pool) error {
				if *tenant != "" {
					t, err := tenants.ByName(ctx, pool, *tenant)
					if err != nil {
						return err
					}
					f.TenantID = t.ID
				}
				views, err := idempotency.List(ctx, pool, f)
				if err != nil {
					return err
				}
				more := len(views) > *limit
				if more {
					views = views[:*limit]
				}
				names, err := tenantNames(ctx, pool, views)
				if err != nil {
					return err
				}
				if err := printRequests(inv.stdout, views, names, *asJSON); err != nil {
					return err
				}
				if more {
					// On stderr, so that stdout stays one request per line.
					_, err = fmt.Fprintf(inv.stderr, "more requests follow: run it again with --after %s\n",
						shellQuote(idempotency.CursorOf(views[len(views)-1]).String()))
				}
				return err
			})
		}
	},
}

// shellQuote quotes s for a POSIX shell: a key may hold any visible ASCII.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var requestsShowCommand = &command{
	name:    "show",
	args:    "TENANT KEY [--json]",
	summary: "the whole record of one request: state, stored answer, its charge, resolutions, its timeline",
	help: `Prints one field per line: the fields of requests list, the stored answer
(its status, and its body as indented JSON), the charge as it is now, every
resolution, the trace id of the request that claimed the key (and the key's
hash, phasepay.key_hash on its spans), and the request's timeline, one line
per moment: the claim, each recovery point, each PSP call, release and
takeover, the finish, the events it wrote and their webhook delivery
attempts, with the time (the database's, UTC), the process that held the
key and what happened. --json prints one JSON object instead: the fields of
requests list --json, and response_status, response, completed_at, charge,
resolutions, object_id, holder, trace_id, key_hash and timeline.`,
	flags: func(fs *flag.FlagSet) action {
		asJSON := fs.Bool("json", false, "one JSON object")
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) != 2 {
				return usageErrorf("TENANT and KEY are required")
			}
			return withPool(ctx, inv, func(ctx context.Context, pool *pgxpool.Pool) error {
				t, err := tenants.ByName(ctx, pool, inv.args[0])
				if err != nil {
					return err
				}
				shown, err := showRequest(ctx, pool, t, inv.args[1])
				if err != nil {
					return err
				}
				if *asJSON {
					return json.NewEncoder(inv.stdout).Encode(shown)
				}
				return shown.print(inv.stdout)
			})
		}
	},
}

var requestsRetryCommand = &command{
	name:    "retry",
	args:    "TENANT KEY [--by NAME]",
	summary: "make the next attempt of an unfinished or needs_attention request due now",
	help: `The reaper makes the attempt at its next pass. A needs_attention request gets
one attempt: if it fails again, it returns to needs_attention. The retry is
written in the request's timeline with the operator's name (--by; without it
$USER, else the name of the account running the command); the tenant's
timeline shows it as by: operator.`,
	flags: func(fs *flag.FlagSet) action {
		by := fs.String("by", "", "the operator's name (default: $USER, else the account running the command)")
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) != 2 {
				return usageErrorf("TENANT and KEY are required")
			}
			who := cmp.Or(*by, defaultOperator(inv.getenv))
			return withDesk(ctx, inv, func(ctx context.Context, desk *operator.Desk) error {
				t, err := desk.Retry(ctx, inv.args[0], inv.args[1], who)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(inv.stdout, "%s %s: next attempt due now\n", t.Name, inv.args[1])
				return err
			})
		}
	},
}

var requestsResolveCommand = &command{
	name:    "resolve",
	args:    "TENANT KEY --as failed|succeeded --reason TEXT [--by NAME] [--force]",
	summary: "settle a needs_attention request after checking the PSP by hand",
	help: `The key is checked first: only a needs_attention request can be resolved.
Then phasepay looks the request's operation up at the PSP (PSP_URL, or every
PSP of PSPS: export the api's value in this shell): a charge's authorization
at every PSP it was sent to; a capture, void or refund at the PSP that holds
the charge's authorization. It refuses, exit 1, when the PSP's books
contradict --as. --force skips that lookup, only for when the PSP cannot
be reached. The resolution, its reason and the operator (--by; without it
$USER, else the name of the account running the command) are recorded and
shown by requests show and the console. The reason is the operator's alone:
the tenant's stored answer says "settled as failed by an operator", and its
timeline shows the resolution as by: operator. A refused resolution is
written in the request's timeline too.`,
	flags: func(fs *flag.FlagSet) action {
		as := fs.String("as", "", "failed or succeeded")
		reason := fs.String("reason", "", "why (recorded)")
		by := fs.String("by", "", "the operator's name (default: $USER, else the account running the command)")
		force := fs.Bool("force", false, "do not look the operation up at the PSP")
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) != 2 {
				return usageErrorf("TENANT and KEY are required")
			}
			if *as != string(charges.ResolveFailed) && *as != string(charges.ResolveSucceeded) {
				return usageErrorf("--as must be failed or succeeded")
			}
			if *reason == "" {
				return usageErrorf("--reason is required")
			}
			who := *by
			if who == "" {
				who = defaultOperator(inv.getenv)
			}
			return withDesk(ctx, inv, func(ctx context.Context, desk *operator.Desk) error {
				t, resp, err := desk.Resolve(ctx, inv.args[0], inv.args[1], charges.Resolution{
					As: charges.ResolveAs(*as), Reason: *reason, By: who, Force: *force,
				})
				if err != nil {
					return err
				}
				// The reason is the operator's: in the log and in
				// request_resolutions, never in what the tenant reads.
				inv.logger.Info("request resolved", "tenant", t.Name, "key", inv.args[1], "as", *as, "by", who,
					"force", *force, "reason", *reason, "response_status", resp.Status)
				_, err = fmt.Fprintf(inv.stdout, "%s %s: resolved as %s, stored answer %d\n", t.Name, inv.args[1], *as, resp.Status)
				return err
			})
		}
	},
}

// withPool runs fn on a pool of DATABASE_URL, under requestsTimeout.
func withPool(ctx context.Context, inv *invocation, fn func(context.Context, *pgxpool.Pool) error) error {
	ctx, cancel := context.WithTimeout(ctx, requestsTimeout)
	defer cancel()
	cfg, err := inv.cfg.database().PoolConfig()
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	return fn(ctx, pool)
}

// withDesk runs fn with the operator's desk (package operator, which the
// console acts through too) on a pool of DATABASE_URL, under
// requestsTimeout. The desk's resolutions look charges up at PSP_URL (the
// embedded mock's address for "embedded") or at every PSP of PSPS.
func withDesk(ctx context.Context, inv *invocation, fn func(context.Context, *operator.Desk) error) error {
	return withPool(ctx, inv, func(ctx context.Context, pool *pgxpool.Pool) error {
		desk, err := operator.New(pool, inv.cfg.deskConfig(inv.logger))
		if err != nil {
			return err
		}
		defer desk.Close(context.WithoutCancel(ctx)) //nolint:errcheck // best effort at exit
		return fn(ctx, desk)
	})
}

// deskConfig is the operator desk's configuration: the keys' and the
// PSPs', as serve has them.
func (c Config) deskConfig(logger *slog.Logger) operator.Config {
	pspURL := c.PSPURL
	if pspURL == PSPEmbedded {
		pspURL = "http://" + c.MockPSPAddr
	}
	return operator.Config{Keys: c.operatorKeysConfig(), PSPURL: pspURL, Routing: c.Routing, Logger: logger}
}

// stateNames lists the request states, as every interface names them
// (idempotency.RequestStates), joined by sep.
func stateNames(sep string) string {
	var names []string
	for _, st := range idempotency.RequestStates() {
		names = append(names, string(st))
	}
	return strings.Join(names, sep)
}

// defaultOperator names the operator of a resolution given no --by: $USER,
// else the account the command runs as (a container has no $USER, and an
// operator settling money by hand should not have to name themselves to be
// recorded), else its user id.
func defaultOperator(getenv func(string) string) string {
	if name := getenv("USER"); name != "" {
		return name
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}
