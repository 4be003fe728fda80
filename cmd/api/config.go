package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/envconfig"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/routing"
)

// Config is the API's configuration, from the contract's environment
// variables.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string (DATABASE_URL).
	DatabaseURL string
	// DatabasePooler (DATABASE_POOLER=transaction) declares that
	// DatabaseURL goes through a transaction-mode pooler, and
	// DatabaseDirectURL (DATABASE_DIRECT_URL) is then the server itself,
	// for LISTEN and `api migrate`; see dbpool.Config.
	DatabasePooler    dbpool.Pooler
	DatabaseDirectURL string
	// Addr is the listen address (API_ADDR); port 0 picks a free one.
	Addr string
	// PSPURL is the PSP's base URL (PSP_URL), required by serve. The value
	// PSPEmbedded selects an in-process mock PSP listening on MockPSPAddr
	// (MOCKPSP_ADDR), so that a reaper started with
	// PSP_URL=http://MOCKPSP_ADDR shares its ledger. It is never a default:
	// a production process that lost its PSP_URL must not authorize
	// against a mock and report charges no PSP ever saw.
	PSPURL      string
	MockPSPAddr string
	// Routing is the PSPs (PSP_URL, or PSPS and PSP_ROUTING for several)
	// and their breakers; see package routing. Empty when neither is set.
	// A Main whose Routing is empty but PSPURL set routes to that one PSP.
	Routing routing.Config
	// MetricsAddr, if set (METRICS_ADDR), serves GET /metrics on a listener
	// of its own and takes it off the API's port, so that the public
	// address does not expose the process's internals. Empty: /metrics is
	// served on Addr.
	MetricsAddr string
	// Lease is how long a worker holds a key without progress (LEASE).
	Lease time.Duration
	// RetryBase, RetryMax (RETRY_BASE, RETRY_MAX) are the retry schedule
	// of an unfinished request, and GiveUpAfter (GIVE_UP_AFTER) when it
	// becomes needs_attention; see idempotency.Config.
	RetryBase, RetryMax, GiveUpAfter time.Duration
	// PprofAddr, if set (PPROF_ADDR), serves net/http/pprof there: for
	// profiling under `make bench`, never on a public address.
	PprofAddr string
	// OneCommitPerPhase commits every recovery point separately
	// (ONE_COMMIT_PER_PHASE=true), for comparison; the default folds the
	// phases that have no foreign call between them.
	OneCommitPerPhase bool
	// Batch shares statements between concurrent requests' transactions
	// (BATCH=false turns it off, for comparison; BATCH_MAX requests per
	// batch; BATCH_LANES batches of a kind in flight at once); see
	// phases.BatchConfig.
	Batch phases.BatchConfig
	// WebhookAllowPrivate (WEBHOOK_ALLOW_PRIVATE=1) accepts webhook
	// endpoints on loopback, private and link-local addresses: for
	// development (chargectl listen), never in production.
	WebhookAllowPrivate bool
	// TimelineOff (TIMELINE=off) records no request timelines: only for
	// make bench's measurement of what they cost. See
	// idempotency.Config.TimelineOff.
	TimelineOff bool
}

// Defaults of the contract.
const (
	DatabaseURLDefault = dbpool.DatabaseURLDefault
	AddrDefault        = "127.0.0.1:8080"
	MockPSPAddrDefault = mockpsp.AddrDefault
	LeaseDefault       = 60 * time.Second
)

// PSPEmbedded is the PSP_URL that selects the in-process mock PSP (what
// `make run` and the tests use).
const PSPEmbedded = "embedded"

// ErrPSPURLRequired is serve's refusal to start without PSP_URL. Only serve
// needs a PSP, so ParseEnv accepts its absence for migrate and keys.
var ErrPSPURLRequired = errors.New(`PSP_URL is required: the PSP's base URL, or "embedded" for an in-process mock PSP (development and tests only); or PSPS (and PSP_ROUTING) for several PSPs`)

// ParseEnv reads Config from the environment and validates it.
func ParseEnv(getenv func(string) string) (Config, error) {
	var (
		c   Config
		err error
	)
	db, err := dbpool.ConfigFromEnv(getenv)
	if err != nil {
		return Config{}, err
	}
	c.DatabaseURL, c.DatabasePooler, c.DatabaseDirectURL = db.URL, db.Pooler, db.DirectURL
	c.Addr = envconfig.String(getenv, "API_ADDR", AddrDefault)
	c.PSPURL = getenv("PSP_URL")
	c.MockPSPAddr = envconfig.String(getenv, "MOCKPSP_ADDR", MockPSPAddrDefault)
	c.PprofAddr = getenv("PPROF_ADDR")
	c.MetricsAddr = getenv("METRICS_ADDR")
	if c.Lease, err = envconfig.Duration(getenv, "LEASE", LeaseDefault); err != nil {
		return Config{}, err
	}
	if c.Lease < time.Second {
		return Config{}, fmt.Errorf("LEASE: must be at least 1s, got %s", c.Lease)
	}
	if c.OneCommitPerPhase, err = envconfig.Bool(getenv, "ONE_COMMIT_PER_PHASE", false); err != nil {
		return Config{}, err
	}
	batch, err := envconfig.Bool(getenv, "BATCH", true)
	if err != nil {
		return Config{}, err
	}
	c.Batch.Off = !batch
	if c.Batch.Max, err = envconfig.Int(getenv, "BATCH_MAX", phases.DefaultBatchMax, 2, 256); err != nil {
		return Config{}, err
	}
	if c.Batch.Lanes, err = envconfig.Int(getenv, "BATCH_LANES", phases.DefaultBatchLanes, 1, 8); err != nil {
		return Config{}, err
	}
	if c.WebhookAllowPrivate, err = envconfig.Bool(getenv, "WEBHOOK_ALLOW_PRIVATE", false); err != nil {
		return Config{}, err
	}
	if c.RetryBase, c.RetryMax, c.GiveUpAfter, err = idempotency.ScheduleFromEnv(getenv); err != nil {
		return Config{}, err
	}
	if c.TimelineOff, err = idempotency.TimelineOffFromEnv(getenv); err != nil {
		return Config{}, err
	}
	if c.Routing, err = routing.FromEnv(getenv); err != nil {
		return Config{}, err
	}
	return c, nil
}

// database is how the api connects to PostgreSQL.
func (c Config) database() dbpool.Config {
	return dbpool.Config{URL: c.DatabaseURL, Pooler: c.DatabasePooler, DirectURL: c.DatabaseDirectURL}
}

// hasPSP reports whether a PSP is configured (PSP_URL or PSPS).
func (c Config) hasPSP() bool { return c.PSPURL != "" || len(c.Routing.PSPs) > 0 }

// routes is the Routing of c, the one PSP of PSPURL when Routing is empty
// (a Main built in-process), with the embedded mock's URL for embedded.
func (c Config) routes(mockURL string) routing.Config {
	r := c.Routing
	if len(r.PSPs) == 0 {
		r = routing.Single(c.PSPURL)
	}
	if r.Single && r.PSPs[0].URL == PSPEmbedded {
		r.PSPs = []routing.PSP{{Name: routing.DefaultName, URL: mockURL}}
	}
	return r
}

// pspWebhookSecrets are the webhook secrets of the Stripe PSPs that have
// one (PSP_<NAME>_WEBHOOK_SECRET), for POST /v1/psp_webhooks/{psp}.
func (c Config) pspWebhookSecrets() map[string]string {
	out := map[string]string{}
	for _, p := range c.Routing.PSPs {
		if p.Stripe != nil && p.Stripe.WebhookSecret != "" {
			out[p.Name] = p.Stripe.WebhookSecret
		}
	}
	return out
}

// keysConfig is the idempotency store's configuration (role api: the
// requests commands set their own, operator).
func (c Config) keysConfig() idempotency.Config {
	return idempotency.Config{Lease: c.Lease, RetryBase: c.RetryBase, RetryMax: c.RetryMax, GiveUpAfter: c.GiveUpAfter,
		NeedsAttention: events.NeedsAttention, TimelineOff: c.TimelineOff}
}

// operatorKeysConfig is keysConfig for the operator's commands, whose
// writes (a resolution's finish) the timeline names as the operator's.
func (c Config) operatorKeysConfig() idempotency.Config {
	cfg := c.keysConfig()
	cfg.Role = idempotency.RoleOperator
	return cfg
}
