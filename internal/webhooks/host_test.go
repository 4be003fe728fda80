package webhooks_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/webhooks"
)

// dialAllTo is an HTTP client whose connections go to addr, whatever
// host the URL names; with only, just those to that host (the others to
// the address they name). One listener can then stand for a host however
// it is spelled, as a resolver would make it.
func dialAllTo(addr string, only ...string) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, target string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(target)
			if len(only) == 0 || strings.EqualFold(host, only[0]) {
				target = addr
			}
			return d.DialContext(ctx, network, target)
		},
	}}
}

// pitfall W6 "One host under many spellings": the per-host cap counts a
// host in its canonical form, so LocalHost., 0x7f000001, 2130706433 and
// 127.0.0.1 (and the other spellings of an address) are one host. Four
// endpoints of one tenant, one per spelling, all hanging, with PerHost 2:
// at most 2 attempts are in flight, where each spelling was a host of its
// own with 2 slots (8 in flight).
func TestHostCapCountsOneHostInEverySpelling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hang := newHangingServer(t)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(hang.url, "http://"))
	require.NoError(t, err)
	spellings := []string{"LocalHost.", "0x7f000001", "2130706433", "127.0.0.1"}
	for _, h := range spellings {
		b.endpoint(t, fmt.Sprintf("http://%s:%s/hook", h, port))
	}
	// What the cap counts, and more spellings of one address or name.
	for url, want := range map[string]string{
		"http://0177.0.0.1/":               "127.0.0.1",
		"http://127.1/":                    "127.0.0.1",
		"http://[::ffff:127.0.0.1]/":       "127.0.0.1",
		"http://api.localhost/":            "127.0.0.1",
		"http://[2001:DB8:0:0::1]:8443/":   "2001:db8::1",
		"https://Hooks.Example.COM.:8443/": "hooks.example.com",
		"http://1.2.3.256/":                "1.2.3.256", // no address: a name
	} {
		var got string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT phasepay_canonical_host($1)`, url).Scan(&got))
		require.Equal(t, want, got, url)
	}
	var hosts []string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT array_agg(DISTINCT host) FROM webhook_endpoints`).Scan(&hosts))
	require.Equal(t, []string{"127.0.0.1"}, hosts)
	for range 4 {
		b.eventOf(t, b.tenant) // a delivery per endpoint each
	}

	d, err := webhooks.NewDeliverer(b.pool, webhooks.DelivererConfig{AllowPrivate: true, PerHost: 2,
		Client: dialAllTo(strings.TrimPrefix(hang.url, "http://"))})
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(hang.release) // before wg.Wait: the attempts hang until then
	started := 0
	for range 3 {
		n, err := d.RunOnce(ctx, &wg, make(chan struct{}, 1))
		require.NoError(t, err)
		started += n
	}
	require.Equal(t, 2, started, "attempts started at one host spelled %d ways, with PerHost 2", len(spellings))
}
