package reaper_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/testsignal"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// slowPSP is the mock PSP behind a delay, counting the authorizations
// (POSTs) it receives per charge.
type slowPSP struct {
	mu    sync.Mutex
	posts map[string]int
}

func newSlowPSP(t *testing.T, mock http.Handler, delay time.Duration) (*slowPSP, *psp.Client) {
	t.Helper()
	s := &slowPSP{posts: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/authorizations") {
			charge, _, _ := strings.Cut(r.Header.Get("Idempotency-Key"), ":")
			s.mu.Lock()
			s.posts[charge]++
			s.mu.Unlock()
		}
		if !strings.HasPrefix(r.URL.Path, "/_admin") {
			// sleep: the PSP must be slow by the real clock the leases run out on.
			time.Sleep(delay)
		}
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: srv.URL, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	require.NoError(t, err)
	return s, client
}

// A reaper that took over 20 keys (its batch) but drove 4 at a time held
// the queued ones without a heartbeat: their leases ran out in the queue,
// a second reaper took them over, and both called the PSP for them (32
// requests for 20 keys), each counting the key as completed. A reaper now
// takes over only as many keys as it has idle driving slots. With two
// reapers and a PSP slow enough that a queue would outlast the lease, each
// charge is sent to the PSP once and each key counted completed once.
func TestReaperLeasesOnlyWhatItDrives(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := chargestest.Setup(t, idempotency.Config{Lease: time.Second, RetryBase: time.Minute})
	const n = 20
	for i := range n {
		abandon(t, b, fmt.Sprintf("k%02d", i), false, phases.CrashAfterClaim)
	}
	// The abandoned leases run out: moved into the past, not waited out.
	_, err := b.Pool.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE state = 'started'`)
	require.NoError(t, err)

	counter, client := newSlowPSP(t, b.Mock, 300*time.Millisecond)
	var reapers [2]*reaper.Reaper
	for i := range reapers {
		pool := testdb.Pool(t, b.URL, time.Time{}) // the real clock
		svc := chargestest.NewService(t, pool, b.Keys, client, phases.Config{})
		r, err := reaper.New(pool, b.Keys, svc, reaper.Config{BatchSize: n, Parallelism: 4, Interval: 50 * time.Millisecond})
		require.NoError(t, err)
		r.TestSignals.Init(t)
		reapers[i] = r
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make([]error, len(reapers)) // each reaper's, asserted on this goroutine
	for i, r := range reapers {
		wg.Go(func() { errs[i] = r.Run(runCtx) })
	}
	testsignal.WaitFor(t, 30*time.Second, func() bool {
		var started int
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state = 'started'`).Scan(&started))
		return started == 0
	}, "the reapers did not finish the keys")
	// Every pass that drove a key has ended by the first pass of each
	// reaper to end from here on.
	completed := 0
	for _, r := range reapers {
		for res, ok := r.TestSignals.PassDone.Next(); ok; res, ok = r.TestSignals.PassDone.Next() {
			require.NotNil(t, res, "a pass failed")
			completed += res.Completed
		}
		res := r.TestSignals.PassDone.WaitOrTimeout()
		require.NotNil(t, res, "a pass failed")
		completed += res.Completed
	}
	cancel()
	wg.Wait()
	require.NoError(t, errors.Join(errs...))

	for i := range n {
		assertDoneOnce(t, b, fmt.Sprintf("k%02d", i))
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	require.Len(t, counter.posts, n)
	for charge, posts := range counter.posts {
		require.Equal(t, 1, posts, "authorizations sent for %s", charge)
	}
	require.Equal(t, n, completed, "completions counted")
}
