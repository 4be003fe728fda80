package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/console"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/consoletest"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// Only the operator token opens the console: as a bearer token, or once
// at /login for a session cookie (HttpOnly, SameSite=Strict). Nothing
// else does, a tenant's API key least of all, and a login link cannot
// send the operator to another site.
func TestOnlyTheOperatorTokenOpensTheConsole(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	_, tenantKey, err := tenants.CreateKey(context.Background(), w.Live, "t")
	require.NoError(t, err)
	anon := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	for name, auth := range map[string]string{
		"none": "", "wrong token": "Bearer not-the-token-at-all", "a tenant's API key": "Bearer " + tenantKey,
		"token without Bearer": consoletest.Token,
	} {
		status, body := consoletest.Get(t, anon, w.Base+"/requests", "Authorization", auth)
		require.Equal(t, http.StatusUnauthorized, status, name)
		require.NotContains(t, body, "Requests</h1>", name)
	}
	status, _ := consoletest.Get(t, anon, w.Base+"/requests", "Authorization", "Bearer "+consoletest.Token)
	require.Equal(t, http.StatusOK, status)

	// A browser without a session is sent to the login page.
	req, _ := http.NewRequest(http.MethodGet, w.Base+"/requests?state=needs_attention", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := anon.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login?next="+url.QueryEscape("/requests?state=needs_attention"), resp.Header.Get("Location"))

	resp, err = anon.PostForm(w.Base+"/login", url.Values{"token": {tenantKey}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Empty(t, resp.Cookies())

	resp, err = anon.Get(w.Base + "/login?next=//elsewhere.example/&token=" + url.QueryEscape(consoletest.Token))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/", resp.Header.Get("Location"), "never to another host")
	require.Len(t, resp.Cookies(), 1)
	c := resp.Cookies()[0]
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.NotContains(t, c.Value, consoletest.Token)

	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))

	_, err = console.New(console.Config{Pool: w.Live, Desk: nil, Token: consoletest.Token})
	require.Error(t, err)
}

// TestForgedConsoleActionIsRefused: pitfall O7 "An operator's action forged by another site". Another site's page makes
// the operator's browser post a resolution to the console; the browser
// sends the session cookie along with any request, so the cookie alone
// must not be enough. A form must carry the CSRF token of the session
// (which another site cannot read), and a cross-site request is refused
// whatever it carries.
func TestForgedConsoleActionIsRefused(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	consoletest.Charge(t, w.Service(t, idempotency.Config{GiveUpAfter: time.Millisecond}), w.Tenant, "stuck-1", consoletest.Visa)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{}))
	c := w.Client(t)
	_, page := consoletest.Get(t, c, w.Base+"/request?tenant=t&key=stuck-1")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	require.Len(t, m, 2, "the page's forms carry a CSRF token")
	csrf := m[1]

	form := func(token string) url.Values {
		v := url.Values{"tenant": {"t"}, "key": {"stuck-1"}, "as": {"failed"}, "reason": {"forged"}, "by": {"mallory"}, "force": {"1"}}
		if token != "" {
			v.Set("csrf", token)
		}
		return v
	}
	post := func(v url.Values, header ...string) int {
		req, err := http.NewRequest(http.MethodPost, w.Base+"/request/resolve", strings.NewReader(v.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, post(form("")), "no CSRF token")
	require.Equal(t, http.StatusForbidden, post(form("forged-"+csrf)), "a wrong one")
	require.Equal(t, http.StatusForbidden, post(form(csrf), "Sec-Fetch-Site", "cross-site"), "from another site, even with it")
	require.Equal(t, http.StatusForbidden, post(form(csrf), "Origin", "https://elsewhere.example"), "from another origin, even with it")
	state, _, _ := w.KeyState(t, "stuck-1")
	require.Equal(t, "needs_attention", state, "nothing was resolved")
	var n int
	require.NoError(t, w.Live.QueryRow(context.Background(), `SELECT count(*) FROM request_resolutions`).Scan(&n))
	require.Zero(t, n)

	require.Equal(t, http.StatusSeeOther, post(form(csrf), "Sec-Fetch-Site", "same-origin"), "the page's own form")
	state, _, _ = w.KeyState(t, "stuck-1")
	require.Equal(t, "done", state)
}

// TestConsoleNeverShowsASecret: pitfall O8 "A secret on an operator's screen". An operator's screen is read
// over shoulders, shared in calls and captured in screenshots: no page
// shows a webhook signing secret (not even inside the stored answer of an
// endpoint's creation, which carries it for its client's replays), nor
// the credentials or query of a registered URL; and everything a page
// prints is escaped, so that a key or a tenant's name cannot write into
// the page.
func TestConsoleNeverShowsASecret(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	ctx := context.Background()
	ep, err := webhooks.Create(ctx, w.Live, w.Tenant, "https://user:hunter2@hooks.example/in?token=qwerty", []string{"*"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ep.Secret, webhooks.SecretPrefix))

	// The stored answer of the endpoint's creation, as the API stores it.
	const key = `<script>alert("key")</script>`
	req, err := idempotency.Canonicalize("POST", "/v1/webhook_endpoints", []byte(`{"url":"https://hooks.example/in"}`))
	require.NoError(t, err)
	body := `{"id":"` + ep.ID + `","object":"webhook_endpoint","secret":"` + ep.Secret + `"}`
	require.NoError(t, pgx.BeginFunc(ctx, w.Live, func(tx pgx.Tx) error {
		rec, _, err := w.Keys.Claim(ctx, tx, idempotency.ClaimParams{TenantID: w.Tenant, Key: key, Request: req})
		if err != nil {
			return err
		}
		return w.Keys.LeaseOf(rec).Finish(ctx, tx, idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(body)})
	}))

	c := w.Client(t)
	pages := []string{"/webhooks", "/webhook?tenant=t&id=" + url.QueryEscape(ep.ID), "/requests", "/request?tenant=t&key=" + url.QueryEscape(key)}
	for _, p := range pages {
		status, page := consoletest.Get(t, c, w.Base+p)
		require.Equal(t, http.StatusOK, status, p)
		require.NotContains(t, page, ep.Secret, p)
		require.NotContains(t, page, ep.Secret[len(webhooks.SecretPrefix):], p)
		require.NotContains(t, page, "hunter2", p)
		require.NotContains(t, page, "qwerty", p)
		require.NotContains(t, page, `<script>alert`, p)
	}
	_, page := consoletest.Get(t, c, w.Base+"/request?tenant=t&key="+url.QueryEscape(key))
	require.Contains(t, page, "whsec_… (redacted)", "the stored answer, with its secret redacted")
	require.Contains(t, page, "&lt;script&gt;alert(&#34;key&#34;)&lt;/script&gt;", "the key, escaped")
	_, page = consoletest.Get(t, c, w.Base+"/webhooks")
	require.Contains(t, page, "hooks.example/in")
}

// Pages that name what does not exist answer 404, and filters that make
// no sense 400, with a line saying why; never 500.
func TestPagesAnswerWhatTheyCannotShow(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	c := w.Client(t)
	for p, want := range map[string]int{
		"/request?tenant=t&key=nope":                          http.StatusNotFound,
		"/request?tenant=nobody&key=nope":                     http.StatusNotFound,
		"/request?tenant=t&key=%00":                           http.StatusNotFound,
		"/request?tenant=t&key=%ff":                           http.StatusNotFound,
		"/request":                                            http.StatusBadRequest,
		"/charge?tenant=t&id=ch_nope":                         http.StatusNotFound,
		"/webhook?tenant=t&id=we_nope":                        http.StatusNotFound,
		"/requests?state=sideways":                            http.StatusBadRequest,
		"/requests?tenant=nobody":                             http.StatusBadRequest,
		"/requests?operation=teleport":                        http.StatusBadRequest,
		"/requests?older_than=yesterday":                      http.StatusBadRequest,
		"/requests?after_at=never":                            http.StatusBadRequest,
		"/requests?state=done&operation=charge&older_than=1s": http.StatusOK,
		"/no-such-page":                                       http.StatusNotFound,
	} {
		status, _ := consoletest.Get(t, c, w.Base+p)
		require.Equal(t, want, status, p)
	}
}

// The requests page lists newest first and pages by keyset: the next
// page's link starts after the last request shown.
func TestRequestsPageByKeyset(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	svc := w.Service(t, idempotency.Config{})
	for i := range 53 {
		consoletest.Charge(t, svc, w.Tenant, "k-"+string(rune('A'+i/26))+string(rune('a'+i%26)), consoletest.Visa)
	}
	c := w.Client(t)
	_, page := consoletest.Get(t, c, w.Base+"/requests?operation=charge")
	keys := regexp.MustCompile(`key=(k-[A-Za-z]{2})&amp;tenant=t"`).FindAllStringSubmatch(page, -1)
	require.Len(t, keys, 50)
	next := regexp.MustCompile(`id="next-page" href="([^"]+)"`).FindStringSubmatch(page)
	require.Len(t, next, 2)
	_, page2 := consoletest.Get(t, c, w.Base+strings.ReplaceAll(next[1], "&amp;", "&"))
	more := regexp.MustCompile(`key=(k-[A-Za-z]{2})&amp;tenant=t"`).FindAllStringSubmatch(page2, -1)
	require.Len(t, more, 3)
	seen := map[string]bool{}
	for _, k := range append(keys, more...) {
		require.False(t, seen[k[1]], "listed twice: %s", k[1])
		seen[k[1]] = true
	}
	require.Len(t, seen, 53)
	require.NotContains(t, page2, `id="next-page"`)
}
