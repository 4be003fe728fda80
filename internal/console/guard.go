package console

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The console's outer guards: the Host a request names, and how fast an
// address may guess the operator token.

// hostGuard answers only requests addressed to the console by a name it
// was given: its listen address, localhost at its port, or a name of
// CONSOLE_HOSTS. A page of another site whose name an attacker points at
// 127.0.0.1 (DNS rebinding) reaches the console as same-origin to the
// browser, but its requests carry the attacker's name as their Host. See
// pitfall O11 "A console that answers to any name".
type hostGuard struct {
	port string
	// exact are host:port pairs admitted as they are; names admit a host
	// at any port.
	exact, names map[string]bool
	// anyIP admits an IP literal at the console's port: it listens on
	// every address of the machine, and no rebinding names an IP.
	anyIP bool
}

func newHostGuard(listen string, hosts []string) (*hostGuard, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("console: listen address %q: %w", listen, err)
	}
	g := &hostGuard{port: port, exact: map[string]bool{}, names: map[string]bool{}}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		g.anyIP = true
	} else {
		g.exact[canonicalHost(net.JoinHostPort(host, port))] = true
	}
	g.exact["localhost:"+port] = true
	for _, h := range hosts {
		h = canonicalHost(strings.TrimSpace(h))
		switch {
		case h == "":
		case strings.Contains(h, "/") || strings.Contains(h, "@"):
			return nil, fmt.Errorf("console: CONSOLE_HOSTS: %q is not a host name (name or name:port)", h)
		case hasPort(h):
			g.exact[h] = true
		default:
			g.names[strings.Trim(h, "[]")] = true
		}
	}
	return g, nil
}

// canonicalHost lower-cases a host and drops the trailing dot of its name.
func canonicalHost(h string) string {
	h = strings.ToLower(h)
	if name, port, err := net.SplitHostPort(h); err == nil {
		return net.JoinHostPort(strings.TrimSuffix(name, "."), port)
	}
	return strings.TrimSuffix(h, ".")
}

func hasPort(h string) bool {
	_, _, err := net.SplitHostPort(h)
	return err == nil
}

// admits reports whether a request's Host names this console.
func (g *hostGuard) admits(r *http.Request) bool {
	h := canonicalHost(r.Host)
	if h == "" {
		return false
	}
	name, port, err := net.SplitHostPort(h)
	if err != nil { // no port: the scheme's own
		name, port = strings.Trim(h, "[]"), "80"
		if r.TLS != nil {
			port = "443"
		}
		h = net.JoinHostPort(name, port)
	}
	if g.exact[h] || g.names[name] {
		return true
	}
	if _, err := netip.ParseAddr(name); err == nil && g.anyIP && port == g.port {
		return true
	}
	return false
}

func (g *hostGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.admits(r) {
			// Not an echo of the Host: the answer names no other site.
			http.Error(w, "This console answers only to its listen address, localhost at its port, and the names in CONSOLE_HOSTS.",
				http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// How many wrong tokens an address may send: guessMax within guessWindow,
// then every attempt, the right token too, is answered 429 for
// guessLockout. Refusing the right token as well is what keeps the
// lockout from telling a guess that was right. See pitfall O12 "Wrong
// tokens that cost nothing".
const (
	guessMax     = 5
	guessWindow  = time.Minute
	guessLockout = time.Minute
	// guessAddresses bounds the addresses remembered; past it, the ones
	// with nothing recent are forgotten, and if that is not enough every
	// new address shares one count.
	guessAddresses = 4096
)

// guessLimit counts wrong tokens by client address, in this process. An
// IPv6 client is counted by its /64, which one host can fill with
// addresses. Behind a proxy every client has the proxy's address: they
// share one count, which still holds an attacker to guessMax a window.
type guessLimit struct {
	log *slog.Logger
	mu  sync.Mutex
	by  map[string]*guesses
}

type guesses struct {
	wrong []time.Time // within guessWindow, oldest first
	until time.Time   // refused until
}

func newGuessLimit(log *slog.Logger) *guessLimit {
	return &guessLimit{log: log, by: map[string]*guesses{}}
}

// clientOf is the address a request's guesses count against.
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64) // a valid IPv6 address has a /64
		return p.String()
	}
	return ip.String()
}

// wait is how long the request's address is still refused (0: not).
func (l *guessLimit) wait(r *http.Request, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.by[clientOf(r)]
	if g == nil || !now.Before(g.until) {
		return 0
	}
	return g.until.Sub(now)
}

// wrong counts a wrong token from the request's address.
func (l *guessLimit) wrong(r *http.Request, now time.Time) {
	addr := clientOf(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.by[addr]
	if g == nil {
		if len(l.by) >= guessAddresses {
			l.forget(now)
		}
		if len(l.by) >= guessAddresses {
			addr = "(every other address)"
			g = l.by[addr]
		}
		if g == nil {
			g = &guesses{}
			l.by[addr] = g
		}
	}
	recent := g.wrong[:0]
	for _, t := range g.wrong {
		if now.Sub(t) < guessWindow {
			recent = append(recent, t)
		}
	}
	g.wrong = append(recent, now)
	if len(g.wrong) >= guessMax {
		g.wrong, g.until = nil, now.Add(guessLockout)
		l.log.Warn("console: wrong operator tokens, refusing the address for a while",
			"address", addr, "wrong", guessMax, "within", guessWindow.String(), "refused_for", guessLockout.String())
	}
}

// forget drops the addresses with no recent wrong token and no refusal.
func (l *guessLimit) forget(now time.Time) {
	for a, g := range l.by {
		if !now.Before(g.until) && (len(g.wrong) == 0 || now.Sub(g.wrong[len(g.wrong)-1]) >= guessWindow) {
			delete(l.by, a)
		}
	}
}

// tooManyGuesses answers a request of a refused address.
func tooManyGuesses(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", retryAfter(wait))
	http.Error(w, "too many wrong operator tokens from this address: try again after Retry-After seconds", http.StatusTooManyRequests)
}
