package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/operator"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/timeline"
)

// The operator's commands (`api requests …`): see, retry and settle the
// requests that did not end by themselves. Each opens its own pool and runs
// under requestsTimeout, so that an unreachable database fails it at once.

const requestsTimeout = 30 * time.Second

var requestsCommand = &command{
	name:    "requests",
	summary: "the operator's view of unfinished requests: list, show, retry, resolve",
	sub:     []*command{requestsListCommand, requestsShowCommand, requestsRetryCommand, requestsResolveCommand},
}

var requestsListCommand = &command{
	name:    "list",
	args:    "[--tenant T] [--state unfinished|needs_attention|done] [--older-than DURATION] [--json]",
	summary: "list requests, oldest first (all states unless --state)",
	help: `One line per key: tenant, key, endpoint, state, recovery point, attempts,
next attempt, last error. --json prints one JSON object per line with tenant,
key, endpoint, state, recovery_point, attempts, next_attempt_at, last_error
and created_at. "unfinished" covers keys a worker holds right now too; "done"
is a completed request.`,
	flags: func(fs *flag.FlagSet) action {
		tenant := fs.String("tenant", "", "only this tenant's requests")
		state := fs.String("state", "", "unfinished, needs_attention or done")
		olderThan := fs.Duration("older-than", 0, "only requests claimed longer ago than this (e.g. 1h)")
		asJSON := fs.Bool("json", false, "one JSON object per line")
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) > 0 {
				return usageErrorf("unexpected argument %q", inv.args[0])
			}
			var f idempotency.Filter
			states := []idempotency.ViewState{""}
			switch *state {
			case "":
			case "unfinished":
				states = []idempotency.ViewState{idempotency.ViewInProgress, idempotency.ViewUnfinished}
			case "needs_attention":
				states = []idempotency.ViewState{idempotency.ViewNeedsAttention}
			case "done":
				states = []idempotency.ViewState{idempotency.ViewCompleted}
			default:
				return usageErrorf("--state %q: must be unfinished, needs_attention or done", *state)
			}
			if *olderThan < 0 {
				return usageErrorf("--older-than must not be negative")
			}
			f.OlderThan = *olderThan
			return withPool(ctx, inv, func(ctx context.Context, pool *pgxpool.Pool) error {
				if *tenant != "" {
					t, err := tenants.ByName(ctx, pool, *tenant)
					if err != nil {
						return err
					}
					f.TenantID = t.ID
				}
				var views []idempotency.View
				for _, st := range states {
					f.State = st
					vs, err := idempotency.List(ctx, pool, f)
					if err != nil {
						return err
					}
					views = append(views, vs...)
				}
				names, err := tenantNames(ctx, pool, views)
				if err != nil {
					return err
				}
				return printRequests(inv.stdout, views, names, *asJSON)
			})
		}
	},
}

var requestsShowCommand = &command{
	name:    "show",
	args:    "TENANT KEY [--json]",
	summary: "one request: its timeline (who held it, what happened when), trace id; --json the whole record",
	help: `Prints the request's state and its timeline, one line per moment: the
claim, each recovery point, each PSP call, release and takeover, the
finish, the events it wrote and their webhook delivery attempts, with the
time (the database's, UTC), the process that held the key and what
happened. Also the trace id of the request that claimed the key (and the
key's hash, phasepay.key_hash on its spans). --json prints the whole
record as one JSON object: the stored answer, the charge, resolutions and
the timeline with every field.`,
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
				return printShown(inv.stdout, shown)
			})
		}
	},
}

var requestsRetryCommand = &command{
	name:    "retry",
	args:    "TENANT KEY",
	summary: "make the next attempt of an unfinished or needs_attention request due now",
	help: `The reaper makes the attempt at its next pass. A needs_attention request gets
one attempt: if it fails again, it returns to needs_attention.`,
	flags: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) != 2 {
				return usageErrorf("TENANT and KEY are required")
			}
			return withDesk(ctx, inv, func(ctx context.Context, desk *operator.Desk) error {
				t, err := desk.Retry(ctx, inv.args[0], inv.args[1])
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
	help: `phasepay first looks the charge up at the PSP (PSP_URL) and refuses, exit 1,
when the PSP's books contradict --as. --force skips that lookup, for when the
PSP cannot be reached. The resolution, its reason and the operator (--by,
default $USER) are recorded and shown by requests show.`,
	flags: func(fs *flag.FlagSet) action {
		as := fs.String("as", "", "failed or succeeded")
		reason := fs.String("reason", "", "why (recorded)")
		by := fs.String("by", "", "the operator's name (default $USER)")
		force := fs.Bool("force", false, "do not look the charge up at the PSP")
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
				who = inv.getenv("USER")
			}
			if who == "" {
				return usageErrorf("--by is required (no $USER)")
			}
			return withDesk(ctx, inv, func(ctx context.Context, desk *operator.Desk) error {
				t, resp, err := desk.Resolve(ctx, inv.args[0], inv.args[1], charges.Resolution{
					As: charges.ResolveAs(*as), Reason: *reason, By: who, Force: *force,
				})
				if err != nil {
					return err
				}
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
	cfg, err := pgxpool.ParseConfig(inv.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	dbpool.ConfigurePool(cfg, inv.cfg.DatabaseURL)
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

// requestJSON is one line of `requests list --json`.
type requestJSON struct {
	Tenant        string  `json:"tenant"`
	Key           string  `json:"key"`
	Endpoint      string  `json:"endpoint"`
	State         string  `json:"state"`
	RecoveryPoint string  `json:"recovery_point"`
	Attempts      int     `json:"attempts"`
	NextAttemptAt *string `json:"next_attempt_at"`
	LastError     *string `json:"last_error"`
	CreatedAt     string  `json:"created_at"`
}

// operatorState is the state an operator filters and reads: the tenant
// view's, except that done is called done.
func operatorState(s idempotency.ViewState) string {
	if s == idempotency.ViewCompleted {
		return "done"
	}
	return string(s)
}

func newRequestJSON(v idempotency.View, tenant string) requestJSON {
	r := requestJSON{
		Tenant: tenant, Key: v.Key, Endpoint: v.Method + " " + v.Path, State: operatorState(v.State),
		RecoveryPoint: string(v.Point), Attempts: v.Attempts, CreatedAt: v.CreatedAt.UTC().Format(time.RFC3339),
	}
	if v.NextAttemptAt != nil {
		s := v.NextAttemptAt.UTC().Format(time.RFC3339)
		r.NextAttemptAt = &s
	}
	if v.LastError != "" {
		r.LastError = &v.LastError
	}
	return r
}

func printRequests(w io.Writer, views []idempotency.View, names map[int64]string, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, v := range views {
			if err := enc.Encode(newRequestJSON(v, names[v.TenantID])); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tKEY\tENDPOINT\tSTATE\tRECOVERY POINT\tATTEMPTS\tNEXT ATTEMPT\tLAST ERROR")
	for _, v := range views {
		r := newRequestJSON(v, names[v.TenantID])
		next, lastErr := "-", "-"
		if r.NextAttemptAt != nil {
			next = *r.NextAttemptAt
		}
		if r.LastError != nil {
			lastErr = *r.LastError
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Tenant, r.Key, r.Endpoint, r.State, r.RecoveryPoint, r.Attempts, next, lastErr)
	}
	return tw.Flush()
}

func tenantNames(ctx context.Context, pool *pgxpool.Pool, views []idempotency.View) (map[int64]string, error) {
	ids := make([]int64, 0, len(views))
	for _, v := range views {
		ids = append(ids, v.TenantID)
	}
	return tenants.Names(ctx, pool, ids)
}

// shownRequest is `requests show`: the whole record.
type shownRequest struct {
	requestJSON
	ResponseStatus *int               `json:"response_status"`
	Response       json.RawMessage    `json:"response"`
	CompletedAt    *string            `json:"completed_at"`
	Charge         json.RawMessage    `json:"charge"`
	Resolutions    []charges.Resolved `json:"resolutions"`
	// ObjectID, Holder (who holds the key now, "" if nobody), the trace of
	// the claiming request, the key's hash as spans carry it, and the
	// timeline (see showTimeline).
	ObjectID string           `json:"object_id"`
	Holder   string           `json:"holder"`
	TraceID  string           `json:"trace_id"`
	KeyHash  string           `json:"key_hash"`
	Timeline []timeline.Entry `json:"timeline"`
}

func showRequest(ctx context.Context, pool *pgxpool.Pool, t tenants.Tenant, key string) (*shownRequest, error) {
	v, err := idempotency.GetView(ctx, pool, t.ID, key)
	if err != nil {
		return nil, err
	}
	shown := &shownRequest{requestJSON: newRequestJSON(v, t.Name), ResponseStatus: v.ResponseStatus,
		Response: json.RawMessage("null"), Charge: json.RawMessage("null"), Resolutions: []charges.Resolved{}}
	if v.CompletedAt != nil {
		s := v.CompletedAt.UTC().Format(time.RFC3339)
		shown.CompletedAt = &s
	}
	store, err := idempotency.NewStore(idempotency.Config{})
	if err != nil {
		return nil, err
	}
	rec, err := store.Lookup(ctx, pool, t.ID, key)
	if err != nil {
		return nil, err
	}
	if rec.Response != nil {
		if json.Valid(rec.Response.Body) {
			shown.Response = rec.Response.Body
		} else {
			raw, _ := json.Marshal(string(rec.Response.Body))
			shown.Response = raw
		}
	}
	if v.ObjectID != "" {
		if c, err := charges.ByID(ctx, pool, t.ID, v.ObjectID); err == nil {
			if shown.Charge, err = c.MarshalJSON(); err != nil {
				return nil, err
			}
		}
	}
	if shown.Resolutions, err = charges.ResolutionsOf(ctx, pool, rec.ID()); err != nil {
		return nil, err
	}
	tl, err := timeline.Read(ctx, pool, t.ID, key)
	if err != nil {
		return nil, err
	}
	shown.ObjectID, shown.Holder, shown.TraceID, shown.Timeline = tl.ObjectID, tl.Holder, tl.TraceID(), tl.Entries
	shown.KeyHash = idempotency.KeyHash(key)
	return shown, nil
}
