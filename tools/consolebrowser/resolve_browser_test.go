package consolebrowser_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/consoletest"
)

// An operator resolves a needs_attention request from its page, in a real
// browser: the console asks the PSP first (it holds no authorization, so
// "failed" stands), and the resolution is recorded in request_resolutions
// exactly as `api requests resolve` records it, with the operator's reason
// and name, and the request's stored answer is the one its client's retry
// gets.
func TestResolveFromThePageRecordsTheAudit(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	ctx := context.Background()
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	consoletest.Charge(t, w.Service(t, idempotency.Config{GiveUpAfter: time.Millisecond}), w.Tenant, "stuck-1", consoletest.Visa)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{}))

	browser := tab(t, w.Base)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(w.Base+"/request?tenant=t&key=stuck-1"),
		chromedp.WaitVisible(chromedp.CSS("#resolve-form"))))
	require.Equal(t, "needs_attention", text(t, browser, "#state"))
	require.NoError(t, chromedp.Do(browser,
		chromedp.SetValue(chromedp.CSS(`#resolve-form select[name="as"]`), "failed"),
		chromedp.SendKeys(chromedp.CSS(`#resolve-form input[name="reason"]`), "PSP outage; the PSP's support confirmed no authorization"),
		chromedp.SendKeys(chromedp.CSS(`#resolve-form input[name="by"]`), "ops-jane"),
		chromedp.Click(chromedp.CSS(`#resolve-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	))
	require.Contains(t, text(t, browser, "#flash"), "Resolved")
	require.Equal(t, "completed", text(t, browser, "#state"))
	require.Equal(t, "402", text(t, browser, "#answer-status"))
	require.Contains(t, text(t, browser, "#resolutions"), "ops-jane")

	var (
		as, reason, by, pspSaid string
		forced                  bool
	)
	require.NoError(t, w.Live.QueryRow(ctx, `
SELECT resolved_as, reason, resolved_by, forced, coalesce(psp_said, '') FROM request_resolutions
 WHERE tenant_id = $1 AND key = 'stuck-1'`, w.Tenant).Scan(&as, &reason, &by, &forced, &pspSaid))
	require.Equal(t, "failed", as)
	require.Equal(t, "PSP outage; the PSP's support confirmed no authorization", reason)
	require.Equal(t, "ops-jane", by)
	require.False(t, forced, "the PSP was asked")
	require.Equal(t, "no authorization for this charge", pspSaid)
	state, _, _ := w.KeyState(t, "stuck-1")
	require.Equal(t, "done", state)
}
