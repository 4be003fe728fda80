// Package consoletest is the operator console's tests' world: a console on
// a fresh database with one tenant, a mock PSP and an operator desk. The
// console's own tests (internal/console) and its tests in a browser
// (tools/consolebrowser) both start from it.
package consoletest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

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

// Token is the operator token of the tests' consoles.
const Token = "test-operator-token-0123456789"

// Visa is a charge's body the mock PSP authorizes.
const Visa = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

// World is one test's database, PSP and console.
type World struct {
	*chargestest.Bundle
	// Live reads at the real clock, as the console does (the bundle's Pool
	// stands at T0).
	Live   *pgxpool.Pool
	Base   string // the console's base URL
	Addr   string // its listen address
	PSPURL string
	// Posts counts the POSTs the console received.
	Posts *atomic.Int64
	// Desk is the console's operator desk.
	Desk *operator.Desk
}

// NewWorld starts a console on a fresh database with one tenant ("t"),
// whose desk resolves against the bundle's mock PSP; opts adjust the
// console's configuration.
func NewWorld(t *testing.T, opts ...func(*console.Config)) *World {
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
	cfg := console.Config{Pool: live, Desk: desk, Token: Token, Addr: addr, Refresh: 200 * time.Millisecond}
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
	return &World{Bundle: b, Live: live, Base: hs.URL, Addr: addr, PSPURL: pspSrv.URL, Posts: posts, Desk: desk}
}

// Service is a worker on the real clock with its own key configuration.
func (w *World) Service(t *testing.T, keys idempotency.Config) *charges.Service {
	t.Helper()
	keys.Lease = max(keys.Lease, time.Minute)
	keys.NeedsAttention = events.NeedsAttention
	store, err := idempotency.NewStore(keys)
	require.NoError(t, err)
	return chargestest.NewService(t, w.Live, store, w.PSP, phases.Config{})
}

// Charge runs one charge request to its answer, or to the 503 of a PSP
// that does not answer.
func Charge(t *testing.T, svc *charges.Service, tenant int64, key, body string) phases.Result {
	t.Helper()
	res, err := svc.Create(context.Background(), tenant, key, phases.AsSent([]byte(body)))
	var unavailable *charges.UnavailableError
	if err != nil && !errors.As(err, &unavailable) && !errors.Is(err, idempotency.ErrUnresolved) {
		require.NoError(t, err)
	}
	return res
}

// Client is an HTTP client logged in to the console (a session cookie),
// which does not follow redirects.
func (w *World) Client(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(w.Base+"/login", url.Values{"token": {Token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	return c
}

// Get fetches a console page with c and returns its status and body.
func Get(t *testing.T, c *http.Client, u string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// NextKept and NextRefused are the next= values a login link may carry that
// the login tests try: pitfall O9 "A login link that sends the operator to
// another site". The kept are paths of the console, followed as they are;
// the refused, raw or percent-encoded, go to "/".
var (
	NextKept = []string{
		"/", "/requests?state=needs_attention", "/request?key=a%2Fb%5Cc&tenant=t", "/charge?tenant=t&id=ch_1",
	}
	NextRefused = []string{
		"", "requests", "//evil.example/", "///evil.example", "/\\evil.example", "\\\\evil.example",
		"/\t/evil.example", "/\n/evil.example", "/\r/evil.example", "/\t\\evil.example", "\t//evil.example",
		" //evil.example", "/\x00/evil.example", "\x00", "/x\x7f", "/\u00a0/evil.example", "/\u2028/evil.example",
		"/%09/evil.example", "/%0a/evil.example", "/%2F/evil.example", "/%2f%2fevil.example", "/%5Cevil.example",
		"/%00", "/%zz", "https://evil.example/", "http:/evil.example", "javascript:alert(1)",
	}
)

// LoginLocation logs in at base with next, by GET or by the form's POST,
// and returns the Location of the 303 the login answers.
func LoginLocation(t *testing.T, base, next string, post bool) string {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var resp *http.Response
	var err error
	if post {
		resp, err = c.PostForm(base+"/login", url.Values{"token": {Token}, "next": {next}})
	} else {
		resp, err = c.Get(base + "/login?" + url.Values{"token": {Token}, "next": {next}}.Encode())
	}
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "%q", next)
	return resp.Header.Get("Location")
}
