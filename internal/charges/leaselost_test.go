package charges_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// A worker whose lease was taken over while its PSP call was still
// retrying must stop sending: the key is the new holder's, and every send
// after the takeover is a request the new holder does not know of. The
// heartbeat that finds the lease gone stops the call, the PSP client's own
// quick retries included; the worker then answers only from what the key
// stores. Before, the heartbeat's loss was ignored and the client went on
// resending for the whole of its retry budget.
func TestLostLeaseStopsThePSPCallsRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := chargestest.Setup(t, idempotency.Config{Lease: time.Second}) // heartbeat every ⅓ s
	// Every send answered 503, every lookup answered (nothing found): the
	// client looks up, then sends again, for as long as its budget lasts.
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			sent.Add(1)
			http.Error(w, `{"error":{"code":"unavailable"}}`, http.StatusServiceUnavailable)
			return
		}
		b.Mock.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	// A long retry budget: 40 sends 100 ms apart, 4 s in all.
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: srv.URL, MaxAttempts: 40,
		InitialBackoff: 100 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	require.NoError(t, err)
	svc := chargestest.NewService(t, b.Pool, b.Keys, client, phases.Config{})
	t.Cleanup(svc.Wait)

	sends := func() int { return int(sent.Load()) }
	req, _ := chargestest.Request(t, visa)
	done := make(chan error, 1)
	go func() {
		_, err := svc.Create(ctx, b.Tenant, "k", phases.Parsed(req))
		done <- err
	}()
	require.Eventually(t, func() bool { return sends() > 0 }, 5*time.Second, 10*time.Millisecond)
	// A takeover, as another worker's would: the fencing token moves on.
	_, err = b.Pool.Exec(ctx, `UPDATE idempotency_keys SET lock_version = lock_version + 1 WHERE tenant_id = $1 AND key = 'k'`, b.Tenant)
	require.NoError(t, err)
	taken, before := time.Now(), sends()

	select {
	case err = <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("the worker kept calling the PSP for 3 s after its lease was taken over")
	}
	require.ErrorIs(t, err, idempotency.ErrInProgress, "a worker that lost its lease answers from the key alone")
	require.Less(t, time.Since(taken), 1500*time.Millisecond)
	require.LessOrEqual(t, sends()-before, 5, "sends after the takeover")
}
