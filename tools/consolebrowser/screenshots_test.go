package consolebrowser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/consoletest"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// screenshots is where TestEveryPageRendersInABrowser keeps its
// screenshots: make screenshots sets it to docs/console, for the README;
// otherwise they go to a temporary directory and only their being real
// pictures is checked.
var screenshots = flag.String("screenshots", "", "directory to write the console's screenshots to (make screenshots)")

// Every page of the console, in a real browser, on a database with a bit
// of everything (a charge captured and refunded, one declined, one that
// needs attention, one taken over by a reaper after its worker crashed in
// the PSP call, a webhook endpoint whose deliveries failed once): each
// renders without an error, streams its live region (the script connected
// and took an update, its clock in UTC; the Content-Security-Policy would
// have stopped it had it been inline),
// and is photographed.
func TestEveryPageRendersInABrowser(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	chargeID, takenOver, endpointID := seedShowcase(t, w)

	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	browser := tab(t, w.Base)
	for name, path := range map[string]string{
		"overview": "/",
		"requests": "/requests",
		"request":  "/request?tenant=t&key=" + takenOver,
		"charge":   "/charge?tenant=t&id=" + chargeID,
		"webhooks": "/webhooks",
		"webhook":  "/webhook?tenant=t&id=" + endpointID,
	} {
		_, err := chromedp.Run(browser, chromedp.Steps(chromedp.Navigate(w.Base+path), chromedp.WaitVisible(chromedp.CSS("#live"))))
		require.NoError(t, err, name)
		poll(t, browser, `document.getElementById("live-status").textContent.endsWith(" UTC")`, 10*time.Second)
		_, err = chromedp.Run(browser, chromedp.WaitNotPresent(chromedp.CSS("#error")))
		require.NoError(t, err, "%s shows an error", name)
		if name == "request" {
			timelineDrawnClear(t, browser)
		}
		shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
		require.NoError(t, err, name)
		img, err := png.Decode(bytes.NewReader(shot))
		require.NoError(t, err, name)
		require.Greater(t, img.Bounds().Dy(), 300, name)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "console-"+name+".png"), shot, 0o644))
	}
}

// timelineDrawnClear checks the request's timeline as the browser drew it,
// with its own fonts: every mark's label inside the drawing and clear of
// every other, and the dead api's hold ending at its last heartbeat, the
// rest drawn silent.
func timelineDrawnClear(t *testing.T, browser context.Context) {
	t.Helper()
	got, err := chromedp.Run(browser, chromedp.Evaluate[[]int](`(() => {
	  const svg = document.getElementById("timeline"), w = svg.viewBox.baseVal.width;
	  const boxes = [...svg.querySelectorAll("text.mark-label")].map(e => e.getBBox());
	  let outside = 0, overlaps = 0;
	  boxes.forEach((a, i) => {
	    if (a.x < 0 || a.x + a.width > w) outside++;
	    boxes.slice(i + 1).forEach(b => {
	      if (a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height) overlaps++;
	    });
	  });
	  const api = svg.querySelector('g.lane[data-holder^="api:"]');
	  const beat = api.querySelector("circle.heartbeat.last"), silent = api.querySelector("rect.silent");
	  const at = beat && silent ? Math.round(Math.abs(beat.cx.baseVal.value - silent.x.baseVal.value)) : -1;
	  return [boxes.length, outside, overlaps, at];
	})()`))
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.Positive(t, got[0], "labels drawn")
	require.Zero(t, got[1], "labels clipped at the drawing's edge")
	require.Zero(t, got[2], "labels overlapping")
	require.Zero(t, got[3], "the api's last heartbeat begins its silent span (-1: either is missing)")
}

// seedShowcase makes what the screenshots show, and returns the captured
// charge's id, the key a reaper took over and the webhook endpoint's id.
func seedShowcase(t *testing.T, w *consoletest.World) (chargeID, takenOver, endpointID string) {
	t.Helper()
	ctx := context.Background()
	// An endpoint that fails each event's first delivery.
	var calls atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		if calls.Add(1)%2 == 1 {
			rw.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rw.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(sink.Close)
	ep, err := webhooks.Create(ctx, w.Live, w.Tenant, sink.URL+"/phasepay/events", []string{"*"})
	require.NoError(t, err)
	endpointID = ep.ID

	svc := w.Service(t, idempotency.Config{})
	res := consoletest.Charge(t, svc, w.Tenant, "order-1001", `{"amount":4200,"currency":"eur","payment_method":"pm_card_visa","description":"annual plan"}`)
	chargeID = chargeOf(t, res)
	_, err = svc.Capture(ctx, w.Tenant, "order-1001-capture", chargeID, phases.AsSent([]byte(`{}`)))
	require.NoError(t, err)
	_, err = svc.Refund(ctx, w.Tenant, "order-1001-refund-1", phases.AsSent([]byte(`{"charge":"`+chargeID+`","amount":1200}`)))
	require.NoError(t, err)
	consoletest.Charge(t, svc, w.Tenant, "order-1002", `{"amount":990,"currency":"usd","payment_method":"pm_card_chargeDeclined"}`)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	consoletest.Charge(t, w.Service(t, idempotency.Config{GiveUpAfter: time.Millisecond}), w.Tenant, "order-1003", consoletest.Visa)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{}))

	// A worker that dies right after a slow PSP answered (its heartbeat
	// renewed the lease during the call), and the reaper that takes its
	// key over once the lease ran out.
	takenOver = "order-1004"
	api, err := idempotency.NewStore(idempotency.Config{Lease: time.Second, NeedsAttention: events.NeedsAttention})
	require.NoError(t, err)
	crashing := chargestest.NewService(t, w.Live, api, w.PSP, phases.Config{CrashHook: phasestest.CrashAt(phases.CrashAfterCall)})
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{LatencyMS: 500}))
	_, err = crashing.Create(ctx, w.Tenant, takenOver, phases.AsSent([]byte(consoletest.Visa)))
	require.ErrorIs(t, err, phasestest.ErrCrash)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{}))
	time.Sleep(1100 * time.Millisecond)
	reaperKeys, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute, Role: idempotency.RoleReaper, NeedsAttention: events.NeedsAttention})
	require.NoError(t, err)
	r, err := reaper.New(w.Live, reaperKeys, chargestest.NewService(t, w.Live, reaperKeys, w.PSP, phases.Config{}), reaper.Config{})
	require.NoError(t, err)
	_, err = r.RunOnce(ctx)
	require.NoError(t, err)
	state, _, _ := w.KeyState(t, takenOver)
	require.Equal(t, "done", state)

	// The deliveries, each failed once and then delivered.
	d, err := webhooks.NewDeliverer(w.Live, webhooks.DelivererConfig{AllowPrivate: true, RetryBase: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	require.Eventually(t, func() bool {
		b, err := webhooks.Backlog(ctx, w.Live)
		return err == nil && b.Pending == 0
	}, 15*time.Second, 50*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	return chargeID, takenOver, endpointID
}

// chargeOf is the id of the charge an answer carries.
func chargeOf(t *testing.T, res phases.Result) string {
	t.Helper()
	var c struct{ ID string }
	require.NoError(t, json.Unmarshal(res.Response.Body, &c), "%s", res.Response.Body)
	require.NotEmpty(t, c.ID, "%s", res.Response.Body)
	return c.ID
}
