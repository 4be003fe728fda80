// Package stripepsp is phasepay's Stripe connector: a PSP behind the same
// interface as the mock's client (internal/psp), spoken through Stripe's
// official Go library, github.com/stripe/stripe-go. A PSP whose URL is
// stripe+https://api.stripe.com (or stripe+http://HOST:PORT, e.g.
// stripe-mock) is one (internal/routing).
//
// An authorization is a PaymentIntent created and confirmed with manual
// capture, under Stripe's Idempotency-Key set to the attempt's derived key,
// the charge, tenant and key in its metadata; a capture, void and refund
// are the PaymentIntent's capture and cancel, and a Refund (operations.go).
// What each of Stripe's answers means is the table in classify.go
// (docs/psps.md).
//
// What makes it safe is Stripe's own semantics, taken as they are
// documented, not as a mock would have them (authorize.go): Stripe keeps a
// key's first answer, a 500 included, for at least 24 hours and may then
// forget it; its search by metadata, the only lookup by reference a
// PaymentIntent has before its id is known, lags (usually under a minute,
// up to an hour during outages); and its list endpoints, which are
// consistent, cannot filter PaymentIntents by metadata.
package stripepsp

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/phasepay/phasepay/internal/envconfig"
	"github.com/phasepay/phasepay/internal/psp"
)

// Scheme prefixes of a Stripe PSP's URL: stripe+ before http or https.
const schemePrefix = "stripe+"

// IsURL reports whether u names a Stripe PSP (stripe+http:// or
// stripe+https://).
func IsURL(u string) bool {
	return strings.HasPrefix(u, schemePrefix+"http://") || strings.HasPrefix(u, schemePrefix+"https://")
}

// BaseURL returns the http(s) URL of a Stripe PSP's URL, checked: an
// absolute URL with a host and no credentials, query or fragment (the
// secret key has a variable of its own).
func BaseURL(u string) (string, error) {
	if !IsURL(u) {
		return "", fmt.Errorf("%q is not a stripe+http(s) URL", psp.RedactURL(u))
	}
	base := strings.TrimPrefix(u, schemePrefix)
	p, err := url.Parse(base)
	switch {
	case err != nil || p.Host == "":
		return "", fmt.Errorf("%q is not a stripe+http(s) URL with a host", psp.RedactURL(u))
	case p.User != nil || p.RawQuery != "" || p.Fragment != "":
		return "", fmt.Errorf("%q: a Stripe PSP's URL carries no credentials or query (its key is PSP_<NAME>_API_KEY)", psp.RedactURL(u))
	}
	return strings.TrimSuffix(base, "/"), nil
}

// Defaults of Settings.
const (
	// KeyWindowDefault is how long phasepay resends under one key. Stripe
	// keeps a key's first answer at least 24 hours; the hour less covers
	// the clocks of phasepay's database and Stripe's, and a worker that
	// stalls between deciding to send and sending.
	KeyWindowDefault = 23 * time.Hour
	// SearchLagDefault bounds how far Stripe's search may be behind its
	// writes: "data is searchable in less than a minute; occasionally,
	// propagation of new or updated data can be up to an hour behind
	// during outages". A search that finds nothing proves nothing about
	// the last hour.
	SearchLagDefault = time.Hour
)

// Settings are a Stripe PSP's own configuration, from PSP_<NAME>_*.
type Settings struct {
	// APIKey is the secret key (PSP_<NAME>_API_KEY). Required.
	APIKey string
	// WebhookSecret verifies Stripe's webhooks at /v1/psp_webhooks/{psp}
	// (PSP_<NAME>_WEBHOOK_SECRET); empty refuses them.
	WebhookSecret string
	// KeyWindow (PSP_<NAME>_KEY_WINDOW) is how long after an attempt was
	// recorded phasepay still resends under its key. Default
	// KeyWindowDefault; it must stay below how long Stripe keeps keys.
	KeyWindow time.Duration
	// SearchLag (PSP_<NAME>_SEARCH_LAG) bounds the lag of Stripe's search.
	// Default SearchLagDefault.
	SearchLag time.Duration
}

// String prints the settings without their secrets, should a log line or
// an error ever format them.
func (s Settings) String() string {
	return fmt.Sprintf("{APIKey:%s WebhookSecret:%s KeyWindow:%s SearchLag:%s}", redacted(s.APIKey), redacted(s.WebhookSecret), s.KeyWindow, s.SearchLag)
}

// GoString is String, for %#v.
func (s Settings) GoString() string { return s.String() }

func redacted(secret string) string {
	if secret == "" {
		return "(none)"
	}
	return "(set)"
}

// EnvPrefix is the prefix of a PSP's own variables: PSP_ and its name
// upper-cased, a dash as an underscore, then _ (PSP_STRIPE_, PSP_DEFAULT_).
func EnvPrefix(name string) string {
	return "PSP_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_"
}

// SettingsFromEnv reads the Stripe PSP name's settings. Errors are one line
// naming the variable; a missing key is one, so that a Stripe PSP without
// its key refuses to start.
func SettingsFromEnv(getenv func(string) string, name string) (Settings, error) {
	prefix := EnvPrefix(name)
	s := Settings{APIKey: strings.TrimSpace(getenv(prefix + "API_KEY")), WebhookSecret: strings.TrimSpace(getenv(prefix + "WEBHOOK_SECRET"))}
	if s.APIKey == "" {
		return Settings{}, fmt.Errorf("%sAPI_KEY is not set: the Stripe PSP %q needs its secret key (sk_test_… or sk_live_…)", prefix, name)
	}
	var err error
	if s.KeyWindow, err = envconfig.Duration(getenv, prefix+"KEY_WINDOW", KeyWindowDefault); err != nil {
		return Settings{}, err
	}
	if s.SearchLag, err = envconfig.Duration(getenv, prefix+"SEARCH_LAG", SearchLagDefault); err != nil {
		return Settings{}, err
	}
	if s.KeyWindow <= 0 || s.SearchLag <= 0 {
		return Settings{}, fmt.Errorf("%sKEY_WINDOW and %sSEARCH_LAG must be positive", prefix, prefix)
	}
	return s, nil
}

// Config configures a Client. Zero fields take the defaults of Settings
// and of internal/psp's ClientConfig.
type Config struct {
	// Name is the PSP's name, for error messages.
	Name string
	// URL is the PSP's stripe+http(s) URL. Required.
	URL string
	Settings
	// HTTPClient sends the requests; it must be built on psp.NewTransport
	// (psp.NewHTTPClient), which never resends a request by itself. Nil
	// means one on a transport of this package's own.
	HTTPClient *http.Client
	// AttemptTimeout bounds one request. Default psp.AttemptTimeoutDefault.
	AttemptTimeout time.Duration
	// MaxAttempts bounds the sends of one call. Default psp.MaxAttemptsDefault.
	MaxAttempts int
	// InitialBackoff and MaxBackoff are the pauses between sends, as
	// internal/psp's ClientConfig's.
	InitialBackoff, MaxBackoff time.Duration
	// Now is the clock the key window is measured on. Default time.Now.
	Now func() time.Time
}

// Client is one Stripe PSP. It is safe for concurrent use.
type Client struct {
	cfg Config
	sc  *stripe.Client
}

// defaultTransport is shared by the clients built without an HTTPClient.
var defaultTransport = psp.NewTransport()

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	base, err := BaseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("stripe psp %s: %w", cfg.Name, err)
	}
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("stripe psp %s: %sAPI_KEY is required", cfg.Name, EnvPrefix(cfg.Name))
	}
	cfg.KeyWindow = cmp.Or(cfg.KeyWindow, KeyWindowDefault)
	cfg.SearchLag = cmp.Or(cfg.SearchLag, SearchLagDefault)
	cfg.AttemptTimeout = cmp.Or(cfg.AttemptTimeout, psp.AttemptTimeoutDefault)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, psp.MaxAttemptsDefault)
	cfg.InitialBackoff = cmp.Or(cfg.InitialBackoff, psp.InitialBackoffDefault)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, psp.MaxBackoffDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxBackoff < cfg.InitialBackoff || cfg.MaxAttempts < 0 || cfg.AttemptTimeout < 0 {
		return nil, errors.New("stripe psp: negative timeout or attempts, or MaxBackoff below InitialBackoff")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = psp.NewHTTPClient(defaultTransport)
	}
	// No retries of the library's own: every send and lookup is this
	// package's decision (stripe-go would resend a 5xx or a lost answer
	// under the same key, which is right within Stripe's key window and
	// wrong beyond it). No logs of its own either: they are not JSON lines.
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		HTTPClient:        cfg.HTTPClient,
		URL:               stripe.String(base),
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	})
	sc := stripe.NewClient(cfg.APIKey, stripe.WithBackends(&stripe.Backends{API: backend, Connect: backend, Uploads: backend, MeterEvents: backend}))
	return &Client{cfg: cfg, sc: sc}, nil
}

// Settings returns the client's settings (the webhook handler's secret).
func (c *Client) Settings() Settings { return c.cfg.Settings }

// The metadata phasepay writes on every PaymentIntent and Refund: what a
// lookup finds them by, and what Stripe's webhooks name them by.
const (
	MetaCharge = "phasepay_charge"
	MetaTenant = "phasepay_tenant"
	MetaKey    = "phasepay_key"
	MetaRefund = "phasepay_refund"
)
