package console_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/console"
	"github.com/phasepay/phasepay/internal/testutil/consoletest"
)

// noRedirects is a client that shows each answer as it is.
func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// TestLoginLinkSendsOnlyToTheConsole: pitfall O9 "A login link that sends
// the operator to another site". Each next= a link may carry, raw or
// percent-encoded, with what WHATWG parsers strip or read as a slash: only
// a path of the console is followed, anything else goes to "/". That a
// real browser's URL parser keeps every such Location on the console is
// TestLoginLocationsStayOnTheConsole's, in tools/consolebrowser.
func TestLoginLinkSendsOnlyToTheConsole(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	var locations []string
	for _, next := range consoletest.NextKept {
		loc := consoletest.LoginLocation(t, w.Base, next, false)
		require.Equal(t, next, loc, "a path of the console is followed")
		locations = append(locations, loc)
	}
	for _, next := range consoletest.NextRefused {
		for _, post := range []bool{false, true} {
			loc := consoletest.LoginLocation(t, w.Base, next, post)
			require.Equal(t, "/", loc, "%q (post %v)", next, post)
			locations = append(locations, loc)
		}
	}
	for _, loc := range locations {
		require.Regexp(t, `^/([^/\\]|$)`, loc)
		require.NotRegexp(t, `[\x00-\x20\x7f\\]`, loc)
	}
}

// loginCookie logs in and returns the session cookie.
func loginCookie(t *testing.T, base string) *http.Cookie {
	t.Helper()
	resp, err := noRedirects().PostForm(base+"/login", url.Values{"token": {consoletest.Token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	return resp.Cookies()[0]
}

// withCookie fetches a page with a cookie and returns the status.
func withCookie(t *testing.T, u string, c *http.Cookie) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	req.AddCookie(c)
	resp, err := noRedirects().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// TestLogoutEndsTheSessionOnTheServer: pitfall O10 "A logout that ends
// nothing". A session was a signed timestamp: after POST /logout, a copy
// of its cookie still opened every page for 12 hours. The session is now
// a row that logout deletes, so the old cookie opens nothing, at this
// console and at another sharing the database and the token; and a live
// stream that it opened ends.
func TestLogoutEndsTheSessionOnTheServer(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	other := newConsole(t, w)
	c := loginCookie(t, w.Base)
	require.Equal(t, http.StatusOK, withCookie(t, w.Base+"/requests", c))
	require.Equal(t, http.StatusOK, withCookie(t, other+"/requests", forPort(t, c, other)), "one session at every console of the database")

	// A live stream of the session, open while it logs out.
	req, err := http.NewRequest(http.MethodGet, w.Base+"/requests", nil)
	require.NoError(t, err)
	req.AddCookie(c)
	req.Header.Set("Accept", "text/event-stream")
	stream, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, http.StatusOK, stream.StatusCode)
	ended := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
		}
		ended <- sc.Err()
	}()

	_, page := consoletest.Get(t, &http.Client{Jar: jarWith(t, w.Base, c)}, w.Base+"/requests")
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	require.Len(t, csrf, 2)
	req, err = http.NewRequest(http.MethodPost, w.Base+"/logout", strings.NewReader(url.Values{"csrf": {csrf[1]}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(c)
	resp, err := noRedirects().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	for _, base := range []string{w.Base, other} {
		for _, p := range []string{"/requests", "/", "/request?tenant=t&key=k"} {
			require.Equal(t, http.StatusUnauthorized, withCookie(t, base+p, forPort(t, c, base)), "the old cookie opens %s%s", base, p)
		}
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the session's live stream went on after its logout")
	}
}

// forPort is c named for the console at base: a session cookie's name
// carries the port the browser addressed (as a proxy in front of replicas
// presents one name for them all).
func forPort(t *testing.T, c *http.Cookie, base string) *http.Cookie {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	cc := *c
	cc.Name = "phasepay_console_" + u.Port()
	return &cc
}

// jarWith is a cookie jar holding c for base.
func jarWith(t *testing.T, base string, c *http.Cookie) http.CookieJar {
	t.Helper()
	jar := &cookieJar{}
	u, err := url.Parse(base)
	require.NoError(t, err)
	jar.SetCookies(u, []*http.Cookie{c})
	return jar
}

type cookieJar struct {
	mu sync.Mutex
	cs []*http.Cookie
}

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cs = append(j.cs, cs...)
}

func (j *cookieJar) Cookies(*url.URL) []*http.Cookie {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.cs
}

// newConsole starts a second console on w's database, with the same token.
func newConsole(t *testing.T, w *consoletest.World) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv, err := console.New(console.Config{Pool: w.Live, Desk: w.Desk, Token: consoletest.Token, Addr: ln.Addr().String()})
	require.NoError(t, err)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String()
}

// TestConsoleAnswersOnlyToItsNames: pitfall O11 "A console that answers to
// any name". A site whose name an attacker points at 127.0.0.1 (DNS
// rebinding) is same-origin with the console to the browser; its requests
// name the attacker's host. Only the listen address, localhost at its
// port and CONSOLE_HOSTS are answered, on every path.
func TestConsoleAnswersOnlyToItsNames(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t, func(c *console.Config) { c.Hosts = []string{"console.example", "proxy.example:8443"} })
	_, port, err := net.SplitHostPort(w.Addr)
	require.NoError(t, err)
	status := func(host, path string) int {
		req, err := http.NewRequest(http.MethodGet, w.Base+path, nil)
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+consoletest.Token)
		resp, err := noRedirects().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/", "/login", "/requests", "/assets/console.js"} {
		for host, ok := range map[string]bool{
			w.Addr: true, "localhost:" + port: true, "LocalHost.:" + port: true, "console.example": true,
			"console.example:" + port: true, "proxy.example:8443": true,
			"evil.example": false, "evil.example:" + port: false, "localhost:1": false, "proxy.example": false,
			"console.example.evil.example": false,
		} {
			got := status(host, path)
			if ok {
				require.Equal(t, http.StatusOK, got, "Host %q, %s", host, path)
			} else {
				require.Equal(t, http.StatusMisdirectedRequest, got, "Host %q, %s", host, path)
			}
		}
	}
}

// clock is a console's clock that a test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fromAddress is a client whose connections come from ip (any of
// 127/8 is this machine's on Linux).
func fromAddress(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// TestWrongTokensAreSlowed: pitfall O12 "Wrong tokens that cost nothing".
// 30 guesses took 0.32 s. After 5 wrong tokens within a minute, an address
// is answered 429 with Retry-After, the right token too (else the answer
// would tell the right guess), at /login and as a bearer token, for a
// minute; then the right token is admitted again. Other addresses are not
// held up; wrong tokens spread beyond the window are not counted together.
func TestWrongTokensAreSlowed(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	w := consoletest.NewWorld(t, func(c *console.Config) { c.Now = clk.Now })
	attacker, operator := fromAddress("127.0.0.1"), fromAddress("127.0.0.2")
	login := func(c *http.Client, token string) *http.Response {
		resp, err := c.PostForm(w.Base+"/login", url.Values{"token": {token}})
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	bearer := func(c *http.Client, token string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, w.Base+"/requests", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}

	// Four wrong, a minute apart from four more: never five in a window.
	for range 4 {
		require.Equal(t, http.StatusUnauthorized, login(attacker, "guess-0123456789").StatusCode)
	}
	clk.Add(61 * time.Second)
	for range 4 {
		require.Equal(t, http.StatusUnauthorized, bearer(attacker, "guess-0123456789").StatusCode)
	}
	require.Equal(t, http.StatusSeeOther, login(attacker, consoletest.Token).StatusCode, "not slowed yet")

	// The fifth within the window.
	require.Equal(t, http.StatusUnauthorized, login(attacker, "guess-0123456789").StatusCode)
	for _, resp := range []*http.Response{
		login(attacker, "guess-0123456789"), login(attacker, consoletest.Token),
		bearer(attacker, "guess-0123456789"), bearer(attacker, consoletest.Token),
	} {
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		require.Equal(t, "60", resp.Header.Get("Retry-After"))
	}
	require.Equal(t, http.StatusSeeOther, login(operator, consoletest.Token).StatusCode, "another address is not held up")

	clk.Add(45 * time.Second)
	resp := login(attacker, consoletest.Token)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "15", resp.Header.Get("Retry-After"))
	clk.Add(15 * time.Second)
	require.Equal(t, http.StatusSeeOther, login(attacker, consoletest.Token).StatusCode, "the right token, after the wait")
	require.Equal(t, http.StatusOK, bearer(attacker, consoletest.Token).StatusCode)
}

// A session signed under another token opens nothing: changing the token
// ends every session.
func TestChangingTheTokenEndsEverySession(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	c := loginCookie(t, w.Base)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv, err := console.New(console.Config{Pool: w.Live, Desk: w.Desk, Token: consoletest.Token + "-rotated", Addr: ln.Addr().String()})
	require.NoError(t, err)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Shutdown(context.Background()) })
	base := "http://" + ln.Addr().String()
	require.Equal(t, http.StatusUnauthorized, withCookie(t, base+"/requests", forPort(t, c, base)))
}
