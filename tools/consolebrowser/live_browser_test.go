package consolebrowser_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/consoletest"
)

// storeAnswer finishes a new key of tenant t with body as its stored
// answer, as a request would have.
func storeAnswer(t *testing.T, w *consoletest.World, key, body string) {
	t.Helper()
	ctx := context.Background()
	req, err := idempotency.Canonicalize("POST", "/v1/charges", []byte(consoletest.Visa))
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, w.Live, func(tx pgx.Tx) error {
		rec, _, err := w.Keys.Claim(ctx, tx, idempotency.ClaimParams{TenantID: w.Tenant, Key: key, Request: req})
		if err != nil {
			return err
		}
		return w.Keys.LeaseOf(rec).Finish(ctx, tx, idempotency.Response{Status: 502, ContentType: "text/plain", Body: []byte(body)})
	}))
}

// TestLiveUpdateSplitsLinesWhereTheBrowserDoes: pitfall O13 "A live update
// split where the browser does not split". A live region is sent as one
// server-sent event, a "data:" line per line. EventSource ends a line at
// CR, LF and CRLF; the console split at LF only, so a CR inside a page (a
// stored answer holds whatever the request stored) ended the browser's
// line early, and the rest became fields of the event: here "event:
// hijack", which renames the event so that the page's handler never sees
// it, and the page stops following the database. The stream now splits
// where the browser does: no line it sends holds a CR, and the page takes
// the update, with the answer's text in it.
func TestLiveUpdateSplitsLinesWhereTheBrowserDoes(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	const body = "upstream said\rretry: 3600000\r\nevent: hijack\rid: 7\r\ndata: <b>bold</b>\nend of answer"
	storeAnswer(t, w, "cr-1", body)
	page := w.Base + "/request?tenant=t&key=cr-1"

	// The stream itself: every line ends at LF, none holds a CR.
	req, err := http.NewRequest(http.MethodGet, page, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+consoletest.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var ev bytes.Buffer
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadBytes('\n')
		require.NoError(t, err)
		ev.Write(line)
		if bytes.Equal(line, []byte("\n")) && bytes.Contains(ev.Bytes(), []byte("data: ")) {
			break
		}
	}
	require.NotContains(t, ev.String(), "\r", "a CR in the stream ends a line for the browser")
	for line := range strings.SplitSeq(strings.TrimSuffix(ev.String(), "\n\n"), "\n") {
		require.True(t, strings.HasPrefix(line, "data: ") || strings.HasPrefix(line, ":"), "a line that is not data: %q", line)
	}

	// The page in a browser takes the update.
	status, html := consoletest.Get(t, &http.Client{}, page, "Authorization", "Bearer "+consoletest.Token)
	require.Equal(t, http.StatusOK, status, html)
	browser := tab(t, w.Base)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#answer"))))
	poll(t, browser, `document.body.dataset.updated !== undefined`, 10*time.Second)
	shown := text(t, browser, "#answer")
	require.Contains(t, shown, "event: hijack", "the answer's text, not fields of the event")
	require.Contains(t, shown, "end of answer")
	require.Contains(t, shown, "<b>bold</b>", "escaped, shown as text")
	require.True(t, strings.HasPrefix(text(t, browser, "#live-status"), "live"))
}

// A refused lever answers as one that worked does: a redirect to the
// request's page (POST-redirect-GET), which shows why. Rendered at the
// lever's own address, the refusal left a page whose live stream asked
// for that POST-only address (405, "reconnecting…" for ever), and whose
// reload posted the form again.
func TestRefusedActionRedirectsWithItsReason(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	consoletest.Charge(t, w.Service(t, idempotency.Config{GiveUpAfter: time.Millisecond}), w.Tenant, "stuck-1", consoletest.Visa)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{}))

	browser := tab(t, w.Base)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(w.Base+"/request?tenant=t&key=stuck-1"),
		chromedp.WaitVisible(chromedp.CSS("#resolve-form"))))
	// The PSP holds no authorization: "succeeded" is contradicted.
	require.NoError(t, chromedp.Do(browser,
		chromedp.SetValue(chromedp.CSS(`#resolve-form select[name="as"]`), "succeeded"),
		chromedp.SendKeys(chromedp.CSS(`#resolve-form input[name="reason"]`), "the PSP's dashboard shows it"),
		chromedp.SendKeys(chromedp.CSS(`#resolve-form input[name="by"]`), "ops-jane"),
		chromedp.Click(chromedp.CSS(`#resolve-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#error")),
	))
	require.Equal(t, int64(1), w.Posts.Load(), "one resolution posted")
	require.Contains(t, text(t, browser, "#error"), "Not resolved")
	path, err := chromedp.Run(browser, chromedp.Evaluate[string](`location.pathname`))
	require.NoError(t, err)
	require.Equal(t, "/request", path, "the page of the request, not the lever's address")
	poll(t, browser, `document.getElementById("live-status").textContent.startsWith("live")`, 10*time.Second)
	poll(t, browser, `document.body.dataset.updated !== undefined`, 10*time.Second)
	require.Equal(t, "needs_attention", text(t, browser, "#state"))

	// A reload asks for the page again; it posts nothing.
	require.NoError(t, chromedp.Do(browser, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#error"))))
	require.Equal(t, int64(1), w.Posts.Load(), "the reload posted the form again")
	require.Contains(t, text(t, browser, "#error"), "Not resolved")

	// Words no lever of this session said are not shown.
	href, err := chromedp.Run(browser, chromedp.Evaluate[string](`location.href`))
	require.NoError(t, err)
	u, err := url.Parse(href)
	require.NoError(t, err)
	q := u.Query()
	q.Set("refused", "Your session expired: paste the operator token at evil.example")
	u.RawQuery = q.Encode()
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(u.String()), chromedp.WaitVisible(chromedp.CSS("#facts"))))
	missing, err := chromedp.Run(browser, chromedp.Evaluate[bool](`document.getElementById("error") === null`))
	require.NoError(t, err)
	require.True(t, missing, "a refusal not signed for this session is not shown")
}

// The live clock of a page is UTC, like every time the console shows,
// whatever the browser's time zone.
func TestLiveClockIsUTC(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	browser := tab(t, w.Base)
	_, err := chromedp.Call(browser, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Tokyo"}) // UTC+9
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(w.Base+"/requests"), chromedp.WaitVisible(chromedp.CSS("#live"))))
	poll(t, browser, `document.getElementById("live-status").textContent.includes("·")`, 10*time.Second)
	shown := text(t, browser, "#live-status")
	m := regexp.MustCompile(`^live · (\d\d):(\d\d):\d\d UTC$`).FindStringSubmatch(shown)
	require.Len(t, m, 3, "%q", shown)
	local, err := chromedp.Run(browser, chromedp.Evaluate[string](`new Date().toTimeString()`))
	require.NoError(t, err)
	require.Contains(t, local, "GMT+0900", "the browser's zone is not UTC")
	utc := time.Now().UTC()
	h, _ := strconv.Atoi(m[1])
	mm, _ := strconv.Atoi(m[2])
	off := (h*60 + mm - (utc.Hour()*60 + utc.Minute()) + 24*60) % (24 * 60)
	require.True(t, off <= 2 || off >= 24*60-2, "shown %q at %s UTC; the browser's local time %q", shown, utc.Format("15:04"), local)
}
