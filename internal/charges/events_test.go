package charges_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/charges/chargestest"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// requireEventsMatchStatuses checks the outbox invariant on everything
// committed: a charge that left pending has exactly one event, of its
// status and showing that status; a pending charge has none; no event
// names a charge that does not exist; a needs_attention key has exactly
// one request.needs_attention event and no other key has one.
func requireEventsMatchStatuses(t *testing.T, b *chargestest.Bundle) {
	t.Helper()
	ctx := context.Background()
	statuses := map[string]string{}
	rows, err := b.Pool.Query(ctx, `SELECT id, status FROM charges WHERE tenant_id = $1`, b.Tenant)
	require.NoError(t, err)
	for rows.Next() {
		var id, status string
		require.NoError(t, rows.Scan(&id, &status))
		statuses[id] = status
	}
	require.NoError(t, rows.Err())

	type seen struct{ typ, status string }
	byCharge := map[string][]seen{}
	byKey := map[string]int{}
	rows, err = b.Pool.Query(ctx, `
		SELECT type, convert_from(body, 'UTF8')::jsonb #>> '{data,object,id}',
		       coalesce(convert_from(body, 'UTF8')::jsonb #>> '{data,object,status}', ''),
		       coalesce(convert_from(body, 'UTF8')::jsonb #>> '{data,object,key}', '')
		  FROM events WHERE tenant_id = $1`, b.Tenant)
	require.NoError(t, err)
	for rows.Next() {
		var typ, id, status, key string
		var idp *string
		require.NoError(t, rows.Scan(&typ, &idp, &status, &key))
		if idp != nil {
			id = *idp
		}
		if typ == "request.needs_attention" {
			byKey[key]++
			continue
		}
		byCharge[id] = append(byCharge[id], seen{typ, status})
	}
	require.NoError(t, rows.Err())

	for id := range byCharge {
		_, ok := statuses[id]
		require.True(t, ok, "event for charge %s, which does not exist", id)
	}
	for id, status := range statuses {
		if status == string(charges.StatusPending) {
			require.Empty(t, byCharge[id], "pending charge %s has an event", id)
			continue
		}
		require.Equal(t, []seen{{"charge." + status, status}}, byCharge[id], "charge %s is %s", id, status)
	}

	attention := map[string]bool{}
	rows, err = b.Pool.Query(ctx, `SELECT key FROM idempotency_keys WHERE tenant_id = $1 AND state = 'needs_attention'`, b.Tenant)
	require.NoError(t, err)
	for rows.Next() {
		var key string
		require.NoError(t, rows.Scan(&key))
		attention[key] = true
	}
	require.NoError(t, rows.Err())
	for key := range attention {
		require.Equal(t, 1, byKey[key], "needs_attention key %s", key)
	}
	for key, n := range byKey {
		require.True(t, attention[key], "request.needs_attention for %s, which does not need attention (%d events)", key, n)
	}
}

// Every status change commits with its event and no event commits without
// its change: a worker killed at every crash point, in both commit modes,
// for an authorization, a decline and a refusal, leaves the invariant
// true, and so does the takeover that finishes the request.
func TestNoStatusChangeWithoutItsEvent(t *testing.T) {
	t.Parallel()
	points := map[bool][]charges.CrashPoint{
		false: {"", charges.CrashAfterClaim, charges.CrashAfterPSPCall, charges.CrashAfterPSPAuthorized},
		true:  {"", charges.CrashAfterClaim, charges.CrashAfterChargeCreated, charges.CrashAfterPSPCall, charges.CrashAfterPSPAuthorized},
	}
	outcomes := map[string]struct {
		pm     string
		faults psp.Faults
	}{
		"authorized": {"pm_card_visa", psp.Faults{}},
		"declined":   {"pm_card_chargeDeclined", psp.Faults{}},
		"failed":     {"pm_card_visa", psp.Faults{RejectRate: 1}},
	}
	for _, oneCommit := range []bool{false, true} {
		for _, at := range points[oneCommit] {
			for name, o := range outcomes {
				t.Run(fmt.Sprintf("one_commit=%v/%s/%s", oneCommit, at, name), func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					b := setup(t)
					require.NoError(t, b.Mock.SetFaults(o.faults))
					req, params := chargestest.Request(t, fmt.Sprintf(`{"amount":1000,"currency":"usd","payment_method":%q}`, o.pm))
					cfg := charges.Config{OneCommitPerPhase: oneCommit}
					if at != "" {
						cfg.CrashHook = chargestest.CrashAt(at)
					}
					_, err := b.Service(t, 0, cfg).Create(ctx, b.Tenant, "k", req, params)
					if at != "" {
						require.ErrorIs(t, err, chargestest.ErrCrash)
					}
					requireEventsMatchStatuses(t, b)

					_, _ = b.Service(t, b.Keys.Lease()+time.Second, charges.Config{OneCommitPerPhase: oneCommit}).Create(ctx, b.Tenant, "k", req, params)
					state, _, _ := b.KeyState(t, "k")
					require.Equal(t, "done", state)
					requireEventsMatchStatuses(t, b)
					ids := b.ChargeIDs(t, "k")
					require.Len(t, ids, 1)
				})
			}
		}
	}
}

// request.needs_attention is written by the release that gives the key up,
// in its transaction; an earlier release that only reschedules writes
// nothing.
func TestNeedsAttentionWritesItsEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := chargestest.Setup(t, idempotency.Config{RetryBase: time.Millisecond, RetryMax: time.Millisecond, GiveUpAfter: time.Hour})
	require.NoError(t, b.Mock.SetFaults(psp.Faults{ErrorRate: 1}))
	req, params := chargestest.Request(t, visa)
	_, err := b.Service(t, 0, charges.Config{}).Create(ctx, b.Tenant, "k", req, params)
	require.ErrorIs(t, err, charges.ErrPSPUnavailable)
	requireEventsMatchStatuses(t, b)
	var n int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
	require.Zero(t, n)

	// Past GIVE_UP_AFTER: the next failed attempt gives up.
	_, err = b.Service(t, 2*time.Hour, charges.Config{}).Create(ctx, b.Tenant, "k", req, params)
	require.ErrorIs(t, err, idempotency.ErrUnresolved)
	state, _, _ := b.KeyState(t, "k")
	require.Equal(t, "needs_attention", state)
	requireEventsMatchStatuses(t, b)
	var body string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT convert_from(body, 'UTF8') FROM events WHERE type = 'request.needs_attention'`).Scan(&body))
	require.Contains(t, body, `"object":{"object":"idempotency_key","key":"k","endpoint":"POST /v1/charges","state":"needs_attention"`)
}
