package consolebrowser_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/consoletest"
)

// An operator retries a needs_attention request from its page, in a real
// browser, naming themselves in the form as `requests retry --by` does:
// the retry is written in the request's timeline under that name, not
// under "console".
func TestRetryFromThePageRecordsTheOperator(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	ctx := context.Background()
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	consoletest.Charge(t, w.Service(t, idempotency.Config{GiveUpAfter: time.Millisecond}), w.Tenant, "stuck-1", consoletest.Visa)

	browser := tab(t, w.Base)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(w.Base+"/request?tenant=t&key=stuck-1"),
		chromedp.WaitVisible(chromedp.CSS("#retry-form"))))
	require.Equal(t, "needs_attention", text(t, browser, "#state"))
	require.NoError(t, chromedp.Do(browser,
		chromedp.SendKeys(chromedp.CSS(`#retry-form input[name="by"]`), "ops-jane"),
		chromedp.Click(chromedp.CSS(`#retry-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	))
	require.Contains(t, text(t, browser, "#flash"), "next attempt is due now")

	h, err := idempotency.ReadHistory(ctx, w.Live, w.Tenant, "stuck-1")
	require.NoError(t, err)
	last := h.Entries[len(h.Entries)-1]
	require.Equal(t, idempotency.KindRetried, last.Kind)
	require.Equal(t, "ops-jane", last.Operator)
}

// A retry posted without a name is refused, as a resolution without one
// is: nothing is made due, and the timeline gains no entry.
func TestRetryWithoutANameIsRefused(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	ctx := context.Background()
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	consoletest.Charge(t, w.Service(t, idempotency.Config{GiveUpAfter: time.Millisecond}), w.Tenant, "stuck-1", consoletest.Visa)
	c := w.Client(t)
	_, page := consoletest.Get(t, c, w.Base+"/request?tenant=t&key=stuck-1")
	require.Regexp(t, `(?s)id="retry-form".*name="by" required`, page, "the form asks for the name")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	require.Len(t, m, 2)
	before, err := idempotency.ReadHistory(ctx, w.Live, w.Tenant, "stuck-1")
	require.NoError(t, err)

	for _, by := range []string{"", "   "} {
		v := url.Values{"csrf": {m[1]}, "tenant": {"t"}, "key": {"stuck-1"}, "by": {by}}
		req, err := http.NewRequest(http.MethodPost, w.Base+"/request/retry", strings.NewReader(v.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		loc, err := url.Parse(resp.Header.Get("Location"))
		require.NoError(t, err)
		require.Contains(t, loc.Query().Get("refused"), "name is required")
	}
	state, _, _ := w.KeyState(t, "stuck-1")
	require.Equal(t, "needs_attention", state)
	after, err := idempotency.ReadHistory(ctx, w.Live, w.Tenant, "stuck-1")
	require.NoError(t, err)
	require.Len(t, after.Entries, len(before.Entries), "nothing written")
}
