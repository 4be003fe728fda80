package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/phasepay/phasepay/internal/console"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/envconfig"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/httpapi"
	"github.com/phasepay/phasepay/internal/operator"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
)

// ConsoleAddrDefault is where `api console` listens unless CONSOLE_ADDR or
// --addr says otherwise: this machine only.
const ConsoleAddrDefault = "127.0.0.1:8081"

// consoleCommand serves the operator console (package console says why it
// is a command of its own rather than a listener of the api or reaper).
var consoleCommand = &command{
	name:    "console",
	args:    "[--addr ADDR]",
	summary: "serve the operator console in a browser until SIGTERM (127.0.0.1:8081)",
	help: `Serves the operator console on CONSOLE_ADDR (default 127.0.0.1:8081): the
overview, every request with its timeline, charges, webhook endpoints, and
retry and resolve as in api requests. It reads DATABASE_URL and, to resolve,
PSP_URL or PSPS as api requests does; RETENTION and EVENTS_RETENTION as the
reaper has them, for the partitions' drop dates.

Whoever holds the operator token may use it: CONSOLE_TOKEN (at least 16
characters, never a tenant's API key), or a token generated at start and
printed on stdout with a link that logs in. Scripts send it as
"Authorization: Bearer TOKEN". After 5 wrong tokens within a minute, an
address is answered 429 for a minute.

It answers only to its listen address, localhost at its port, and the
names in CONSOLE_HOSTS (comma-separated, "name" or "name:port"): list the
name a proxy in front of it is reached by.`,
	flags: func(fs *flag.FlagSet) action {
		addr := fs.String("addr", "", "listen address (default CONSOLE_ADDR, else "+ConsoleAddrDefault+")")
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) > 0 {
				return usageErrorf("unexpected argument %q", inv.args[0])
			}
			cc, err := parseConsoleEnv(inv.getenv)
			if err != nil {
				return fmt.Errorf("%w: %w", errConfig, err)
			}
			if *addr != "" {
				cc.addr = *addr
			}
			return runConsole(ctx, inv, cc)
		}
	},
}

// consoleEnv is the console's own configuration.
type consoleEnv struct {
	addr                       string
	hosts                      []string
	token                      string
	generated                  bool
	retention, eventsRetention time.Duration
}

func parseConsoleEnv(getenv func(string) string) (consoleEnv, error) {
	c := consoleEnv{addr: envconfig.String(getenv, "CONSOLE_ADDR", ConsoleAddrDefault), token: getenv("CONSOLE_TOKEN")}
	for h := range strings.SplitSeq(getenv("CONSOLE_HOSTS"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.hosts = append(c.hosts, h)
		}
	}
	var err error
	if c.retention, err = envconfig.Duration(getenv, "RETENTION", reaper.RetentionDefault); err != nil {
		return consoleEnv{}, err
	}
	if c.eventsRetention, err = envconfig.Duration(getenv, "EVENTS_RETENTION", events.RetentionDefault); err != nil {
		return consoleEnv{}, err
	}
	switch {
	case c.token == "":
		b := make([]byte, 32)
		_, _ = rand.Read(b) // never fails (crypto/rand)
		c.token, c.generated = base64.RawURLEncoding.EncodeToString(b), true
	case len(c.token) < console.MinTokenLength:
		return consoleEnv{}, fmt.Errorf("CONSOLE_TOKEN: at least %d characters", console.MinTokenLength)
	case strings.HasPrefix(c.token, "sk_"):
		return consoleEnv{}, errTenantKeyAsToken
	}
	return c, nil
}

// errTenantKeyAsToken: a tenant's API key opens one tenant's API; it must
// never also open every tenant's requests.
var errTenantKeyAsToken = errors.New("CONSOLE_TOKEN: this is a tenant's API key, never an operator token; choose a token of its own")

func runConsole(ctx context.Context, inv *invocation, cc consoleEnv) error {
	tel, err := telemetry.New(ctx, "phasepay-console")
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	defer tel.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // best effort at exit
	pool, err := dbpool.OpenPool(ctx, inv.cfg.database(), tel)
	if err != nil {
		return err
	}
	defer pool.Close()
	// A token that some tenant's key authenticates (whatever its shape)
	// is refused too. A database away at start does not stop the
	// console, which shows that; the check then is the sk_ prefix alone.
	checkCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, authErr := tenants.Authenticate(checkCtx, pool, cc.token)
	cancel()
	if authErr == nil {
		return fmt.Errorf("%w: %w", errConfig, errTenantKeyAsToken)
	}
	dc := inv.cfg.deskConfig(inv.logger)
	dc.Telemetry = tel
	desk, err := operator.New(pool, dc)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cc.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close() //nolint:errcheck // closed by the server's shutdown, or here on an error before it
	addr := ln.Addr().String()
	srv, err := console.New(console.Config{Pool: pool, Desk: desk, Token: cc.token, Addr: addr, Hosts: cc.hosts,
		Routing: inv.cfg.Routing, Retention: cc.retention, EventsRetention: cc.eventsRetention, Logger: inv.logger})
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	if !isLoopback(addr) {
		inv.logger.Warn("the console listens beyond this machine: put TLS in front of it, the token travels with every request", "addr", addr)
	}
	base := "http://" + addr
	// The token goes to stdout only, never into the logs (stderr).
	fmt.Fprintf(inv.stdout, "console: %s/\n", base)
	if cc.generated {
		fmt.Fprintf(inv.stdout, "console: operator token %s (log in: %s/login?token=%s)\n", cc.token, base, cc.token)
	}
	inv.logger.Info("console listening", "addr", addr, "token", tokenSource(cc))

	hs := httpapi.NewServer(srv.Handler(), httpapi.ServerConfig{ErrorLog: slog.NewLogLogger(inv.logger.Handler(), slog.LevelWarn)})
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancelShut := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancelShut()
	// Live pages hold their streams open: close them rather than wait.
	if err := hs.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	_ = hs.Close()
	<-served // http.ErrServerClosed
	if err := desk.Close(shutCtx); err != nil {
		inv.logger.Warn("console: closing the operator desk", "error", err.Error())
	}
	return nil
}

func tokenSource(cc consoleEnv) string {
	if cc.generated {
		return "generated (printed on stdout)"
	}
	return "CONSOLE_TOKEN"
}

// isLoopback reports whether a listener's address is on this machine only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
