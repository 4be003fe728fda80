package webhooks

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"
)

// CheckURL accepts an endpoint URL: http or https, a host, no user info,
// and, unless allowPrivate (WEBHOOK_ALLOW_PRIVATE=1, for development), a
// host whose every address is public. Every address is checked, not the
// first: a name that resolves to one public and one private address would
// otherwise reach the private one on some connections. The check is made
// again on every connection a delivery opens (DialControl), because the
// name may resolve elsewhere by then (DNS rebinding).
func CheckURL(ctx context.Context, raw string, allowPrivate bool) error {
	if len(raw) > MaxURLLength {
		return fmt.Errorf("%w: url: at most %d characters", ErrInvalid, MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" {
		return fmt.Errorf("%w: url: must be an absolute http or https URL", ErrInvalid)
	}
	if u.User != nil {
		return fmt.Errorf("%w: url: must not carry user information", ErrInvalid)
	}
	if u.Fragment != "" {
		return fmt.Errorf("%w: url: must not carry a fragment", ErrInvalid)
	}
	if allowPrivate {
		return nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("%w: url: host %q does not resolve", ErrInvalid, u.Hostname())
	}
	for _, a := range addrs {
		if !Public(a) {
			return fmt.Errorf("%w: url: host %q resolves to %s, a loopback, private or link-local address (allowed only with WEBHOOK_ALLOW_PRIVATE=1, for development)", ErrInvalid, u.Hostname(), a)
		}
	}
	return nil
}

// Public reports whether a may receive webhooks: not loopback, private
// (RFC 1918, RFC 4193), link-local, unspecified, multicast or the shared
// carrier-grade NAT range. IPv4-mapped IPv6 addresses are judged as the
// IPv4 address they carry.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsValid() && !a.IsLoopback() && !a.IsPrivate() && !a.IsLinkLocalUnicast() && !a.IsLinkLocalMulticast() &&
		!a.IsInterfaceLocalMulticast() && !a.IsMulticast() && !a.IsUnspecified() && !cgnat.Contains(a)
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// DialControl refuses, at connect time, an address Public rejects: the
// address actually dialled, after whatever the name resolved to this time.
func DialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook dial %s: %w", address, err)
	}
	if !Public(ap.Addr()) {
		return fmt.Errorf("webhook dial %s: a loopback, private or link-local address is refused (WEBHOOK_ALLOW_PRIVATE=1 allows it)", address)
	}
	return nil
}
