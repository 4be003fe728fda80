// Package operator is what an operator does to a request that did not end
// by itself: make its next attempt due now (Retry), or settle it after
// checking the PSP by hand (Resolve). `api requests retry|resolve` and the
// operator console (internal/console) both act through a Desk, so that a
// request settled from a browser is settled by the same code, checked
// against the PSP the same way and audited in the same row
// (request_resolutions) as one settled from a shell.
package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/routing"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
)

// Config is what a Desk needs besides its pool.
type Config struct {
	// Keys is the idempotency store's configuration (LEASE and the retry
	// schedule): a resolution holds the key under a lease of Keys.Lease.
	Keys idempotency.Config
	// PSPURL is the one PSP a resolution looks the operation up at (PSP_URL,
	// with "embedded" already turned into the embedded mock's address).
	// Ignored when Routing names several PSPs.
	PSPURL string
	// Routing, with several PSPs (PSPS), makes the lookup ask every one
	// (routing.Router.Lookup).
	Routing routing.Config
	// Logger receives the PSP clients' lines. Default: discarded.
	Logger *slog.Logger
	// Telemetry traces the lookups; nil builds the providers from OTEL_*
	// at the first resolution (service "phasepay-api").
	Telemetry *telemetry.Telemetry
}

// ErrPSPRequired: a resolution must ask the PSP first, and none is
// configured. The way out is the api's PSP_URL (or PSPS) in the
// operator's shell; Force is only for a PSP that cannot be reached, so
// the message names it second.
var ErrPSPRequired = errors.New("no PSP to look the operation up at: export PSP_URL=… (or PSPS=…) as the api has it, and run this again; " +
	"only if that PSP cannot be reached, resolve with --force after checking its books by hand")

// Desk acts on requests for an operator. It is safe for concurrent use.
type Desk struct {
	pool *pgxpool.Pool
	cfg  Config
	keys *idempotency.Store

	mu       sync.Mutex
	resolver *charges.Service // built at the first resolution that asks the PSP
	forced   *charges.Service // for Force without a PSP: never calls one
	tel      *telemetry.Telemetry
	ownTel   bool
}

// New returns a Desk on pool.
func New(pool *pgxpool.Pool, cfg Config) (*Desk, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// What the desk writes in a key's timeline names an operator.
	cfg.Keys.Role = cmp.Or(cfg.Keys.Role, idempotency.RoleOperator)
	keys, err := idempotency.NewStore(cfg.Keys)
	if err != nil {
		return nil, err
	}
	return &Desk{pool: pool, cfg: cfg, keys: keys, tel: cfg.Telemetry}, nil
}

// HasPSP reports whether a resolution can ask a PSP; without one only a
// forced resolution is possible.
func (d *Desk) HasPSP() bool { return d.cfg.PSPURL != "" || len(d.cfg.Routing.PSPs) > 0 }

// Retry makes the next attempt of the tenant's (named) unfinished or
// needs_attention request due now; the reaper makes it at its next pass.
// The request's timeline records it as by's. Errors:
// tenants.ErrTenantNotFound, idempotency.ErrNotFound,
// idempotency.ErrFinished.
func (d *Desk) Retry(ctx context.Context, tenantName, key, by string) (tenants.Tenant, error) {
	if by == "" {
		return tenants.Tenant{}, fmt.Errorf("retry %q: an operator name is required", key)
	}
	t, err := tenants.ByName(ctx, d.pool, tenantName)
	if err != nil {
		return tenants.Tenant{}, err
	}
	return t, d.keys.RetryNow(ctx, d.pool, t.ID, key, by)
}

// Resolve settles the tenant's (named) needs_attention request as r says,
// after asking the PSP unless r.Force, and returns the answer now stored
// for it. The resolution, its reason and r.By are recorded with it. The
// key is checked first: a key that does not need resolving is refused as
// such, whatever the PSP configuration. Errors: tenants.ErrTenantNotFound,
// idempotency.ErrNotFound, idempotency.ErrNotNeedsAttention,
// ErrPSPRequired and those of charges.Service.Resolve.
func (d *Desk) Resolve(ctx context.Context, tenantName, key string, r charges.Resolution) (tenants.Tenant, idempotency.Response, error) {
	t, err := tenants.ByName(ctx, d.pool, tenantName)
	if err != nil {
		return tenants.Tenant{}, idempotency.Response{}, err
	}
	v, err := idempotency.GetView(ctx, d.pool, t.ID, key)
	if err != nil {
		return t, idempotency.Response{}, fmt.Errorf("resolve %q: %w", key, err)
	}
	if v.State != idempotency.RequestNeedsAttention {
		return t, idempotency.Response{}, fmt.Errorf("resolve %q (%s): %w", key, v.State, idempotency.ErrNotNeedsAttention)
	}
	svc, err := d.service(ctx, r.Force)
	if err != nil {
		return t, idempotency.Response{}, err
	}
	resp, err := svc.Resolve(ctx, t.ID, key, r)
	return t, resp, err
}

// Close flushes the telemetry the Desk built for itself.
func (d *Desk) Close(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ownTel && d.tel != nil {
		return d.tel.Shutdown(ctx)
	}
	return nil
}

// service is a charges service that can ask the PSP; for a forced
// resolution without a PSP configured, one whose PSP is never called.
func (d *Desk) service(ctx context.Context, force bool) (*charges.Service, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.HasPSP() {
		if !force {
			return nil, ErrPSPRequired
		}
		if d.forced == nil {
			tel, err := d.telemetry(ctx)
			if err != nil {
				return nil, err
			}
			// Resolve with Force never looks anything up: this address
			// is never dialled.
			client, err := routing.TracedClient("http://127.0.0.1:0", tel)
			if err != nil {
				return nil, fmt.Errorf("psp: %w", err)
			}
			if d.forced, err = charges.NewService(d.pool, d.keys, client, phases.Config{Logger: d.cfg.Logger}); err != nil {
				return nil, err
			}
		}
		return d.forced, nil
	}
	if d.resolver != nil {
		return d.resolver, nil
	}
	tel, err := d.telemetry(ctx)
	if err != nil {
		return nil, err
	}
	var client charges.Authorizer
	if len(d.cfg.Routing.PSPs) > 0 && (!d.cfg.Routing.Single || d.cfg.Routing.PSPs[0].Stripe != nil) {
		// With PSPS, the lookup asks every PSP (routing.Router.Lookup); a
		// Stripe PSP_URL is spoken through its connector.
		client, err = routing.NewTraced(d.cfg.Routing, tel, d.cfg.Logger)
	} else {
		client, err = routing.TracedClient(d.cfg.PSPURL, tel)
	}
	if err != nil {
		return nil, fmt.Errorf("psp: %w", err)
	}
	if d.resolver, err = charges.NewService(d.pool, d.keys, client, phases.Config{Logger: d.cfg.Logger}); err != nil {
		return nil, err
	}
	return d.resolver, nil
}

// telemetry returns the Desk's providers, built at first use.
func (d *Desk) telemetry(ctx context.Context) (*telemetry.Telemetry, error) {
	if d.tel == nil {
		tel, err := telemetry.New(ctx, "phasepay-api")
		if err != nil {
			return nil, err
		}
		d.tel, d.ownTel = tel, true
	}
	return d.tel, nil
}
