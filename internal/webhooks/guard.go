package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// ErrNotPublic is why a host is refused: it is, or resolves to, an address
// outside the public unicast space, or it does not resolve at all. The two
// are one error on purpose, in the same words everywhere a tenant can read
// them (the 400 of a creation, a delivery attempt's error): telling them
// apart, or naming the address, would let a tenant map the internal network
// through phasepay (which internal names exist, what they resolve to).
var ErrNotPublic = errors.New("host does not resolve to a public address")

// ParseURL checks an endpoint URL's shape, without resolving anything: at
// most MaxURLLength characters (code points, not bytes), http or https, a
// host, no user information, no fragment. It returns the URL's host name
// or address in lower case, without the port, for Guard.CheckHost. The
// per-host cap counts deliveries by the host's canonical form instead
// (webhook_endpoints.host, made by PostgreSQL from the URL:
// phasepay_canonical_host, migrations/00027).
func ParseURL(raw string) (host string, err error) {
	if utf8.RuneCountInString(raw) > MaxURLLength {
		return "", fmt.Errorf("%w: url: at most %d characters", ErrInvalid, MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" {
		return "", fmt.Errorf("%w: url: must be an absolute http or https URL", ErrInvalid)
	}
	if u.User != nil {
		return "", fmt.Errorf("%w: url: must not carry user information", ErrInvalid)
	}
	if u.Fragment != "" {
		return "", fmt.Errorf("%w: url: must not carry a fragment", ErrInvalid)
	}
	return strings.ToLower(u.Hostname()), nil
}

// specialPurpose lists every range of the IANA IPv4 and IPv6
// Special-Purpose Address Registries (RFC 6890 and its successors), with
// multicast, the reserved 240/4 and the deprecated site-local fec0::/10: no
// webhook endpoint lives there, and most of them lead into the network
// phasepay runs in. The registries also list a few globally reachable
// anycast services (AS112, AMT, PCP and TURN anycast); they are refused too,
// as no endpoint lives there either.
//
// The translation ranges are refused whole, not judged by the IPv4
// address they embed: an address in NAT64 (64:ff9b::/96, 64:ff9b:1::/48),
// 6to4 (2002::/16, and its relay anycast 192.88.99/24) or the IPv4-compatible
// (::/96) and IPv4-mapped (::ffff:0:0/96) forms goes wherever a translator
// or relay sends it, which phasepay cannot see. (A resolver's answer in
// the mapped form is the IPv4 address itself and is judged as such: see
// Guard.CheckHost.)
var specialPurpose = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		// IPv4.
		"0.0.0.0/8",         // "this network" (RFC 791)
		"10.0.0.0/8",        // private (RFC 1918)
		"100.64.0.0/10",     // shared address space, carrier-grade NAT (RFC 6598)
		"127.0.0.0/8",       // loopback (RFC 1122)
		"169.254.0.0/16",    // link-local, cloud metadata services (RFC 3927)
		"172.16.0.0/12",     // private (RFC 1918)
		"192.0.0.0/24",      // IETF protocol assignments (RFC 6890)
		"192.0.2.0/24",      // documentation, TEST-NET-1 (RFC 5737)
		"192.31.196.0/24",   // AS112-v4 (RFC 7535)
		"192.52.193.0/24",   // AMT (RFC 7450)
		"192.88.99.0/24",    // 6to4 relay anycast, deprecated (RFC 7526)
		"192.168.0.0/16",    // private (RFC 1918)
		"192.175.48.0/24",   // direct delegation AS112 service (RFC 7534)
		"198.18.0.0/15",     // benchmarking (RFC 2544)
		"198.51.100.0/24",   // documentation, TEST-NET-2 (RFC 5737)
		"203.0.113.0/24",    // documentation, TEST-NET-3 (RFC 5737)
		"224.0.0.0/4",       // multicast (RFC 5771)
		"240.0.0.0/4",       // reserved, and 255.255.255.255 broadcast (RFC 1112, RFC 919)
		"::/128",            // unspecified (RFC 4291)
		"::1/128",           // loopback (RFC 4291)
		"::/96",             // IPv4-compatible, deprecated (RFC 4291)
		"::ffff:0:0/96",     // IPv4-mapped (RFC 4291)
		"64:ff9b::/96",      // IPv4/IPv6 translation, NAT64 (RFC 6052)
		"64:ff9b:1::/48",    // local-use IPv4/IPv6 translation (RFC 8215)
		"100::/64",          // discard-only (RFC 6666)
		"100:0:0:1::/64",    // dummy prefix (RFC 9780)
		"2001::/23",         // IETF protocol assignments: Teredo, ORCHID, benchmarking… (RFC 2928)
		"2001:db8::/32",     // documentation (RFC 3849)
		"2002::/16",         // 6to4 (RFC 3056)
		"2620:4f:8000::/48", // direct delegation AS112 service (RFC 7534)
		"3fff::/20",         // documentation (RFC 9637)
		"5f00::/16",         // segment routing SIDs (RFC 9602)
		"fc00::/7",          // unique local (RFC 4193)
		"fe80::/10",         // link-local (RFC 4291)
		"fec0::/10",         // site-local, deprecated (RFC 3879)
		"ff00::/8",          // multicast (RFC 4291)
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// globalUnicast6 is the only IPv6 space IANA allocates for global unicast
// (RFC 4291, 2.4): anything outside it is special or not yet allocated.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// Public reports whether a may receive webhooks as far as the registries
// go: a valid address without a zone (a zone is a link's), in no
// special-purpose range, and for IPv6 in the global unicast space. The
// host's own addresses are judged by Guard.Allowed.
func Public(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	for _, p := range specialPurpose {
		if p.Contains(a) {
			return false
		}
	}
	return a.Is4() || globalUnicast6.Contains(a)
}

// Resolver looks a host name up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Guard decides which addresses webhook traffic may reach: public ones
// (Public) that are not the addresses of this host's own interfaces, unless
// AllowPrivate (WEBHOOK_ALLOW_PRIVATE=1, development only), which lets
// everything through. It is checked when an endpoint is created (CheckHost)
// and again on every connection a delivery opens (DialControl), because a
// name may resolve elsewhere by then (DNS rebinding). The zero value is
// not usable: see NewGuard.
type Guard struct {
	allowPrivate bool
	resolver     Resolver
	// ownAddrs lists this host's interface addresses; net.InterfaceAddrs
	// by default, read at most once per ownAddrsTTL.
	ownAddrs func() ([]netip.Addr, error)

	mu       sync.Mutex
	ownCache []netip.Addr
	ownRead  time.Time
	ownErr   error
}

// ownAddrsTTL is how long the host's interface addresses are trusted: an
// address added to an interface is refused within it.
const ownAddrsTTL = 5 * time.Second

// GuardOption changes a Guard made by NewGuard (tests).
type GuardOption func(*Guard)

// WithResolver resolves names with r instead of net.DefaultResolver.
func WithResolver(r Resolver) GuardOption { return func(g *Guard) { g.resolver = r } }

// WithOwnAddrs takes the host's own addresses from f instead of its
// interfaces.
func WithOwnAddrs(f func() ([]netip.Addr, error)) GuardOption {
	return func(g *Guard) { g.ownAddrs = f }
}

// NewGuard returns a Guard; allowPrivate lets every address through.
func NewGuard(allowPrivate bool, opts ...GuardOption) *Guard {
	g := &Guard{allowPrivate: allowPrivate, resolver: net.DefaultResolver, ownAddrs: interfaceAddrs}
	for _, o := range opts {
		o(g)
	}
	return g
}

// AllowsPrivate reports whether the guard lets every address through.
func (g *Guard) AllowsPrivate() bool { return g.allowPrivate }

// Allowed reports whether webhook traffic may reach a.
func (g *Guard) Allowed(a netip.Addr) bool {
	if g.allowPrivate {
		return true
	}
	if !Public(a) {
		return false
	}
	own, err := g.ownAddresses()
	if err != nil {
		return false // fail closed: the host's own addresses are unknown
	}
	for _, o := range own {
		if o == a {
			return false
		}
	}
	return true
}

func (g *Guard) ownAddresses() ([]netip.Addr, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ownRead.IsZero() || time.Since(g.ownRead) > ownAddrsTTL {
		g.ownCache, g.ownErr = g.ownAddrs()
		g.ownRead = time.Now()
	}
	return g.ownCache, g.ownErr
}

func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// CheckHost accepts an endpoint's host (as ParseURL returned it): an
// address that Allowed accepts, or a name whose every address it accepts.
// Every address is checked, not the first: a name that resolves to one
// public and one private address would otherwise reach the private one on
// some connections. It returns ErrInvalid wrapping ErrNotPublic otherwise,
// in words that name neither the address nor the resolver.
func (g *Guard) CheckHost(ctx context.Context, host string) error {
	if g.allowPrivate {
		return nil
	}
	// The setting is named for the developer whose local listener this
	// is; it changes nothing a tenant learns about the network.
	refused := fmt.Errorf("%w: url: %w (WEBHOOK_ALLOW_PRIVATE=1 allows it, in development only)", ErrInvalid, ErrNotPublic)
	if a, err := netip.ParseAddr(host); err == nil {
		if !g.Allowed(a) {
			return refused
		}
		return nil
	}
	addrs, err := g.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return refused
	}
	for _, a := range addrs {
		// A resolver may hand an A record's address in the IPv4-mapped
		// form; it is that IPv4 address, and a socket connects to it as
		// one (the dialler's Control sees it dotted).
		if !g.Allowed(a.Unmap()) {
			return refused
		}
	}
	return nil
}

// DialControl refuses, at connect time, an address the guard does not
// allow: the address actually being dialled, whatever the name resolved
// to this time. It is a net.Dialer's Control.
func (g *Guard) DialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook dial %s: %w", address, err)
	}
	if !g.Allowed(ap.Addr()) {
		// The address is for the logs (the raw cause); the tenant reads
		// ErrNotPublic's words (attemptError).
		return fmt.Errorf("webhook dial %s refused: %w", address, ErrNotPublic)
	}
	return nil
}
