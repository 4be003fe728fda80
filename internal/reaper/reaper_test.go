package reaper_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

var errCrash = errors.New("simulated crash")

type testBundle struct {
	url    string
	pool   *pgxpool.Pool
	keys   *idempotency.Store
	mock   *psp.Mock
	psp    *psp.Client
	tenant int64
	t0     time.Time
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url := testdb.NewURL(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	pool := testdb.Pool(t, url, t0)
	keys, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute, RetryBackoff: time.Minute})
	require.NoError(t, err)
	mock, err := psp.NewMock(psp.Faults{})
	require.NoError(t, err)
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: srv.URL, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	require.NoError(t, err)
	var tenant int64
	require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))
	return &testBundle{url: url, pool: pool, keys: keys, mock: mock, psp: client, tenant: tenant, t0: t0}
}

// abandon makes an API worker die at the given point of key's request.
func (b *testBundle) abandon(t *testing.T, key string, oneCommit bool, at charges.CrashPoint) {
	t.Helper()
	body := fmt.Sprintf(`{"amount":%d,"currency":"usd","payment_method":"pm_card_visa"}`, 100+len(key))
	req, err := idempotency.Canonicalize("POST", charges.Path, []byte(body))
	require.NoError(t, err)
	params, err := charges.ParseCreateParams([]byte(body))
	require.NoError(t, err)
	svc := newService(t, b.pool, b.keys, b.psp, charges.Config{
		OneCommitPerPhase: oneCommit,
		CrashHook: func(_ context.Context, p charges.CrashPoint) error {
			if p == at {
				return errCrash
			}
			return nil
		},
	})
	_, err = svc.Create(context.Background(), b.tenant, key, req, params)
	require.ErrorIs(t, err, errCrash)
}

// reaper returns a reaper whose database clock stands at t0+offset.
func (b *testBundle) reaper(t *testing.T, offset time.Duration) *reaper.Reaper {
	t.Helper()
	pool := testdb.Pool(t, b.url, b.t0.Add(offset))
	svc := newService(t, pool, b.keys, b.psp, charges.Config{})
	r, err := reaper.New(pool, b.keys, svc, reaper.Config{})
	require.NoError(t, err)
	return r
}

func (b *testBundle) assertDoneOnce(t *testing.T, key string) {
	t.Helper()
	ctx := context.Background()
	rec, err := b.keys.Lookup(ctx, b.pool, b.tenant, key)
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State, key)
	var chargeIDs []string
	rows, err := b.pool.Query(ctx, `SELECT id FROM charges WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenant, key)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		chargeIDs = append(chargeIDs, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, chargeIDs, 1, key)
	n := 0
	for _, a := range b.mock.Authorizations() {
		if a.Reference == chargeIDs[0] {
			n++
		}
	}
	require.Equal(t, 1, n, "authorizations of %s", key)
}

// A worker killed after each recovery point is completed by the reaper with
// one charge row and one PSP authorization, and the client's retry is then a
// replay of the reaper's response.
func TestReaperCompletesAbandonedKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		oneCommit bool
		at        charges.CrashPoint
	}{
		{false, charges.CrashAfterClaim},
		{false, charges.CrashAfterPSPCall},
		{true, charges.CrashAfterClaim},
		{true, charges.CrashAfterChargeCreated},
		{true, charges.CrashAfterPSPCall},
		{true, charges.CrashAfterPSPAuthorized},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("one_commit=%v/%s", tt.oneCommit, tt.at), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.abandon(t, "k", tt.oneCommit, tt.at)

			// Not before the lease ran out.
			res, err := b.reaper(t, 30*time.Second).RunOnce(ctx)
			require.NoError(t, err)
			require.Zero(t, res.Completed)

			res, err = b.reaper(t, b.keys.Lease()+time.Second).RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Completed)
			require.Zero(t, res.Failed)
			require.Zero(t, res.Stuck)
			b.assertDoneOnce(t, "k")

			rec, err := b.keys.Lookup(ctx, b.pool, b.tenant, "k")
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
	points := []charges.CrashPoint{charges.CrashAfterClaim, charges.CrashAfterPSPCall}
	const n = 40
	for i := range n {
		b.abandon(t, fmt.Sprintf("k%02d", i), false, points[i%2])
	}

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		completed int
	)
	for range 3 {
		r := b.reaper(t, b.keys.Lease()+time.Second)
		wg.Go(func() {
			for range 5 {
				res, err := r.RunOnce(ctx)
				require.NoError(t, err)
				mu.Lock()
				completed += res.Completed
				require.Zero(t, res.Failed)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, n, completed)
	for i := range n {
		b.assertDoneOnce(t, fmt.Sprintf("k%02d", i))
	}
	require.Len(t, b.mock.Authorizations(), n)
}

// A PSP that is still down leaves the key resumable, with a backoff so the
// reaper does not hammer it, and counted as stuck; once the PSP is back and
// the backoff over, the key is completed.
func TestReaperBacksOffWhilePSPFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.abandon(t, "k", false, charges.CrashAfterClaim)
	require.NoError(t, b.mock.SetFaults(psp.Faults{ErrorRate: 1}))

	later := b.keys.Lease() + time.Second
	res, err := b.reaper(t, later).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Failed)
	require.EqualValues(t, 1, res.Stuck)

	// Within the backoff: left alone, still counted.
	res, err = b.reaper(t, later+30*time.Second).RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Failed+res.Completed)
	require.EqualValues(t, 1, res.Stuck)

	require.NoError(t, b.mock.SetFaults(psp.Faults{}))
	res, err = b.reaper(t, later+2*time.Minute).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)
	require.Zero(t, res.Stuck)
	b.assertDoneOnce(t, "k")
}

// Partition maintenance runs in one reaper at a time.
func TestMaintenanceRunsInOneReaper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	holder, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, 0x70700004)
	require.NoError(t, err)

	res, err := b.reaper(t, 20*24*time.Hour).RunOnce(ctx)
	require.NoError(t, err)
	require.False(t, res.Maintained)

	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, 0x70700004)
	require.NoError(t, err)
	res, err = b.reaper(t, 20*24*time.Hour).RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, res.Maintained)
	require.Equal(t, idempotency.PartitionsAhead+1, res.Created)
	ahead, err := idempotency.DaysAhead(ctx, testdb.Pool(t, b.url, b.t0.Add(20*24*time.Hour)))
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
	r := b.reaper(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func newService(t *testing.T, pool *pgxpool.Pool, keys *idempotency.Store, a charges.Authorizer, cfg charges.Config) *charges.Service {
	t.Helper()
	svc, err := charges.NewService(pool, keys, a, cfg)
	require.NoError(t, err)
	return svc
}
