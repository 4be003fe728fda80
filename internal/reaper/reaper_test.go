package reaper_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/internal/timeline"
)

// Every reaper, deliverer, pool, server and client a test starts is
// stopped by its cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func setup(t *testing.T) *chargestest.Bundle {
	t.Helper()
	return chargestest.Setup(t, idempotency.Config{RetryBase: time.Minute})
}

// abandon makes an API worker die at the given point of key's request.
func abandon(t *testing.T, b *chargestest.Bundle, key string, oneCommit bool, at phases.CrashPoint) {
	t.Helper()
	req, _ := chargestest.Request(t, fmt.Sprintf(`{"amount":%d,"currency":"usd","payment_method":"pm_card_visa"}`, 100+len(key)))
	svc := b.Service(t, 0, phases.Config{OneCommitPerPhase: oneCommit, CrashHook: phasestest.CrashAt(at)})
	_, err := svc.Create(context.Background(), b.Tenant, key, phases.Parsed(req))
	require.ErrorIs(t, err, phasestest.ErrCrash)
}

// newReaper returns a reaper whose database clock stands at T0+offset.
func newReaper(t *testing.T, b *chargestest.Bundle, offset time.Duration) *reaper.Reaper {
	t.Helper()
	pool := testdb.Pool(t, b.URL, b.T0.Add(offset))
	r, err := reaper.New(pool, b.Keys, chargestest.NewService(t, pool, b.Keys, b.PSP, phases.Config{}), reaper.Config{})
	require.NoError(t, err)
	return r
}

func assertDoneOnce(t *testing.T, b *chargestest.Bundle, key string) {
	t.Helper()
	rec, err := b.Keys.Lookup(context.Background(), b.Pool, b.Tenant, key)
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State, key)
	ids := b.ChargeIDs(t, key)
	require.Len(t, ids, 1, key)
	require.Len(t, b.AuthorizationsFor(ids[0]), 1, "authorizations of %s", key)
}

// A worker killed after each recovery point is completed by the reaper with
// one charge row and one PSP authorization, and the client's retry is then a
// replay of the reaper's response.
func TestReaperCompletesAbandonedKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		oneCommit bool
		at        phases.CrashPoint
	}{
		{false, phases.CrashAfterClaim},
		{false, phases.CrashAfterCall},
		{true, phases.CrashAfterClaim},
		{true, charges.CrashAfterChargeCreated},
		{true, phases.CrashAfterCall},
		{true, charges.CrashAfterPSPAuthorized},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("one_commit=%v/%s", tt.oneCommit, tt.at), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			abandon(t, b, "k", tt.oneCommit, tt.at)

			// Not before the lease ran out.
			res, err := newReaper(t, b, 30*time.Second).RunOnce(ctx)
			require.NoError(t, err)
			require.Zero(t, res.Completed)

			res, err = newReaper(t, b, b.Keys.Lease()+time.Second).RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Completed)
			require.Zero(t, res.Failed)
			require.Zero(t, res.Stuck)
			assertDoneOnce(t, b, "k")

			rec, err := b.Keys.Lookup(ctx, b.Pool, b.Tenant, "k")
			require.NoError(t, err)
			require.Equal(t, 201, rec.Response.Status)
			require.EqualValues(t, 2, rec.LockVersion)
		})
	}
}

// Three reapers at once over many abandoned keys: SKIP LOCKED and the
// fencing token make each key completed exactly once, each charge
// authorized once.
func TestSeveralReapersCompleteEachKeyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	points := []phases.CrashPoint{phases.CrashAfterClaim, phases.CrashAfterCall}
	const n = 40
	for i := range n {
		abandon(t, b, fmt.Sprintf("k%02d", i), false, points[i%2])
	}

	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		completed, failed int
		errs              [3]error // each reaper's, asserted on this goroutine
	)
	for i := range errs {
		r := newReaper(t, b, b.Keys.Lease()+time.Second)
		wg.Go(func() {
			for range 5 {
				res, err := r.RunOnce(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				mu.Lock()
				completed += res.Completed
				failed += res.Failed
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
	require.Zero(t, failed)
	require.Equal(t, n, completed)
	for i := range n {
		assertDoneOnce(t, b, fmt.Sprintf("k%02d", i))
	}
	require.Len(t, b.Mock.Authorizations(), n)
}

// A PSP that is still down leaves the key resumable, with a backoff so the
// reaper does not hammer it, and counted as waiting, not stuck; once the
// PSP is back and the backoff over, the key is completed.
func TestReaperBacksOffWhilePSPFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	abandon(t, b, "k", false, phases.CrashAfterClaim)
	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))

	later := b.Keys.Lease() + time.Second
	res, err := newReaper(t, b, later).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Failed)
	require.Zero(t, res.Stuck)
	require.EqualValues(t, 1, res.Census.Waiting)

	// Within the backoff: left alone, still counted as waiting.
	res, err = newReaper(t, b, later+30*time.Second).RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Failed+res.Completed)
	require.Zero(t, res.Stuck)
	require.EqualValues(t, 1, res.Census.Waiting)

	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{}))
	res, err = newReaper(t, b, later+2*time.Minute).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)
	require.Zero(t, res.Stuck)
	assertDoneOnce(t, b, "k")
}

// The stuck-keys alert fired during every PSP outage longer than its 5
// minutes, because a key waiting for its scheduled attempt counted as
// stuck. Stuck means overdue: due for longer than OverdueAfter and not
// picked up. A key in its backoff is waiting, whatever the outage's
// length; the same key left due past OverdueAfter (no reaper ran) is
// overdue; a key given up (GIVE_UP_AFTER) is needs_attention, and neither.
// The gauges carry the same numbers.
func TestPSPOutageIsNotCountedAsStuck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	abandon(t, b, "k", false, phases.CrashAfterClaim)
	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))

	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	at := func(offset time.Duration) *reaper.Reaper {
		pool := testdb.Pool(t, b.URL, b.T0.Add(offset))
		r, err := reaper.New(pool, b.Keys, chargestest.NewService(t, pool, b.Keys, b.PSP, phases.Config{}),
			reaper.Config{OverdueAfter: 10 * time.Second, Meter: meter})
		require.NoError(t, err)
		return r
	}
	gauges := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		out := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				g, ok := m.Data.(metricdata.Gauge[int64])
				if !ok {
					continue
				}
				for _, dp := range g.DataPoints {
					name := m.Name
					if v, ok := dp.Attributes.Value("phasepay.schedule"); ok {
						name += "/" + v.AsString()
					}
					out[name] = dp.Value
				}
			}
		}
		return out
	}

	// The outage: the reaper's attempt fails and the key waits a minute
	// (RetryBase) for the next one; half an hour later it is still only
	// waiting between attempts.
	later := b.Keys.Lease() + time.Second
	res, err := at(later).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Failed)
	require.Equal(t, idempotency.Census{Waiting: 1}, res.Census)
	for range 5 {
		later += 30 * time.Minute // past any backoff: the pass takes it, fails again
		res, err = at(later).RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Stuck)
		require.EqualValues(t, 1, res.Census.Waiting)
	}
	g := gauges()
	require.EqualValues(t, 0, g["phasepay.idempotency.stuck_keys"])
	require.EqualValues(t, 1, g["phasepay.idempotency.unfinished_keys/waiting"])
	require.EqualValues(t, 0, g["phasepay.idempotency.unfinished_keys/overdue"])
	require.EqualValues(t, 0, g["phasepay.idempotency.needs_attention_keys"])

	// No reaper for two hours: the key is overdue, which is stuck.
	c, err := b.Keys.TakeCensus(ctx, testdb.Pool(t, b.URL, b.T0.Add(later+2*time.Hour)), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, idempotency.Census{Overdue: 1, OverdueMaxAttempts: 6}, c)

	// Past GIVE_UP_AFTER (72h) the next failed attempt gives it up, and
	// writes its request.needs_attention event into that day's partition,
	// which the webhook deliverer's maintenance keeps ahead in the reaper
	// process (the reaper's pass alone no longer makes it).
	_, err = events.EnsurePartitions(ctx, testdb.Pool(t, b.URL, b.T0.Add(73*time.Hour)))
	require.NoError(t, err)
	res, err = at(73 * time.Hour).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, idempotency.Census{NeedsAttention: 1}, res.Census)
	g = gauges()
	require.EqualValues(t, 1, g["phasepay.idempotency.needs_attention_keys"])
	require.EqualValues(t, 0, g["phasepay.idempotency.stuck_keys"])
	require.EqualValues(t, 0, g["phasepay.idempotency.unfinished_keys/waiting"])
}

// Partition maintenance runs in one reaper at a time.
func TestMaintenanceRunsInOneReaper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	holder, err := b.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, 0x70700004)
	require.NoError(t, err)

	_, maintained, err := newReaper(t, b, 20*24*time.Hour).Maintenance().RunOnce(ctx)
	require.NoError(t, err)
	require.False(t, maintained)

	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, 0x70700004)
	require.NoError(t, err)
	res, maintained, err := newReaper(t, b, 20*24*time.Hour).Maintenance().RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, maintained)
	require.Equal(t, idempotency.PartitionsAhead+1, res.Created)
	ahead, err := idempotency.DaysAhead(ctx, testdb.Pool(t, b.URL, b.T0.Add(20*24*time.Hour)))
	require.NoError(t, err)
	require.Equal(t, idempotency.PartitionsAhead, ahead)
	require.NotEmpty(t, res.Partitions.Dropped, "the real days' partitions are past retention by the moved clock")
}

func TestRetentionMustExceedLease(t *testing.T) {
	t.Parallel()
	keys, err := idempotency.NewStore(idempotency.Config{Lease: time.Hour})
	require.NoError(t, err)
	_, err = reaper.New(nil, keys, nil, reaper.Config{Retention: 30 * time.Minute})
	require.ErrorContains(t, err, "must exceed LEASE")
}

func TestRunStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := newReaper(t, b, 0)
	r.TestSignals.Init(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.NotNil(t, r.TestSignals.PassDone.WaitOrTimeout(), "the first pass failed")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// The timeline of a request whose api worker died right after the claim
// and which the reaper finished: claimed and reached by the api process,
// taken over by the reaper, the PSP call and the finish by the reaper, in
// that order, each with its holder and lock_version; the event the finish
// wrote follows it. The reaper logs the takeover and the completion at
// INFO with the tenant's name, the key and the charge.
func TestTimelineShowsTheReapersTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	abandon(t, b, "taken", false, phases.CrashAfterClaim)

	keys, err := idempotency.NewStore(idempotency.Config{Lease: b.Keys.Lease(), Role: idempotency.RoleReaper})
	require.NoError(t, err)
	var logs bytes.Buffer
	pool := testdb.Pool(t, b.URL, b.T0.Add(b.Keys.Lease()+time.Second))
	r, err := reaper.New(pool, keys, chargestest.NewService(t, pool, keys, b.PSP, phases.Config{}),
		reaper.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.NoError(t, err)
	res, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)
	chargeID := b.ChargeIDs(t, "taken")[0]

	tl, err := timeline.Read(ctx, b.Pool, b.Tenant, "taken")
	require.NoError(t, err)
	type step struct {
		kind        idempotency.Kind
		holder      string
		lockVersion int64
	}
	var got []step
	for _, e := range tl.Entries {
		got = append(got, step{e.Kind, e.Holder, e.LockVersion})
	}
	api, reaperHolder := b.Keys.Holder(), keys.Holder()
	require.Equal(t, []step{
		{idempotency.KindClaimed, api, 1},
		{idempotency.KindReached, api, 1},
		{idempotency.KindTakenOver, reaperHolder, 2},
		{idempotency.KindPSPCall, reaperHolder, 2},
		{idempotency.KindFinished, reaperHolder, 2},
		{timeline.KindEvent, "", 0},
	}, got)
	e := tl.Entries
	require.Equal(t, charges.PointChargeCreated, e[1].RecoveryPoint)
	require.Equal(t, idempotency.RoleReaper, e[2].By)
	require.Equal(t, "success", e[3].Outcome)
	require.Equal(t, charges.PSPKey(chargeID), e[3].PSPKey)
	require.Equal(t, 1, *e[3].Lookups, "a takeover looks the charge up before it sends")
	require.Equal(t, 201, e[4].ResponseStatus)
	require.Equal(t, "charge.authorized", e[5].EventType)
	require.Equal(t, chargeID, tl.ObjectID)
	require.Empty(t, tl.Holder, "nobody holds a finished key")

	var lines []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m))
		if m["msg"] == "reaper took over request" || m["msg"] == "reaper completed request" {
			require.Equal(t, "INFO", m["level"])
			// Named as every other line and command names it (bin/api
			// requests show TENANT KEY), never by its internal id.
			require.Equal(t, "t", m["tenant"])
			require.NotContains(t, m, "tenant_id")
			require.Equal(t, "taken", m["key"])
			require.Equal(t, chargeID, m["object_id"])
			lines = append(lines, m)
		}
	}
	require.Len(t, lines, 2, "%s", logs.String())
	require.Equal(t, "reaper took over request", lines[0]["msg"])
	require.EqualValues(t, 201, lines[1]["response_status"])
}
