package routing_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/routing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	t.Parallel()
	c, err := routing.FromEnv(env(map[string]string{
		"PSPS":        "primary=http://127.0.0.1:1,secondary=http://127.0.0.1:2",
		"PSP_ROUTING": "usd:primary>secondary,*:secondary",
	}))
	require.NoError(t, err)
	require.False(t, c.Single)
	require.Equal(t, []string{"primary", "secondary"}, c.Route("usd"))
	require.Equal(t, []string{"secondary"}, c.Route("eur"))

	c, err = routing.FromEnv(env(map[string]string{"PSP_URL": "embedded"}))
	require.NoError(t, err)
	require.True(t, c.Single)
	require.Equal(t, []routing.PSP{{Name: "default", URL: "embedded"}}, c.PSPs)

	c, err = routing.FromEnv(env(map[string]string{"PSPS": "a=http://x,b=http://y"}))
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, c.Route("usd"), "without PSP_ROUTING: PSPS's order")

	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PSP_URL": "http://x", "PSPS": "a=http://y"}, "PSP_URL and PSPS are both set"},
		{map[string]string{"PSP_URL": "ftp://x"}, "PSP_URL:"},
		{map[string]string{"PSPS": "a=http://x,a=http://y"}, `PSPS: name "a" appears twice`},
		{map[string]string{"PSPS": "a=nope"}, `PSPS: a: "nope" is not an http(s) or stripe+http(s) URL`},
		{map[string]string{"PSPS": "stripe=stripe+https://api.stripe.com"}, "PSP_STRIPE_API_KEY is not set"},
		{map[string]string{"PSP_URL": "stripe+https://api.stripe.com"}, "PSP_DEFAULT_API_KEY is not set"},
		{map[string]string{"PSPS": "s=stripe+http://u:p@127.0.0.1:1", "PSP_S_API_KEY": "sk_test_x"}, "no credentials"},
		{map[string]string{"PSPS": "s=stripe+https://", "PSP_S_API_KEY": "sk_test_x"}, "with a host"},
		{map[string]string{"PSPS": "s=stripe+https://h", "PSP_S_API_KEY": "sk_test_x", "PSP_S_SEARCH_LAG": "0s"}, "PSP_S_SEARCH_LAG: must be positive"},
		{map[string]string{"PSPS": "a"}, "PSPS:"},
		{map[string]string{"PSPS": "a=http://x", "PSP_ROUTING": "usd:a"}, "PSP_ROUTING: no route for *"},
		{map[string]string{"PSPS": "a=http://x", "PSP_ROUTING": "*:b"}, `unknown PSP "b"`},
		{map[string]string{"PSPS": "a=http://x", "PSP_ROUTING": "*:a>a"}, `PSP "a" appears twice`},
		{map[string]string{"PSPS": "a=http://x", "PSP_ROUTING": "USD:a,*:a"}, "PSP_ROUTING:"},
		{map[string]string{"PSP_ROUTING": "*:a"}, "PSP_ROUTING is set without PSPS"},
		{map[string]string{"PSP_URL": "http://x", "PSP_BREAKER_THRESHOLD": "0"}, "PSP_BREAKER_THRESHOLD"},
	} {
		_, err := routing.FromEnv(env(tt.env))
		require.Error(t, err, "%v", tt.env)
		require.Contains(t, err.Error(), tt.want)
		require.NotContains(t, err.Error(), "\n", "one line")
		require.False(t, strings.HasSuffix(err.Error(), "."))
	}
}

// TestStripePSPConfig: a stripe+ URL is a Stripe PSP, whose key and
// settings come from PSP_<NAME>_*; the defaults are Stripe's documented
// key retention less an hour and its search's lag bound.
func TestStripePSPConfig(t *testing.T) {
	t.Parallel()
	c, err := routing.FromEnv(env(map[string]string{
		"PSPS":                      "stripe=stripe+http://127.0.0.1:12111,backup-1=http://127.0.0.1:2",
		"PSP_STRIPE_API_KEY":        "sk_test_123",
		"PSP_STRIPE_KEY_WINDOW":     "10s",
		"PSP_BACKUP_1_API_KEY":      "ignored: not a Stripe PSP",
		"PSP_STRIPE_WEBHOOK_SECRET": "whsec_abc",
	}))
	require.NoError(t, err)
	require.NotNil(t, c.PSPs[0].Stripe)
	require.Equal(t, "sk_test_123", c.PSPs[0].Stripe.APIKey)
	require.Equal(t, "whsec_abc", c.PSPs[0].Stripe.WebhookSecret)
	require.Equal(t, 10*time.Second, c.PSPs[0].Stripe.KeyWindow)
	require.Equal(t, time.Hour, c.PSPs[0].Stripe.SearchLag)
	require.Nil(t, c.PSPs[1].Stripe)
	require.NotContains(t, c.PSPs[0].String()+c.PSPs[0].Stripe.String(), "sk_test_123", "no secret printed")

	c, err = routing.FromEnv(env(map[string]string{"PSP_URL": "stripe+https://api.stripe.com", "PSP_DEFAULT_API_KEY": "sk_test_9"}))
	require.NoError(t, err)
	require.True(t, c.Single)
	require.Equal(t, 23*time.Hour, c.PSPs[0].Stripe.KeyWindow)
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	var changes []string
	b := routing.NewBreaker(2, time.Second, func() time.Time { return now }, func(_, to routing.State) { changes = append(changes, to.String()) })
	require.True(t, b.Allow())
	b.Record(psp.ClassUnknown)
	b.Record(psp.ClassSuccess) // an answer resets the count
	b.Record(psp.ClassUnknown)
	require.Equal(t, routing.Closed, b.State())
	b.Record(psp.ClassBusy)
	require.Equal(t, routing.Open, b.State())
	left, held := b.HoldBack()
	require.True(t, held, "open and cooling down")
	require.Equal(t, time.Second, left)
	require.False(t, b.Allow())
	now = now.Add(time.Second)
	require.True(t, b.Allow(), "the probe")
	left, held = b.HoldBack()
	require.True(t, held, "a probe is out: the others wait its cool-down")
	require.Equal(t, time.Second, left)
	require.False(t, b.Allow(), "one probe per cool-down")
	b.Record(psp.ClassUnknown)
	require.Equal(t, routing.Open, b.State())
	now = now.Add(time.Second)
	require.True(t, b.Allow())
	b.Record(psp.ClassFinalFailure)
	require.Equal(t, routing.Closed, b.State())
	require.Equal(t, []string{"open", "half_open", "open", "half_open", "closed"}, changes)
}
