package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/testutil/consoletest"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// An endpoint's page has the redelivery lever: a POST form with the
// session's CSRF token, which makes a given-up delivery due now (one event,
// or the endpoint's events of a window), records the operator's name with
// via console, and redirects to the page with what it did; a form without
// a name is refused, changing nothing, with the reason on the page.
func TestConsoleRedeliversWebhooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := consoletest.NewWorld(t)
	ep, err := webhooks.Create(ctx, w.Live, w.Tenant, "https://hooks.example/in", []string{"*"})
	require.NoError(t, err)
	ev, err := events.Write(ctx, w.Live, w.Tenant, "charge.authorized", []byte(`{"id":"ch_1","object":"charge"}`))
	require.NoError(t, err)
	giveUp := func() {
		_, err := w.Live.Exec(ctx, `UPDATE webhook_deliveries SET state = 'failed', finished_at = now() WHERE event_id = $1`, ev.ID)
		require.NoError(t, err)
	}
	giveUp()
	state := func() string {
		var s string
		require.NoError(t, w.Live.QueryRow(ctx, `SELECT state FROM webhook_deliveries WHERE event_id = $1`, ev.ID).Scan(&s))
		return s
	}

	c := w.Client(t)
	page := w.Base + "/webhook?" + url.Values{"tenant": {"t"}, "id": {ep.ID}}.Encode()
	status, body := consoletest.Get(t, c, page)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `id="redeliver-form"`)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	require.Len(t, m, 2)
	post := func(v url.Values) string {
		t.Helper()
		v.Set("csrf", m[1])
		v.Set("tenant", "t")
		v.Set("endpoint", ep.ID)
		req, err := http.NewRequest(http.MethodPost, w.Base+"/webhook/redeliver", strings.NewReader(v.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		return resp.Header.Get("Location")
	}

	loc := post(url.Values{"event": {ev.ID}})
	require.Contains(t, loc, "refused=name")
	require.Equal(t, "failed", state(), "refused: nothing changed")
	_, body = consoletest.Get(t, c, w.Base+loc)
	require.Contains(t, body, "your name is required")

	loc = post(url.Values{"event": {ev.ID}, "by": {"alice"}})
	require.Contains(t, loc, "did=redelivered")
	require.Equal(t, "pending", state())
	_, body = consoletest.Get(t, c, w.Base+loc)
	require.Contains(t, body, "Redelivery recorded: 1 deliveries are due now")

	giveUp()
	loc = post(url.Values{"since": {"24h"}, "by": {"alice"}})
	require.Contains(t, loc, "n=1")
	require.Equal(t, "pending", state())
	require.Contains(t, post(url.Values{"since": {"1000h"}, "by": {"alice"}}), "refused=window")
	require.Contains(t, post(url.Values{"event": {"evt_0661d5a3c9e1f0b2a4c6e8d0f1a3b5"}, "by": {"alice"}}), "refused=event")

	var n int
	require.NoError(t, w.Live.QueryRow(ctx, `SELECT count(*) FROM webhook_redeliveries
 WHERE tenant_id = $1 AND requested_by = 'alice' AND via = 'console' AND endpoint_id = $2`, w.Tenant, ep.ID).Scan(&n))
	require.Equal(t, 2, n, "each redelivery is recorded with the operator's name")
}
