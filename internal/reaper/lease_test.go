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
	time.Sleep(1100 * time.Millisecond) // the abandoned leases run out (real clock from here on)

	counter, client := newSlowPSP(t, b.Mock, 300*time.Millisecond)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		completed int
	)
	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs [2]error // each reaper's, asserted on this goroutine
	for i := range errs {
		pool := testdb.Pool(t, b.URL, time.Time{})
		svc := chargestest.NewService(t, pool, b.Keys, client, phases.Config{})
		r, err := reaper.New(pool, b.Keys, svc, reaper.Config{BatchSize: n, Parallelism: 4})
		require.NoError(t, err)
		wg.Go(func() {
			for runCtx.Err() == nil {
				res, err := r.RunOnce(runCtx)
				if runCtx.Err() != nil {
					return
				}
				if err != nil {
					errs[i] = err
					return
				}
				mu.Lock()
				completed += res.Completed
				mu.Unlock()
				var started int
				if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state = 'started'`).Scan(&started); err != nil {
					errs[i] = err
					return
				}
				if started == 0 {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
	require.NoError(t, runCtx.Err(), "the reapers did not finish the keys")

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
