package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/console"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/operator"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// testToken is the operator token of the tests' consoles.
const testToken = "test-operator-token-0123456789"

// world is one test's database, PSP and console.
type world struct {
	*chargestest.Bundle
	// Live reads at the real clock, as the console does (the bundle's Pool
	// stands at T0).
	Live   *pgxpool.Pool
	Base   string // the console's base URL
	Addr   string // its listen address
	PSPURL string
	// Posts counts the POSTs the console received.
	Posts *atomic.Int64
	desk  *operator.Desk
}

// newWorld starts a console on a fresh database with one tenant ("t"),
// whose desk resolves against the bundle's mock PSP; opts adjust the
// console's configuration.
func newWorld(t *testing.T, opts ...func(*console.Config)) *world {
	t.Helper()
	b := chargestest.Setup(t, idempotency.Config{})
	// A few connections: the tests share the server with every other
	// package's.
	live := testdb.Pool(t, b.URL, time.Time{}, func(c *pgxpool.Config) { c.MaxConns = 4 })
	pspSrv := httptest.NewServer(b.Mock)
	t.Cleanup(pspSrv.Close)
	desk, err := operator.New(live, operator.Config{Keys: idempotency.Config{Lease: time.Minute, NeedsAttention: events.NeedsAttention}, PSPURL: pspSrv.URL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = desk.Close(context.Background()) })
	hs := httptest.NewUnstartedServer(nil)
	addr := hs.Listener.Addr().String()
	cfg := console.Config{Pool: live, Desk: desk, Token: testToken, Addr: addr, Refresh: 200 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := console.New(cfg)
	require.NoError(t, err)
	posts := &atomic.Int64{}
	hs.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		srv.Handler().ServeHTTP(rw, r)
	})
	hs.Start()
	t.Cleanup(hs.Close)
	return &world{Bundle: b, Live: live, Base: hs.URL, Addr: addr, PSPURL: pspSrv.URL, Posts: posts, desk: desk}
}

// service is a worker on the real clock with its own key configuration.
func (w *world) service(t *testing.T, keys idempotency.Config) *charges.Service {
	t.Helper()
	keys.Lease = max(keys.Lease, time.Minute)
	keys.NeedsAttention = events.NeedsAttention
	store, err := idempotency.NewStore(keys)
	require.NoError(t, err)
	return chargestest.NewService(t, w.Live, store, w.PSP, phases.Config{})
}

// charge runs one charge request to its answer, or to the 503 of a PSP
// that does not answer.
func charge(t *testing.T, svc *charges.Service, tenant int64, key, body string) phases.Result {
	t.Helper()
	res, err := svc.Create(context.Background(), tenant, key, phases.AsSent([]byte(body)))
	var unavailable *charges.UnavailableError
	if err != nil && !errors.As(err, &unavailable) && !errors.Is(err, idempotency.ErrUnresolved) {
		require.NoError(t, err)
	}
	return res
}

const visa = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

// client is an HTTP client logged in to the console (a session cookie),
// which does not follow redirects.
func (w *world) client(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(w.Base+"/login", url.Values{"token": {testToken}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	return c
}

func TestMain(m *testing.M) {
	code := m.Run()
	closeBrowser()
	os.Exit(code)
}

// text reads the text of the first node sel matches, in one evaluation:
// a live page replaces its live region while it is read, so a node found
// in one call may be gone in the next.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`(document.querySelector(`+strconv.Quote(sel)+`) || {textContent: "(no such node)"}).textContent`))
	require.NoError(t, err, "text of %s", sel)
	return strings.TrimSpace(s)
}
