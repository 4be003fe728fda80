package stripestandin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/stripepsp"
	"github.com/phasepay/phasepay/tools/stripestandin"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// TestStandInKeepsStripesSemantics: the stand-in replays a key's first
// answer (marked Idempotent-Replayed), forgets the key after its window,
// and shows a new PaymentIntent in search only after its lag, as Stripe
// does; the connector's answers to each follow.
func TestStandInKeepsStripesSemantics(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)}
	s := stripestandin.New(stripestandin.Config{KeyWindow: time.Hour, SearchLag: time.Minute, Now: clk.Now})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := stripepsp.New(stripepsp.Config{Name: "stripe", URL: "stripe+" + srv.URL, MaxAttempts: 1,
		Settings: stripepsp.Settings{APIKey: "sk_test_standin", KeyWindow: 50 * time.Minute, SearchLag: 2 * time.Minute}, Now: clk.Now})
	require.NoError(t, err)
	ctx := context.Background()
	req := psp.AuthorizeRequest{IdempotencyKey: "ch_a:authorize", Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa",
		Reference: "ch_a", TenantID: 1, KeyCreatedAt: clk.Now(), FirstSend: true}

	// A 500 saved under a key is replayed to the next send, whatever the
	// faults then (one before execution is not saved: the next send
	// executes).
	spent := false
	for i := range 30 {
		req.IdempotencyKey = "ch_a:authorize:" + strconv.Itoa(i+1)
		require.NoError(t, putFaults(srv.URL, `{"error_rate":1}`))
		out, _ := c.AuthorizeOutcome(ctx, req)
		require.Equal(t, psp.ClassUnknown, out.Class)
		require.NoError(t, putFaults(srv.URL, `{}`))
		out, _ = c.AuthorizeOutcome(ctx, req)
		if spent = out.NewKey; spent {
			require.Equal(t, stripepsp.ReasonKeySpent, out.Reason)
			break
		}
		require.Equal(t, psp.ClassSuccess, out.Class)
	}
	require.True(t, spent, "a saved 500 replayed")

	// Within the window, the same key is replayed: one PaymentIntent.
	req2 := req
	req2.IdempotencyKey, req2.Reference = "ch_b:authorize", "ch_b"
	out, err := c.AuthorizeOutcome(ctx, req2)
	require.NoError(t, err)
	first := out.Authorization.ID
	out, err = c.AuthorizeOutcome(ctx, req2)
	require.NoError(t, err)
	require.Equal(t, first, out.Authorization.ID)

	// Past the connector's window: looked up, found once search shows it.
	clk.add(55 * time.Minute)
	req2.FirstSend = false
	out, err = c.AuthorizeOutcome(ctx, req2)
	require.NoError(t, err)
	require.True(t, out.FoundByLookup)
	require.Equal(t, first, out.Authorization.ID)

	// A new PaymentIntent is not in search at once.
	req3 := psp.AuthorizeRequest{IdempotencyKey: "ch_c:authorize", Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa",
		Reference: "ch_c", KeyCreatedAt: clk.Now(), FirstSend: true}
	_, err = c.AuthorizeOutcome(ctx, req3)
	require.NoError(t, err)
	list, err := c.Lookup(ctx, "ch_c")
	require.NoError(t, err)
	clk.add(time.Minute)
	later, err := c.Lookup(ctx, "ch_c")
	require.NoError(t, err)
	require.Len(t, later, 1)
	require.LessOrEqual(t, len(list), 1)

	// Past the stand-in's own window the key is forgotten: a reuse makes
	// a second PaymentIntent, which is why the connector never resends
	// past its window.
	clk.add(2 * time.Hour)
	req3.KeyCreatedAt = clk.Now()
	out, err = c.AuthorizeOutcome(ctx, req3)
	require.NoError(t, err)
	clk.add(time.Minute)
	list, err = c.Lookup(ctx, "ch_c")
	require.NoError(t, err)
	require.Len(t, list, 2, "the forgotten key made a second PaymentIntent")
}

func putFaults(base, body string) error {
	req, err := http.NewRequest(http.MethodPut, base+"/_admin/faults", strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
