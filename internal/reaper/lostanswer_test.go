package reaper_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/pgfault"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// A reaper's batch takeover whose answer was lost after it committed (the
// connection dropped on the way back) held every key it took for a whole
// lease: the reaper drove none of them, and the client's retries got 409,
// as did every other reaper, until the leases ran out. The reaper now
// releases them once the database answers, without counting an attempt,
// by the token its batch wrote: never a lease someone took after it.
func TestLostBatchTakeoverAnswerReleasesTheLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const key = "a-key-the-batch-took"
	abandon(t, b, key, false, phases.CrashAfterClaim)

	// Past the abandoned lease: a reaper takes the key over, and the
	// answer that names it is lost.
	proxy, proxied := pgfault.New(t, b.URL)
	pool := testdb.Pool(t, proxied, b.T0.Add(2*time.Minute))
	r, err := reaper.New(pool, b.Keys, chargestest.NewService(t, pool, b.Keys, b.PSP, phases.Config{}), reaper.Config{})
	require.NoError(t, err)
	proxy.Arm(pgfault.Fault{Marker: []byte(key), InAnswer: true})
	_, err = r.RunOnce(ctx)
	require.Error(t, err)
	require.True(t, dbstate.Unavailable(err), "%v", err)
	<-proxy.Hit()
	r.Wait()

	rec, err := b.Keys.Lookup(ctx, b.PoolAt(t, 2*time.Minute), b.Tenant, key)
	require.NoError(t, err)
	require.EqualValues(t, 2, rec.LockVersion, "the batch committed though its answer was lost")
	require.False(t, rec.Leased, "the lost batch's lease was not released")
	require.Zero(t, rec.Attempts, "a lost answer is not an attempt")

	req, _ := chargestest.Request(t, fmt.Sprintf(`{"amount":%d,"currency":"usd","payment_method":"pm_card_visa"}`, 100+len(key)))
	res, err := b.Service(t, 2*time.Minute, phases.Config{}).Create(ctx, b.Tenant, key, phases.Parsed(req))
	require.NoError(t, err, "the client's retry is not kept waiting for the lease")
	require.Equal(t, phases.OutcomeTakeover, res.Outcome)
	require.Equal(t, http.StatusCreated, res.Response.Status)
}
