package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/routing"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// loseClaim deletes what key's claim and its run committed, as a failover
// with asynchronous replication loses it: the key, its charge, the
// charge's attempts and events. The PSPs keep what they were sent.
func (w *routedWorld) loseClaim(t *testing.T, key string) {
	t.Helper()
	ctx := context.Background()
	ids := w.ChargeIDs(t, key)
	require.Len(t, ids, 1)
	for _, stmt := range []string{
		`DELETE FROM charge_attempts WHERE tenant_id = $1 AND charge_id = $2`,
		`DELETE FROM events WHERE tenant_id = $1 AND $2 <> ''`,
		`DELETE FROM charges WHERE tenant_id = $1 AND id = $2`,
	} {
		_, err := w.Pool.Exec(ctx, stmt, w.Tenant, ids[0])
		require.NoError(t, err)
	}
	for _, stmt := range []string{
		`DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
		`DELETE FROM idempotency_key_heads WHERE tenant_id = $1 AND key = $2`,
	} {
		_, err := w.Pool.Exec(ctx, stmt, w.Tenant, key)
		require.NoError(t, err)
	}
}

// openBreaker opens name's breaker in router: threshold (2) unknown
// outcomes in a row, from a PSP that answers 503, which then recovers. The
// breaker stays open for its cool-down (a minute).
func (w *routedWorld) openBreaker(t *testing.T, router *routing.Router, name string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, w.mocks[name].SetFaults(mockpsp.Faults{ErrorRate: 1}))
	for i := range 2 {
		_, err := router.AuthorizeOutcome(ctx, psp.AuthorizeRequest{PSP: name, IdempotencyKey: "probe:" + string(rune('a'+i)),
			FirstSend: true, Amount: 1, Currency: "usd", PaymentMethod: "pm_card_visa", Reference: "ch_probe"})
		require.ErrorIs(t, err, psp.ErrUnavailable)
	}
	require.Equal(t, routing.Open, router.BreakerState(name))
	require.NoError(t, w.mocks[name].SetFaults(mockpsp.Faults{}))
}

// A claim lost in a failover (asynchronous replication) after the PSP
// authorized its charge: the client's retry derives the same charge id
// (pitfall F2 "A claim lost in a failover"), but chose its PSP afresh, by
// the breakers of the process it reached. A process whose breaker for the
// first PSP was open sent the "new" charge to the second, which authorized
// the same intent again; a process that failed a refused charge over past
// an open breaker made it the third, its retry the second. The first
// attempt of a charge whose id is derived goes to its route's first PSP,
// and a refused one moves in the route's order, whatever a breaker says:
// the retry lands where the lost claim went, under the same PSP key, and
// the PSP answers it with its first answer.
func TestLostClaimIsNotRetriedAtAnotherPSP(t *testing.T) {
	t.Parallel()
	t.Run("first attempt", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newRoutedWorld(t, routedConfig{threshold: 2})
		req, _ := chargestest.Request(t, visa)
		first, err := chargestest.NewService(t, w.Pool, w.Keys, w.process(t), phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
		require.NoError(t, err)
		require.Equal(t, 201, first.Response.Status, string(first.Response.Body))
		id := chargeID(t, first.Response)
		require.Equal(t, []string{"primary"}, w.authorizedAt(id))

		w.loseClaim(t, "k")
		// The retry reaches a process that saw the primary fail meanwhile.
		other := w.process(t)
		w.openBreaker(t, other, "primary")
		_, err = chargestest.NewService(t, w.Pool, w.Keys, other, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
		require.ErrorIs(t, err, charges.ErrPSPUnavailable, "held back by the open breaker, never sent elsewhere")
		require.Equal(t, "primary", w.chargeOfKey(t, "k").PSP, "the retry derives the lost claim's charge, at the same PSP")
		require.Equal(t, []string{"primary"}, w.authorizedAt(id), "at most one PSP holds an authorization for a charge")

		// Once the breaker cooled down and the attempt is due, the retry
		// reaches the primary under the lost claim's key.
		w.clock.Add(int64(2 * time.Minute))
		retry, err := chargestest.NewService(t, w.PoolAt(t, 2*time.Minute), w.Keys, other, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
		require.NoError(t, err)
		require.Equal(t, 201, retry.Response.Status, string(retry.Response.Body))
		require.Equal(t, id, chargeID(t, retry.Response), "the retry derives the lost claim's charge id")
		require.Equal(t, []string{"primary"}, w.authorizedAt(id), "at most one PSP holds an authorization for a charge")
		for _, name := range []string{"secondary", "tertiary"} {
			sends, lookups := w.requests(name, id)
			require.Zero(t, sends+lookups, "nothing sent to %s", name)
		}
	})
	t.Run("after a refusal", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		w := newRoutedWorld(t, routedConfig{threshold: 2, faults: map[string]mockpsp.Faults{"primary": {RejectRate: 1}}})
		req, _ := chargestest.Request(t, visa)
		// The first process refused at the primary while its breaker for
		// the secondary was open.
		one := w.process(t)
		w.openBreaker(t, one, "secondary")
		_, err := chargestest.NewService(t, w.Pool, w.Keys, one, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
		require.ErrorIs(t, err, charges.ErrPSPUnavailable, "moved to the secondary, held back there by its open breaker")
		require.Empty(t, w.authorizedAt(w.chargeOfKey(t, "k").ID), "never moved past the secondary to the tertiary")
		w.clock.Add(int64(2 * time.Minute))
		first, err := chargestest.NewService(t, w.PoolAt(t, 2*time.Minute), w.Keys, one, phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
		require.NoError(t, err)
		require.Equal(t, 201, first.Response.Status, string(first.Response.Body))
		id := chargeID(t, first.Response)
		held := w.authorizedAt(id)
		require.Len(t, held, 1)

		w.loseClaim(t, "k")
		retry, err := chargestest.NewService(t, w.Pool, w.Keys, w.process(t), phases.Config{}).Create(ctx, w.Tenant, "k", phases.Parsed(req))
		require.NoError(t, err)
		require.Equal(t, 201, retry.Response.Status, string(retry.Response.Body))
		require.Equal(t, id, chargeID(t, retry.Response))
		require.Equal(t, held, w.authorizedAt(id), "at most one PSP holds an authorization for a charge")
	})
}
