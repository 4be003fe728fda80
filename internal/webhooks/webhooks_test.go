package webhooks_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// Every reaper, deliverer, pool, server and client a test starts is
// stopped by its cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type bundle struct {
	pool   *pgxpool.Pool
	url    string
	tenant int64
}

func setup(t *testing.T) bundle {
	t.Helper()
	url := testdb.NewURL(t)
	pool := testdb.Pool(t, url, time.Time{})
	var tenant int64
	require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))
	return bundle{pool: pool, url: url, tenant: tenant}
}

func (b bundle) endpoint(t *testing.T, url string, list ...string) webhooks.Endpoint {
	t.Helper()
	if len(list) == 0 {
		list = []string{"*"}
	}
	ep, err := webhooks.Create(context.Background(), b.pool, b.tenant, url, list)
	require.NoError(t, err)
	return ep
}

func (b bundle) event(t *testing.T, typ events.Type) events.Event {
	t.Helper()
	ev, err := events.Write(context.Background(), b.pool, b.tenant, typ, []byte(`{"id":"ch_x","object":"charge"}`))
	require.NoError(t, err)
	return ev
}

// run starts a deliverer until the test ends; every recorded attempt is
// sent on the returned channel.
func (b bundle) run(t *testing.T, cfg webhooks.DelivererConfig) <-chan webhooks.Result {
	t.Helper()
	_, results := b.runDeliverer(t, cfg)
	return results
}

// runDeliverer is run, returning the deliverer too, its test signals armed.
func (b bundle) runDeliverer(t *testing.T, cfg webhooks.DelivererConfig) (*webhooks.Deliverer, <-chan webhooks.Result) {
	t.Helper()
	cfg.Interval = 50 * time.Millisecond
	d, err := webhooks.NewDeliverer(b.pool, cfg)
	require.NoError(t, err)
	d.TestSignals.Init(t)
	results := make(chan webhooks.Result, 1000)
	d.TestAttemptDone = func(r webhooks.Result) {
		select {
		case results <- r:
		default: // a test that reads none must not stall the deliverer's shutdown
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return d, results
}

// waitCapped waits for d to take every delivery its caps let it take: a
// pass that started attempts, then one that started none although
// deliveries are still due.
func waitCapped(d *webhooks.Deliverer) {
	for d.TestSignals.PassDone.WaitOrTimeout() == 0 {
	}
	for d.TestSignals.PassDone.WaitOrTimeout() > 0 {
	}
}

type received struct {
	body      []byte
	signature string
}

// receiver is a real HTTP endpoint that answers with status(n) its n-th
// request (from 1) and reports every request.
func receiver(t *testing.T, status func(n int) int) (*httptest.Server, <-chan received) {
	t.Helper()
	ch := make(chan received, 1000)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ch <- received{body: body, signature: r.Header.Get(webhooks.SignatureHeader)}
		w.WriteHeader(status(int(n.Add(1))))
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

func ok(int) int { return http.StatusOK }

func wait[T any](t *testing.T, ch <-chan T, within time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("nothing within %s", within)
	}
	panic("unreachable")
}

// A delivery carries the event's stored body, byte for byte, signed with
// the endpoint's whole whsec_ secret over "<t>.<body>", and arrives within
// 2 s of the commit.
func TestDeliveryIsSignedAndByteIdentical(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, got := receiver(t, ok)
	ep := b.endpoint(t, srv.URL)
	require.True(t, strings.HasPrefix(ep.Secret, "whsec_"))
	results := b.run(t, webhooks.DelivererConfig{AllowPrivate: true})
	committed := time.Now()
	ev := b.event(t, events.ChargeAuthorized)

	r := wait(t, got, 2*time.Second)
	require.Less(t, time.Since(committed), 2*time.Second)
	require.Equal(t, ev.Body, r.body)
	ts, _, found := strings.Cut(strings.TrimPrefix(r.signature, "t="), ",")
	require.True(t, found, r.signature)
	var unix int64
	_, err := fmt.Sscan(ts, &unix)
	require.NoError(t, err)
	require.Equal(t, webhooks.Sign(ep.Secret, time.Unix(unix, 0), r.body), r.signature)
	require.Equal(t, "succeeded", wait(t, results, 2*time.Second).State)

	ds, err := webhooks.Deliveries(context.Background(), b.pool, b.tenant, ev.ID)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "succeeded", ds[0].State)
	require.Len(t, ds[0].Attempts, 1)
	require.Equal(t, 200, ds[0].Attempts[0].StatusCode)
}

// The signature's test vector, as docs/api.md publishes it (checked
// independently: printf %s "1700000000.<body>" | openssl dgst -sha256 -hmac whsec_test).
func TestSignatureTestVector(t *testing.T) {
	t.Parallel()
	got := webhooks.Sign("whsec_test", time.Unix(1700000000, 0), []byte(`{"id":"evt_1","object":"event"}`))
	require.Equal(t, "t=1700000000,v1=4c15fb2a43f93ef61eaa3e0893866d57cad9cad4223242cfb96f362480cb4021", got)
}

// A failed attempt (non-2xx) is retried on the schedule until one succeeds,
// and every attempt is recorded with its status, latency and error.
func TestFailedDeliveryIsRetriedOnTheSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, _ := receiver(t, func(n int) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	b.endpoint(t, srv.URL)
	results := b.run(t, webhooks.DelivererConfig{AllowPrivate: true, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	ev := b.event(t, events.ChargeDeclined)
	require.Equal(t, "pending", wait(t, results, 3*time.Second).State)
	require.Equal(t, "pending", wait(t, results, 3*time.Second).State)
	require.Equal(t, "succeeded", wait(t, results, 3*time.Second).State)
	ds, err := webhooks.Deliveries(context.Background(), b.pool, b.tenant, ev.ID)
	require.NoError(t, err)
	require.Len(t, ds[0].Attempts, 3)
	require.Equal(t, []int{500, 500, 204}, []int{ds[0].Attempts[0].StatusCode, ds[0].Attempts[1].StatusCode, ds[0].Attempts[2].StatusCode})
	require.Equal(t, "endpoint answered 500", ds[0].Attempts[0].Error)
}

// A delivery still failing GiveUpAfter after its event was written is
// given up (failed), not retried forever.
func TestDeliveryGivenUpAfterThreeDays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, _ := receiver(t, func(int) int { return http.StatusBadGateway })
	b.endpoint(t, srv.URL)
	// Written three days ago, by the database's clock.
	past := testdb.Pool(t, b.url, time.Now().Add(-72*time.Hour-time.Minute))
	_, err := events.EnsurePartitions(context.Background(), past)
	require.NoError(t, err)
	ev, err := events.Write(context.Background(), past, b.tenant, events.ChargeFailed, []byte(`{}`))
	require.NoError(t, err)
	results := b.run(t, webhooks.DelivererConfig{AllowPrivate: true})
	r := wait(t, results, 3*time.Second)
	require.Equal(t, ev.ID, r.EventID)
	require.Equal(t, "failed", r.State)
	backlog, err := webhooks.Backlog(context.Background(), b.pool)
	require.NoError(t, err)
	require.Zero(t, backlog.Pending)
}

// A slow endpoint (it never answers within the timeout) holds at most
// PerEndpoint attempts; another endpoint's events go out meanwhile.
func TestSlowEndpointDelaysNoOtherEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	b.endpoint(t, slow.URL)
	for range 10 {
		b.event(t, events.ChargeAuthorized)
	}
	d, _ := b.runDeliverer(t, webhooks.DelivererConfig{AllowPrivate: true, Parallelism: 4, PerEndpoint: 2, PerHost: 4, Timeout: 5 * time.Second, Lease: 10 * time.Second})
	waitCapped(d) // the slow endpoint holds all it may

	srv, got := receiver(t, ok)
	b.endpoint(t, srv.URL)
	start := time.Now()
	ev := b.event(t, events.ChargeAuthorized)
	r := wait(t, got, 2*time.Second)
	require.Equal(t, ev.Body, r.body)
	require.Less(t, time.Since(start), time.Second)
}

// An endpoint receives only events written after it was created, and none
// written after its DELETE answered; a delivery queued before the DELETE
// still goes out.
func TestEndpointGetsOnlyEventsOfItsLifetime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	before := b.event(t, events.ChargeAuthorized)
	srv, got := receiver(t, ok)
	ep := b.endpoint(t, srv.URL, "charge.authorized")
	during := b.event(t, events.ChargeAuthorized)
	b.event(t, events.ChargeDeclined) // not subscribed
	_, err := webhooks.Delete(ctx, b.pool, b.tenant, ep.ID)
	require.NoError(t, err)
	after := b.event(t, events.ChargeAuthorized)
	_, err = webhooks.Delete(ctx, b.pool, b.tenant, ep.ID)
	require.ErrorIs(t, err, webhooks.ErrNotFound)

	var queued []string
	rows, err := b.pool.Query(ctx, `SELECT event_id FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		queued = append(queued, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{during.ID}, queued, "before %s, after %s", before.ID, after.ID)

	b.run(t, webhooks.DelivererConfig{AllowPrivate: true})
	require.Equal(t, during.Body, wait(t, got, 2*time.Second).body)
}

// The URL guard: http(s) only, and every address the host resolves to
// must be public, unless WEBHOOK_ALLOW_PRIVATE (every range: see
// TestSpecialPurposeAddressesAreRefused).
func TestPrivateWebhookAddressesAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	strict, lax := webhooks.NewGuard(false), webhooks.NewGuard(true)
	for _, u := range []string{"http://127.0.0.1:8080/", "http://localhost/", "http://10.1.2.3/", "http://192.168.0.1/",
		"http://172.16.0.1/", "http://169.254.169.254/latest", "http://[::1]/", "http://[fe80::1]/", "http://[fc00::1]/",
		"http://[::ffff:127.0.0.1]/", "http://0.0.0.0/", "http://100.64.0.1/"} {
		host, err := webhooks.ParseURL(u)
		require.NoError(t, err, u)
		err = strict.CheckHost(ctx, host)
		require.ErrorIs(t, err, webhooks.ErrInvalid, u)
		require.ErrorIs(t, err, webhooks.ErrNotPublic, u)
		require.ErrorContains(t, err, "WEBHOOK_ALLOW_PRIVATE", "the 400 names the setting a developer needs")
		require.NoError(t, lax.CheckHost(ctx, host), u)
	}
	for _, u := range []string{"ftp://93.184.216.34/", "93.184.216.34", "http:///x", "http://u:p@93.184.216.34/", "mailto:x@y"} {
		_, err := webhooks.ParseURL(u)
		require.ErrorIs(t, err, webhooks.ErrInvalid, u)
	}
	host, err := webhooks.ParseURL("https://93.184.216.34/hooks")
	require.NoError(t, err)
	require.NoError(t, strict.CheckHost(ctx, host))
	require.True(t, webhooks.Public(netip.MustParseAddr("8.8.8.8")))
}

// The guard holds at delivery time too: an endpoint whose address is (now)
// private is never connected to, whatever it resolved to when created
// (DNS rebinding).
func TestDeliveryRechecksTheAddressAtConnectTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	b.endpoint(t, srv.URL) // stored as if it had passed the check
	results := b.run(t, webhooks.DelivererConfig{})
	b.event(t, events.ChargeAuthorized)
	r := wait(t, results, 3*time.Second)
	require.Equal(t, "pending", r.State)
	require.Equal(t, "host does not resolve to a public address", r.Err)
	require.Zero(t, hits.Load())
}

// Several deliverers share the outbox: every event reaches the endpoint,
// and a delivery a crashed deliverer held is taken over once its lease
// runs out.
func TestConcurrentDeliverersLoseNoDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	srv, got := receiver(t, ok)
	b.endpoint(t, srv.URL)
	var want []string
	for range 20 {
		want = append(want, b.event(t, events.ChargeAuthorized).ID)
	}
	// A deliverer took the first delivery and died: its lease is running.
	tag, err := b.pool.Exec(ctx, `UPDATE webhook_deliveries SET lock_version = lock_version + 1,
		locked_until = phasepay_now() + interval '1 second' WHERE event_id = $1`, want[0])
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	for range 3 {
		b.run(t, webhooks.DelivererConfig{AllowPrivate: true, Parallelism: 4})
	}
	seen := map[string]bool{}
	var mu sync.Mutex
	deadline := time.After(5 * time.Second)
	for len(seen) < len(want) {
		select {
		case r := <-got:
			var id string
			_, rest, _ := strings.Cut(string(r.body), `"id":"`)
			id, _, _ = strings.Cut(rest, `"`)
			mu.Lock()
			seen[id] = true
			mu.Unlock()
		case <-deadline:
			t.Fatalf("delivered %d of %d", len(seen), len(want))
		}
	}
	for _, id := range want {
		require.True(t, seen[id], id)
	}
}

// The backlog gauges: a delivery due and not taken shows its wait in
// DueDelay, the alarm; one waiting for its next attempt does not.
func TestBacklogMeasuresDueDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "http://127.0.0.1:9/")
	b.event(t, events.ChargeAuthorized)
	tenMinutesOn := testdb.Pool(t, b.url, time.Now().Add(10*time.Minute))
	backlog, err := webhooks.Backlog(ctx, tenMinutesOn)
	require.NoError(t, err)
	require.EqualValues(t, 1, backlog.Pending)
	require.InDelta(t, 600, backlog.DueDelay, 5)
	require.InDelta(t, 600, backlog.OldestAge, 5)

	_, err = b.pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = now() + interval '1 hour'`)
	require.NoError(t, err)
	backlog, err = webhooks.Backlog(ctx, tenMinutesOn)
	require.NoError(t, err)
	require.Zero(t, backlog.DueDelay)
}

// A DELETE that races an event transaction: it waits for the transaction
// in flight (whose event was then written before DELETE answered and is
// delivered), and an event whose statement starts after DELETE committed is
// not queued for the endpoint.
func TestDeleteWaitsForEventsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ep := b.endpoint(t, "http://127.0.0.1:9/")
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	inFlight, err := events.Write(ctx, tx, b.tenant, events.ChargeAuthorized, []byte(`{}`))
	require.NoError(t, err)

	deleted := make(chan error, 1)
	go func() {
		_, err := webhooks.Delete(ctx, b.pool, b.tenant, ep.ID)
		deleted <- err
	}()
	select {
	case err := <-deleted:
		t.Fatalf("DELETE answered (%v) while an event transaction that queued for the endpoint was in flight", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, wait(t, deleted, 5*time.Second))
	after := b.event(t, events.ChargeAuthorized)

	var queued []string
	rows, err := b.pool.Query(ctx, `SELECT event_id FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		queued = append(queued, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{inFlight.ID}, queued, "the event after DELETE (%s) must not be queued", after.ID)
}

// The endpoint list pages newest first, one page after the other, every
// live endpoint once: the first page's cursor is the 'infinity' sentinel,
// each next one the last endpoint of the page before.
func TestEndpointListPagesNewestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var created []string
	for i := range 3 {
		created = append([]string{b.endpoint(t, fmt.Sprintf("https://example.com/%d", i)).ID}, created...)
	}
	var paged []string
	after := ""
	for range len(created) + 1 {
		page, err := webhooks.List(ctx, b.pool, b.tenant, after, 1)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page[0].ID)
		after = page[0].ID
	}
	require.Equal(t, created, paged)
}
