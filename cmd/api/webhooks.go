package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// The operator's webhook lever (`api webhooks redeliver`): a new attempt,
// due now, of deliveries already owed, for one event or for one
// endpoint's events of a time window. The same as a tenant's POST
// /v1/events/{id}/redeliver and the console's button (package webhooks,
// Redeliver), audited in webhook_redeliveries with the operator's name.

var webhooksCommand = &command{
	name:    "webhooks",
	summary: "webhook deliveries: redeliver",
	sub:     []*command{webhooksRedeliverCommand},
}

var webhooksRedeliverCommand = &command{
	name:    "redeliver",
	args:    "--tenant T [--endpoint WE_ID] (EVENT_ID | --since TIME [--until TIME]) [--by NAME]",
	summary: "make a new delivery attempt due now: of one event, or of one endpoint's events in a window",
	help: `With EVENT_ID: the event's delivery to every live endpoint it was owed to
(or only --endpoint's) gets a new attempt, due now, also after its retries
were given up or it succeeded. With --since (and --until, default now)
instead of EVENT_ID, --endpoint is required: every delivery to that endpoint
of the events written in [--since, --until), in batches of 500 events. TIME is RFC 3339
(2026-12-04T21:00:00Z) or a duration, meaning that long ago (6h).

Only deliveries already owed are made due: an endpoint receives only events
written after it was created, and a deleted endpoint nothing more. Each
redelivery is recorded in webhook_redeliveries with the operator (--by;
without it $USER, else the account running the command), shown in the
request's timeline (requests show) for the events it names. Receivers
deduplicate by event id: a redelivered event is the same bytes, the same id.`,
	flags: func(fs *flag.FlagSet) action {
		tenant := fs.String("tenant", "", "the tenant (required)")
		endpoint := fs.String("endpoint", "", "only this endpoint (we_…); with --since, its events of a window")
		since := fs.String("since", "", "the window's start: RFC 3339, or a duration ago (6h)")
		until := fs.String("until", "", "the window's end, not included (default: now)")
		by := fs.String("by", "", "the operator's name (default: $USER, else the account running the command)")
		return func(ctx context.Context, inv *invocation) error {
			if *tenant == "" {
				return usageErrorf("--tenant is required")
			}
			rd := webhooks.Redelivery{EndpointID: *endpoint, By: cmp.Or(*by, defaultOperator(inv.getenv)), Via: webhooks.ViaCLI}
			now := time.Now()
			switch {
			case len(inv.args) > 1:
				return usageErrorf("one EVENT_ID at most")
			case len(inv.args) == 1:
				if *since != "" || *until != "" {
					return usageErrorf("EVENT_ID or a window (--since, --until), not both")
				}
				rd.EventID = inv.args[0]
			case *endpoint == "" || *since == "":
				return usageErrorf("EVENT_ID, or --endpoint with --since, is required")
			default:
				var err error
				if rd.From, err = parseWhen(*since, now); err != nil {
					return usageErrorf("--since: %v", err)
				}
				rd.Until = now
				if *until != "" {
					if rd.Until, err = parseWhen(*until, now); err != nil {
						return usageErrorf("--until: %v", err)
					}
				}
				if !rd.From.Before(rd.Until) {
					return usageErrorf("--since must be before --until")
				}
			}
			return withPool(ctx, inv, func(ctx context.Context, pool *pgxpool.Pool) error {
				t, err := tenants.ByName(ctx, pool, *tenant)
				if err != nil {
					return err
				}
				rd.TenantID = t.ID
				done, err := webhooks.Redeliver(ctx, pool, rd)
				if err != nil {
					return err
				}
				inv.logger.Info("webhook redelivery", "tenant", t.Name, "event", rd.EventID, "endpoint", rd.EndpointID,
					"by", rd.By, "deliveries", done.Deliveries)
				if rd.EventID != "" {
					at := "no live endpoint it was owed to"
					if len(done.Endpoints) > 0 {
						at = strings.Join(done.Endpoints, ", ")
					}
					_, err = fmt.Fprintf(inv.stdout, "%s %s: a new attempt is due now at %s\n", t.Name, rd.EventID, at)
					return err
				}
				_, err = fmt.Fprintf(inv.stdout, "%s %s: a new attempt is due now for %d deliveries of events written from %s to %s\n",
					t.Name, rd.EndpointID, done.Deliveries, rd.From.UTC().Format(time.RFC3339), rd.Until.UTC().Format(time.RFC3339))
				return err
			})
		}
	},
}

// parseWhen reads a time as RFC 3339, or as a duration meaning that long
// before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q: an RFC 3339 time (2026-12-04T21:00:00Z) or a duration ago (6h)", s)
	}
	return now.Add(-d), nil
}
