package idempotency_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Every name a filter accepts parses to its state; the stored states that
// are not request states (started) and anything else are refused with the
// list of what is accepted.
func TestParseRequestStateAcceptsTheStatesAndTheirAliases(t *testing.T) {
	t.Parallel()
	for _, st := range idempotency.RequestStates() {
		got, err := idempotency.ParseRequestState(string(st))
		require.NoError(t, err)
		require.Equal(t, st, got)
	}
	for alias, st := range idempotency.RequestStateAliases() {
		got, err := idempotency.ParseRequestState(alias)
		require.NoError(t, err)
		require.Equal(t, st, got)
		require.NotContains(t, idempotency.RequestStates(), idempotency.RequestState(alias), "an alias is never shown")
	}
	for _, bad := range []string{"", "started", "COMPLETED", "in-progress", "done "} {
		_, err := idempotency.ParseRequestState(bad)
		require.ErrorContains(t, err, "in_progress, unfinished, needs_attention, completed", "%q", bad)
	}
}

// The request state of a key is computed in three places, RequestStateOf
// in Go, the CASE every view reads and the filter every list applies; for
// every stored state and every kind of lease, the three agree, and together
// they reach every request state.
func TestRequestStateSQLAgreesWithGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	leases := map[string]struct {
		lockedUntil string
		held        bool
	}{
		"held":    {"phasepay_now() + interval '1 hour'", true},
		"expired": {"phasepay_now() - interval '1 hour'", false},
		"none":    {"NULL", false},
	}
	reached := map[idempotency.RequestState]bool{}
	for _, stored := range []idempotency.State{idempotency.StateStarted, idempotency.StateNeedsAttention, idempotency.StateDone} {
		for leaseName, lease := range leases {
			key := fmt.Sprintf("%s-%s", stored, leaseName)
			_, created, err := claim(ctx, b.pool, b.store, b.tenant, key, b.req)
			require.NoError(t, err)
			require.True(t, created)
			_, err = b.pool.Exec(ctx, `UPDATE idempotency_keys
			    SET state = $3, locked_until = `+lease.lockedUntil+`,
			        response_status = CASE WHEN $3 = 'done' THEN 200 END,
			        response_body = CASE WHEN $3 = 'done' THEN '{}'::bytea END
			  WHERE tenant_id = $1 AND key = $2`, b.tenant, key, string(stored))
			require.NoError(t, err)

			want := idempotency.RequestStateOf(stored, lease.held)
			reached[want] = true
			v, err := idempotency.GetView(ctx, b.pool, b.tenant, key)
			require.NoError(t, err)
			require.Equal(t, want, v.State, "%s: the view's CASE", key)
			for _, st := range idempotency.RequestStates() {
				views, err := idempotency.ListViews(ctx, b.pool, b.tenant, st, "", 100)
				require.NoError(t, err)
				listed := slices.ContainsFunc(views, func(v idempotency.View) bool { return v.Key == key })
				require.Equal(t, st == want, listed, "%s: the filter for %s", key, st)
			}
		}
	}
	for _, st := range idempotency.RequestStates() {
		require.True(t, reached[st], "no stored state maps to %s", st)
	}
}
