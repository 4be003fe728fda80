// Package routing owns phasepay's PSPs when there may be several: their
// names (PSPS), the order each currency tries them in (PSP_ROUTING), a
// circuit breaker per PSP, and the choice of the PSP a new charge starts
// at. The Router it builds is what the charges see as their PSP: every
// authorization, capture, void and refund names the PSP it goes to, and
// the Router sends it there.
//
// What routing never decides is when a charge may move to another PSP:
// that is the charge's own rule (internal/charges, failover.go), made on
// the outcome class of an answer, never on a breaker. A breaker only
// steers NEW charges, which is safe because nothing was sent anywhere yet.
package routing

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/phasepay/phasepay/internal/envconfig"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/stripepsp"
)

// DefaultName is the PSP's name when PSP_URL gives the only one.
const DefaultName = "default"

// Embedded is the PSP_URL that selects an in-process mock PSP (the
// processes substitute its URL before building the Router).
const Embedded = "embedded"

// Defaults of the breaker (PSP_BREAKER_THRESHOLD, PSP_BREAKER_COOLDOWN).
const (
	BreakerThresholdDefault = 5
	BreakerCooldownDefault  = 5 * time.Second
)

// PSP is one named PSP.
type PSP struct {
	Name string
	// URL is its base URL, or Embedded. Its scheme names its dialect:
	// http(s) is phasepay's own PSP protocol (the mock's), stripe+http(s)
	// is Stripe (internal/psp/stripepsp).
	URL string
	// Stripe is a Stripe PSP's settings (PSP_<NAME>_API_KEY and the
	// rest); nil for any other.
	Stripe *stripepsp.Settings
}

// String names the PSP for logs: its name and redacted URL, never its key.
func (p PSP) String() string { return p.Name + "=" + psp.RedactURL(p.URL) }

// Config is the PSPs of a process and the order to try them in.
type Config struct {
	// PSPs in the order PSPS lists them; one PSP named DefaultName with
	// PSP_URL. Empty when neither is set (commands that need no PSP).
	PSPs []PSP
	// Routes maps a lower-case currency, or "*" for every other, to the
	// names of the PSPs to try, in order. Always has "*".
	Routes map[string][]string
	// Single is PSP_URL's mode: one PSP, and its key for a charge's
	// authorization stays <charge>:authorize.
	Single bool
	// BreakerThreshold is how many unknown or busy outcomes in a row open
	// a PSP's breaker (PSP_BREAKER_THRESHOLD). Default 5.
	BreakerThreshold int
	// BreakerCooldown is how long an open breaker keeps new charges away
	// before one new charge probes the PSP (PSP_BREAKER_COOLDOWN). Default 5s.
	BreakerCooldown time.Duration
}

var (
	nameRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
	currencyRE = regexp.MustCompile(`^[a-z]{3}$`)
)

// FromEnv reads PSP_URL, PSPS, PSP_ROUTING, PSP_BREAKER_THRESHOLD and
// PSP_BREAKER_COOLDOWN. Exactly one of PSP_URL and PSPS may be set; with
// neither, the Config has no PSP (the caller decides whether it needs one).
// Errors are one line naming the variable.
func FromEnv(getenv func(string) string) (Config, error) {
	var (
		c   Config
		err error
	)
	if c.BreakerCooldown, err = envconfig.Duration(getenv, "PSP_BREAKER_COOLDOWN", BreakerCooldownDefault); err != nil {
		return Config{}, err
	}
	if c.BreakerCooldown <= 0 {
		return Config{}, fmt.Errorf("PSP_BREAKER_COOLDOWN: must be positive, got %s", c.BreakerCooldown)
	}
	c.BreakerThreshold = BreakerThresholdDefault
	if v := strings.TrimSpace(getenv("PSP_BREAKER_THRESHOLD")); v != "" {
		if _, err := fmt.Sscanf(v, "%d", &c.BreakerThreshold); err != nil || c.BreakerThreshold < 1 || fmt.Sprint(c.BreakerThreshold) != v {
			return Config{}, fmt.Errorf("PSP_BREAKER_THRESHOLD: %q is not a positive integer", v)
		}
	}
	pspURL, psps, routes := strings.TrimSpace(getenv("PSP_URL")), strings.TrimSpace(getenv("PSPS")), strings.TrimSpace(getenv("PSP_ROUTING"))
	switch {
	case pspURL != "" && psps != "":
		return Config{}, fmt.Errorf("PSP_URL and PSPS are both set: set PSP_URL for one PSP, or PSPS (and PSP_ROUTING) for several")
	case pspURL != "":
		if routes != "" {
			return Config{}, fmt.Errorf("PSP_ROUTING is set without PSPS: it routes between the PSPs PSPS names")
		}
		if err := checkURL(pspURL, true); err != nil {
			return Config{}, fmt.Errorf("PSP_URL: %w", err)
		}
		p, err := withDialect(getenv, PSP{Name: DefaultName, URL: pspURL})
		if err != nil {
			return Config{}, err
		}
		c.PSPs, c.Single = []PSP{p}, true
		c.Routes = map[string][]string{"*": {DefaultName}}
		return c, nil
	case psps == "":
		if routes != "" {
			return Config{}, fmt.Errorf("PSP_ROUTING is set without PSPS: it routes between the PSPs PSPS names")
		}
		return c, nil
	}
	if c.PSPs, err = parsePSPs(psps); err != nil {
		return Config{}, fmt.Errorf("PSPS: %w", err)
	}
	for i := range c.PSPs {
		if c.PSPs[i], err = withDialect(getenv, c.PSPs[i]); err != nil {
			return Config{}, err
		}
	}
	if c.Routes, err = parseRoutes(routes, c.PSPs); err != nil {
		return Config{}, fmt.Errorf("PSP_ROUTING: %w", err)
	}
	return c, nil
}

// Single returns the Config of one PSP named DefaultName at url (PSP_URL's
// mode), with the default breaker.
func Single(url string) Config {
	return Config{PSPs: []PSP{{Name: DefaultName, URL: url}}, Routes: map[string][]string{"*": {DefaultName}}, Single: true}
}

// parsePSPs reads name=url,name=url.
func parsePSPs(v string) ([]PSP, error) {
	var out []PSP
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		name, u, ok := strings.Cut(strings.TrimSpace(part), "=")
		name, u = strings.TrimSpace(name), strings.TrimSpace(u)
		switch {
		case !ok:
			return nil, fmt.Errorf("%q is not name=url", part)
		case !nameRE.MatchString(name):
			return nil, fmt.Errorf("name %q: must be 1 to 32 of a-z, 0-9, _ and -, starting with a letter or digit", name)
		case seen[name]:
			return nil, fmt.Errorf("name %q appears twice", name)
		}
		if err := checkURL(u, false); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		seen[name] = true
		out = append(out, PSP{Name: name, URL: u})
	}
	return out, nil
}

// parseRoutes reads cur:a>b,*:a. Without PSP_ROUTING every currency tries
// the PSPs in PSPS's order.
func parseRoutes(v string, psps []PSP) (map[string][]string, error) {
	known := map[string]bool{}
	var all []string
	for _, p := range psps {
		known[p.Name] = true
		all = append(all, p.Name)
	}
	if v == "" {
		return map[string][]string{"*": all}, nil
	}
	routes := map[string][]string{}
	for _, part := range strings.Split(v, ",") {
		cur, names, ok := strings.Cut(strings.TrimSpace(part), ":")
		cur = strings.TrimSpace(cur)
		switch {
		case !ok:
			return nil, fmt.Errorf("%q is not currency:psp>psp", part)
		case cur != "*" && !currencyRE.MatchString(cur):
			return nil, fmt.Errorf("%q: the currency must be a lower-case ISO 4217 code or *", cur)
		case routes[cur] != nil:
			return nil, fmt.Errorf("currency %q has two routes", cur)
		}
		var route []string
		for _, n := range strings.Split(names, ">") {
			n = strings.TrimSpace(n)
			switch {
			case !known[n]:
				return nil, fmt.Errorf("route %q: unknown PSP %q (PSPS names %s)", cur, n, strings.Join(all, ", "))
			case slices.Contains(route, n):
				return nil, fmt.Errorf("route %q: PSP %q appears twice", cur, n)
			}
			route = append(route, n)
		}
		routes[cur] = route
	}
	if routes["*"] == nil {
		return nil, fmt.Errorf("no route for * (every currency without a route of its own)")
	}
	return routes, nil
}

// withDialect reads the settings of p's dialect: a Stripe PSP's key is
// required (PSP_<NAME>_API_KEY), so one without refuses to start.
func withDialect(getenv func(string) string, p PSP) (PSP, error) {
	if !stripepsp.IsURL(p.URL) {
		return p, nil
	}
	s, err := stripepsp.SettingsFromEnv(getenv, p.Name)
	if err != nil {
		return PSP{}, err
	}
	p.Stripe = &s
	return p, nil
}

// checkURL accepts an absolute http(s) URL, a Stripe PSP's stripe+http(s)
// URL, or Embedded where allowed.
func checkURL(v string, embedded bool) error {
	if embedded && v == Embedded {
		return nil
	}
	if stripepsp.IsURL(v) {
		_, err := stripepsp.BaseURL(v)
		return err
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Quoted without credentials or query: the reason is printed.
		if embedded {
			return fmt.Errorf("%q is not an http(s) URL, a stripe+http(s) URL or %q", psp.RedactURL(v), Embedded)
		}
		return fmt.Errorf("%q is not an http(s) or stripe+http(s) URL", psp.RedactURL(v))
	}
	return nil
}

// Route returns the PSPs a charge in currency tries, in order.
func (c Config) Route(currency string) []string {
	if r, ok := c.Routes[currency]; ok {
		return r
	}
	return c.Routes["*"]
}
