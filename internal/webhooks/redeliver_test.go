package webhooks_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// A window's redelivery makes due every delivery to the endpoint of the
// events written in [From, Until), batch after batch, and no other: not
// another endpoint's, not an event outside the window. A delivery being
// attempted right now loses its lease, so the new attempt is due at once.
// One audit row counts them all.
func TestRedeliverWindowMakesEveryOwedDeliveryDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ep := b.endpoint(t, "http://127.0.0.1:9/a")
	other := b.endpoint(t, "http://127.0.0.1:9/b")
	before := b.event(t, "charge.authorized")
	var inside []events.Event
	for range 7 {
		inside = append(inside, b.event(t, "charge.authorized"))
	}
	after := b.event(t, "charge.authorized")
	// Every delivery given up; one of the window's under a live lease.
	_, err := b.pool.Exec(ctx, `UPDATE webhook_deliveries SET state = 'failed', finished_at = now(), next_attempt_at = now() + interval '1 day'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE webhook_deliveries SET state = 'pending', finished_at = NULL, locked_until = now() + interval '1 hour'
 WHERE event_id = $1 AND endpoint_id = $2`, inside[3].ID, ep.ID)
	require.NoError(t, err)

	done, err := webhooks.Redeliver(ctx, b.pool, webhooks.Redelivery{TenantID: b.tenant, EndpointID: ep.ID,
		From: inside[0].CreatedAt, Until: after.CreatedAt, By: "alice", Via: webhooks.ViaCLI, Batch: 3})
	require.NoError(t, err)
	require.Equal(t, 7, done.Deliveries)

	due := map[string]bool{}
	rows, err := b.pool.Query(ctx, `SELECT event_id || '/' || endpoint_id FROM webhook_deliveries
 WHERE state = 'pending' AND next_attempt_at <= now() AND locked_until IS NULL`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		due[k] = true
	}
	require.NoError(t, rows.Err())
	require.Len(t, due, 7)
	for _, ev := range inside {
		require.True(t, due[ev.ID+"/"+ep.ID], ev.ID)
		require.False(t, due[ev.ID+"/"+other.ID], "another endpoint's delivery")
	}
	require.False(t, due[before.ID+"/"+ep.ID])
	require.False(t, due[after.ID+"/"+ep.ID], "Until is not included")

	var by, via string
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT requested_by, via, deliveries FROM webhook_redeliveries WHERE tenant_id = $1`,
		b.tenant).Scan(&by, &via, &n))
	require.Equal(t, []any{"alice", "cli", 7}, []any{by, via, n})

	_, err = webhooks.Redeliver(ctx, b.pool, webhooks.Redelivery{TenantID: b.tenant, EndpointID: ep.ID,
		From: after.CreatedAt, Until: inside[0].CreatedAt, By: "alice", Via: webhooks.ViaCLI})
	require.ErrorIs(t, err, webhooks.ErrWindow)
}

// A delivery given up is attempted again once redelivered, by a running
// deliverer, its attempts numbered on from the last: the endpoint that
// answered 500 until it gave up gets the event when it answers 200.
func TestRedeliveredDeliveryIsAttemptedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var ok atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if ok.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	ep := b.endpoint(t, srv.URL)
	ev := b.event(t, "charge.authorized")
	results := b.run(t, webhooks.DelivererConfig{AllowPrivate: true, RetryBase: time.Hour, RetryMax: time.Hour})
	first := <-results
	require.Equal(t, 500, first.StatusCode)
	_, err := b.pool.Exec(ctx, `UPDATE webhook_deliveries SET state = 'failed', finished_at = now() WHERE event_id = $1`, ev.ID)
	require.NoError(t, err)

	ok.Store(true)
	done, err := webhooks.Redeliver(ctx, b.pool, webhooks.Redelivery{TenantID: b.tenant, EventID: ev.ID, By: webhooks.ByTenant, Via: webhooks.ViaAPI})
	require.NoError(t, err)
	require.Equal(t, []string{ep.ID}, done.Endpoints)
	select {
	case again := <-results:
		require.Equal(t, 200, again.StatusCode)
		require.Equal(t, 2, again.Attempt, "numbered on from the last attempt")
		require.Equal(t, "succeeded", again.State)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the redelivered delivery was not attempted")
	}
}
