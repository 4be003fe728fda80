package consolebrowser_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/consoletest"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// The overview, read in a real browser, shows what the database holds:
// every count on it is held against the database's own count, taken with
// SQL of the test's, and one more request in flight reaches the open page
// by itself (live updates), without a reload.
func TestOverviewCountsMatchTheDatabase(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	ctx := context.Background()
	// No deliverer runs: every event's delivery stays in the backlog.
	_, err := webhooks.Create(ctx, w.Live, w.Tenant, "https://hooks.example/phasepay", []string{"*"})
	require.NoError(t, err)

	// One request of each kind the overview counts.
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	consoletest.Charge(t, w.Service(t, idempotency.Config{RetryBase: time.Hour, RetryMax: time.Hour}), w.Tenant, "waiting-1", consoletest.Visa)
	consoletest.Charge(t, w.Service(t, idempotency.Config{RetryBase: time.Millisecond, RetryMax: time.Millisecond}), w.Tenant, "due-1", consoletest.Visa)
	consoletest.Charge(t, w.Service(t, idempotency.Config{GiveUpAfter: time.Millisecond}), w.Tenant, "stuck-1", consoletest.Visa)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{}))
	svc := w.Service(t, idempotency.Config{})
	consoletest.Charge(t, svc, w.Tenant, "done-1", consoletest.Visa)
	consoletest.Charge(t, svc, w.Tenant, "done-2", consoletest.Visa)
	consoletest.Charge(t, svc, w.Tenant, "declined-1", `{"amount":1000,"currency":"usd","payment_method":"pm_card_chargeDeclined"}`)
	holdLease(t, w, "in-flight-1")

	type counts struct{ inFlight, due, waiting, needsAttention, pending, started int }
	fromDB := func() counts {
		var c counts
		require.NoError(t, w.Live.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE state = 'started' AND locked_until > now()),
       count(*) FILTER (WHERE state = 'started' AND coalesce(locked_until <= now(), true)
                          AND coalesce(next_attempt_at, '-infinity') <= now()),
       count(*) FILTER (WHERE state = 'started' AND coalesce(locked_until <= now(), true)
                          AND next_attempt_at > now()),
       count(*) FILTER (WHERE state = 'needs_attention'),
       (SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'),
       count(*) FILTER (WHERE created_at > now() - interval '1 minute')
  FROM idempotency_keys`).Scan(&c.inFlight, &c.due, &c.waiting, &c.needsAttention, &c.pending, &c.started))
		return c
	}
	db := fromDB()
	// Not a test that passes on an empty page: each count is what was made.
	require.Equal(t, counts{inFlight: 1, due: 1, waiting: 1, needsAttention: 1, pending: 4, started: 7}, db)

	browser := tab(t, w.Base)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(w.Base+"/"), chromedp.WaitVisible(chromedp.CSS("#partitions"))))
	require.Equal(t, fmt.Sprint(db.inFlight), text(t, browser, "#in-flight .n"))
	require.Equal(t, fmt.Sprint(db.due), text(t, browser, "#due .n"))
	require.Equal(t, fmt.Sprint(db.waiting), text(t, browser, "#waiting .n"))
	require.Equal(t, fmt.Sprint(db.needsAttention), text(t, browser, "#needs-attention .n"))
	require.Equal(t, fmt.Sprint(db.pending), text(t, browser, "#webhook-backlog .n"))
	require.Equal(t, fmt.Sprintf("%.2f", float64(db.started)/60), text(t, browser, `#rates tr[data-outcome="started"] td.num`))
	require.Equal(t, fmt.Sprintf("%.2f", 2.0/60), text(t, browser, `#rates tr[data-outcome="succeeded"] td.num`), "done-1 and done-2")
	require.Equal(t, fmt.Sprintf("%.2f", 1.0/60), text(t, browser, `#rates tr[data-outcome="payment_failed"] td.num`), "declined-1")

	// Live: one more request in flight shows up on the open page.
	holdLease(t, w, "in-flight-2")
	require.Equal(t, 2, fromDB().inFlight)
	poll(t, browser, `document.querySelector("#in-flight .n").textContent.trim() === "2"`, 10*time.Second)

	// The day's keys, as the statistics system counts them: it learns of
	// the last commits within seconds, and the page follows.
	var day string
	require.NoError(t, w.Live.QueryRow(ctx, `SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD')`).Scan(&day))
	poll(t, browser, `(document.querySelector('#partitions tr[data-day="`+day+`"] td:nth-child(2)') || {}).textContent === "8"`, 15*time.Second)

	// Every card opens the list of what it counts.
	db = fromDB()
	for card, want := range map[string]int{"in-flight": db.inFlight, "due": db.due, "waiting": db.waiting, "needs-attention": db.needsAttention} {
		require.NoError(t, chromedp.Do(browser, chromedp.Navigate(w.Base+"/"), chromedp.WaitVisible(chromedp.CSS("#"+card))))
		require.Equal(t, fmt.Sprint(want), text(t, browser, "#"+card+" .n"))
		require.NoError(t, chromedp.Do(browser, chromedp.Click(chromedp.CSS("#"+card)), chromedp.WaitVisible(chromedp.CSS("#requests"))))
		rows, err := chromedp.Run(browser, chromedp.Evaluate[int](`document.querySelectorAll("#requests a[href^='/request?']").length`))
		require.NoError(t, err)
		require.Equal(t, want, rows, "the list behind the %s card", card)
	}
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(w.Base+"/"), chromedp.WaitVisible(chromedp.CSS("#webhook-backlog")),
		chromedp.Click(chromedp.CSS("#webhook-backlog")), chromedp.WaitVisible(chromedp.CSS("#endpoints"))))
	pending, err := chromedp.Run(browser, chromedp.Evaluate[int](
		`[...document.querySelectorAll("#endpoints tr")].slice(1).reduce((n, tr) => n + Number(tr.children[5].textContent), 0)`))
	require.NoError(t, err)
	require.Equal(t, db.pending, pending, "the endpoints behind the backlog card, with their pending deliveries")
}

// poll waits until expr is true on the page.
func poll(t *testing.T, ctx context.Context, expr string, within time.Duration) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(within)))
	require.NoError(t, err, "waited %s for %s", within, expr)
}

// holdLease claims a key and keeps it: in flight for a minute.
func holdLease(t *testing.T, w *consoletest.World, key string) {
	t.Helper()
	ctx := context.Background()
	req, _ := chargestest.Request(t, consoletest.Visa)
	require.NoError(t, pgx.BeginFunc(ctx, w.Live, func(tx pgx.Tx) error {
		_, _, err := w.Keys.Claim(ctx, tx, idempotency.ClaimParams{TenantID: w.Tenant, Key: key, Request: req})
		return err
	}))
}
