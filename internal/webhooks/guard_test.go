package webhooks_test

import (
	"context"
	"errors"
	"math/big"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/webhooks"
)

// specialPurpose is every range docs/api.md publishes: the IANA
// special-purpose registries, multicast and the reserved ranges.
var specialPurpose = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24", "192.168.0.0/16",
	"192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"::/128", "::1/128", "::/96", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "100:0:0:1::/64",
	"2001::/23", "2001:db8::/32", "2002::/16", "2620:4f:8000::/48", "3fff::/20", "5f00::/16", "fc00::/7",
	"fe80::/10", "fec0::/10", "ff00::/8",
}

// last is the last address of p.
func last(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr()
	b := a.AsSlice()
	n := new(big.Int).SetBytes(b)
	host := new(big.Int).Lsh(big.NewInt(1), uint(a.BitLen()-p.Bits()))
	n.Add(n, host.Sub(host, big.NewInt(1)))
	out := n.FillBytes(make([]byte, len(b)))
	addr, _ := netip.AddrFromSlice(out)
	return addr
}

// Every special-purpose range is refused, from its first address to its
// last, IPv4 and IPv6; the IPv4 embedded in NAT64, 6to4 and the
// IPv4-compatible and -mapped forms is refused with its whole range,
// whatever address it carries; public addresses next to them pass.
// Main accepted 0.1.2.3, 192.0.0.1, 192.0.2.0/24, 198.18.0.1,
// 255.255.255.255, 64:ff9b::7f00:1, 2002:7f00:1::, ::127.0.0.1 and
// fec0::1.
func TestSpecialPurposeAddressesAreRefused(t *testing.T) {
	t.Parallel()
	for _, s := range specialPurpose {
		p := netip.MustParsePrefix(s)
		for _, a := range []netip.Addr{p.Addr(), last(p)} {
			require.False(t, webhooks.Public(a), "%s (in %s)", a, p)
		}
	}
	for _, s := range []string{
		"0.1.2.3", "192.0.0.1", "192.0.2.7", "198.18.0.1", "198.19.255.255", "255.255.255.255", "239.1.2.3",
		"64:ff9b::7f00:1", "64:ff9b::808:808", "64:ff9b:1::a00:5", "2002:7f00:1::", "2002:808:808::1",
		"::127.0.0.1", "::8.8.8.8", "::ffff:127.0.0.1", "::ffff:8.8.8.8", "fec0::1", "fe80::1%eth0",
		"2001:db8::1", "2001::1", "3fff::1", "5f00::1", "4000::1", "8000::1", "100::1",
	} {
		require.False(t, webhooks.Public(netip.MustParseAddr(s)), s)
	}
	for _, s := range []string{
		"8.8.8.8", "1.0.0.1", "93.184.216.34", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0",
		"172.15.255.255", "172.32.0.0", "192.0.1.255", "192.0.3.0", "192.167.255.255", "192.169.0.0",
		"198.17.255.255", "198.20.0.0", "198.51.99.255", "203.0.112.255", "223.255.255.255",
		"2606:4700:4700::1111", "2a00:1450:4001::1", "2001:200::1", "2003::1", "3ffe::1",
	} {
		require.True(t, webhooks.Public(netip.MustParseAddr(s)), s)
	}
}

// fakeResolver answers from a table; a name it does not know does not
// resolve. It counts the lookups.
type fakeResolver struct {
	names   map[string][]string
	lookups int
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.lookups++
	list, ok := r.names[host]
	if !ok {
		return nil, errors.New("lookup " + host + " on 10.0.0.2:53: no such host")
	}
	out := make([]netip.Addr, len(list))
	for i, s := range list {
		out[i] = netip.MustParseAddr(s)
	}
	return out, nil
}

// A refused host says so in the same words whether its name resolves to
// a private address or does not resolve at all, and never which address or
// resolver it met: no DNS oracle.
func TestRefusedHostNamesNoAddress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	res := &fakeResolver{names: map[string][]string{
		"public.example":  {"93.184.216.34", "2606:4700:4700::1111"},
		"mapped.example":  {"::ffff:93.184.216.34"},
		"private.example": {"10.0.0.5"},
		"rebind.example":  {"93.184.216.34", "10.0.0.5"},
	}}
	g := webhooks.NewGuard(false, webhooks.WithResolver(res))
	require.NoError(t, g.CheckHost(ctx, "public.example"))
	require.NoError(t, g.CheckHost(ctx, "mapped.example"), "an A record in the mapped form is its IPv4 address")
	var words []string
	for _, host := range []string{"private.example", "rebind.example", "nx.example", "10.0.0.5", "64:ff9b::a00:5"} {
		err := g.CheckHost(ctx, host)
		require.ErrorIs(t, err, webhooks.ErrInvalid, host)
		require.ErrorIs(t, err, webhooks.ErrNotPublic, host)
		require.NotContains(t, err.Error(), "10.0.0", host)
		require.NotContains(t, err.Error(), "no such host", host)
		words = append(words, err.Error())
	}
	for _, w := range words {
		require.Equal(t, "invalid webhook endpoint: url: host does not resolve to a public address (WEBHOOK_ALLOW_PRIVATE=1 allows it, in development only)", w)
	}
}

// The addresses of the host's own interfaces are refused, at creation and
// at connect time, public or not: an endpoint must not reach the services
// of the machine phasepay runs on.
func TestOwnAddressesAreRefused(t *testing.T) {
	t.Parallel()
	own := []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("2606:4700:4700::1111")}
	g := webhooks.NewGuard(false, webhooks.WithOwnAddrs(func() ([]netip.Addr, error) { return own, nil }))
	for _, a := range own {
		require.True(t, webhooks.Public(a))
		require.False(t, g.Allowed(a), "%s", a)
		require.ErrorIs(t, g.CheckHost(context.Background(), a.String()), webhooks.ErrNotPublic, "%s", a)
		require.ErrorIs(t, g.DialControl("tcp", netip.AddrPortFrom(a, 443).String(), nil), webhooks.ErrNotPublic, "%s", a)
	}
	require.True(t, g.Allowed(netip.MustParseAddr("8.8.8.8")))
	require.NoError(t, g.DialControl("tcp", "8.8.8.8:443", nil))

	// By default, the interfaces' addresses: loopback at least.
	require.False(t, webhooks.NewGuard(false).Allowed(netip.MustParseAddr("127.0.0.1")))
	require.True(t, webhooks.NewGuard(true).Allowed(netip.MustParseAddr("127.0.0.1")), "WEBHOOK_ALLOW_PRIVATE")
}

// The URL limit counts characters, as the OpenAPI maxLength does, not
// bytes: 2,048 characters of which many take two bytes pass.
func TestURLLimitCountsCharacters(t *testing.T) {
	t.Parallel()
	base := "https://93.184.216.34/"
	long := base + strings.Repeat("é", webhooks.MaxURLLength-len(base))
	require.Greater(t, len(long), webhooks.MaxURLLength)
	host, err := webhooks.ParseURL(long)
	require.NoError(t, err)
	require.Equal(t, "93.184.216.34", host)
	_, err = webhooks.ParseURL(long + "é")
	require.ErrorIs(t, err, webhooks.ErrInvalid)
	host, err = webhooks.ParseURL("https://Hooks.Example.COM:8443/x?token=1")
	require.NoError(t, err)
	require.Equal(t, "hooks.example.com", host)
}
