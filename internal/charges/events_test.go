package charges_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// chargeHistory is the statuses a charge in each status has moved
// through since pending, each of which wrote one event, in order.
var chargeHistory = map[string][]string{
	"pending":    nil,
	"authorized": {"authorized"},
	"declined":   {"declined"},
	"failed":     {"failed"},
	"captured":   {"authorized", "captured"},
	"voided":     {"authorized", "voided"},
}

// requireEventsMatchStatuses checks the outbox invariant on everything
// committed: a charge has exactly one event per status it moved to (see
// chargeHistory), of that status and showing it, and a pending charge has
// none; a refund that ended has exactly one event, of its end, and a
// pending refund none; no event names a charge or refund that does not
// exist; a needs_attention key has exactly one request.needs_attention
// event and no other key has one.
func requireEventsMatchStatuses(t *testing.T, b *chargestest.Bundle) {
	t.Helper()
	ctx := context.Background()
	type seen struct{ typ, status string }
	expected := map[string][]seen{}
	rows, err := b.Pool.Query(ctx, `SELECT id, status FROM charges WHERE tenant_id = $1`, b.Tenant)
	require.NoError(t, err)
	for rows.Next() {
		var id, status string
		require.NoError(t, rows.Scan(&id, &status))
		history, ok := chargeHistory[status]
		require.True(t, ok, "charge %s has unknown status %q", id, status)
		expected[id] = []seen{}
		for _, s := range history {
			expected[id] = append(expected[id], seen{"charge." + s, s})
		}
	}
	require.NoError(t, rows.Err())
	rows, err = b.Pool.Query(ctx, `SELECT id, status FROM refunds WHERE tenant_id = $1`, b.Tenant)
	require.NoError(t, err)
	for rows.Next() {
		var id, status string
		require.NoError(t, rows.Scan(&id, &status))
		expected[id] = []seen{}
		if status != string(charges.RefundPending) {
			expected[id] = []seen{{"refund." + status, status}}
		}
	}
	require.NoError(t, rows.Err())

	byObject := map[string][]seen{}
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
		byObject[id] = append(byObject[id], seen{typ, status})
	}
	require.NoError(t, rows.Err())

	for id := range byObject {
		_, ok := expected[id]
		require.True(t, ok, "event for %s, which does not exist", id)
	}
	for id, want := range expected {
		// Compared as sets: the tests pin the database clock, so created_at
		// cannot order one object's events.
		require.ElementsMatch(t, want, byObject[id], "events of %s", id)
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
// for an authorization, a decline and a refusal, and for a capture, a void
// and a refund each succeeding or refused, leaves the invariant true, and
// so does the takeover that finishes the request.
func TestNoStatusChangeWithoutItsEvent(t *testing.T) {
	t.Parallel()
	t.Run("operations", testOperationEventsAtEveryCrashPoint)
	points := map[bool][]phases.CrashPoint{
		false: {noCrash, phases.CrashAfterClaim, phases.CrashAfterCall, charges.CrashAfterPSPAuthorized},
		true:  {noCrash, phases.CrashAfterClaim, charges.CrashAfterChargeCreated, phases.CrashAfterCall, charges.CrashAfterPSPAuthorized},
	}
	outcomes := map[string]struct {
		pm     string
		faults mockpsp.Faults
	}{
		"authorized": {"pm_card_visa", mockpsp.Faults{}},
		"declined":   {"pm_card_chargeDeclined", mockpsp.Faults{}},
		"failed":     {"pm_card_visa", mockpsp.Faults{RejectRate: 1}},
	}
	for _, oneCommit := range []bool{false, true} {
		for _, at := range points[oneCommit] {
			for name, o := range outcomes {
				t.Run(fmt.Sprintf("one_commit=%v/%s/%s", oneCommit, at, name), func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					b := setup(t)
					require.NoError(t, b.Mock.SetFaults(o.faults))
					req, _ := chargestest.Request(t, fmt.Sprintf(`{"amount":1000,"currency":"usd","payment_method":%q}`, o.pm))
					cfg := phases.Config{OneCommitPerPhase: oneCommit}
					if at != noCrash {
						cfg.CrashHook = phasestest.CrashAt(at)
					}
					_, err := b.Service(t, 0, cfg).Create(ctx, b.Tenant, "k", phases.Parsed(req))
					if at != noCrash {
						require.ErrorIs(t, err, phasestest.ErrCrash)
					}
					requireEventsMatchStatuses(t, b)

					_, _ = b.Service(t, b.Keys.Lease()+time.Second, phases.Config{OneCommitPerPhase: oneCommit}).Create(ctx, b.Tenant, "k", phases.Parsed(req))
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

// noCrash is no crash point: a run that does not crash.
var noCrash phases.CrashPoint

// operationCrashPoints are the crash points of capture, void and refund
// (noCrash for none).
var operationCrashPoints = map[string][]phases.CrashPoint{
	"capture": {noCrash, phases.CrashAfterClaim, phases.CrashAfter(charges.PointCaptureStarted), phases.CrashAfterCall, phases.CrashAfter(charges.PointPSPCaptured)},
	"void":    {noCrash, phases.CrashAfterClaim, phases.CrashAfter(charges.PointVoidStarted), phases.CrashAfterCall, phases.CrashAfter(charges.PointPSPVoided)},
	"refund":  {noCrash, phases.CrashAfterClaim, phases.CrashAfter(charges.PointRefundCreated), phases.CrashAfterCall, phases.CrashAfter(charges.PointPSPRefunded)},
}

// runOperation runs the operation named op on charge id under key "op":
// a capture of 600, a void, or a refund of 400.
func runOperation(t *testing.T, b *chargestest.Bundle, s *charges.Service, op, id string) (phases.Result, error) {
	t.Helper()
	ctx := context.Background()
	switch op {
	case "capture":
		req, err := charges.ParseCaptureRequest(id, []byte(`{"amount":600}`))
		require.NoError(t, err)
		return s.Capture(ctx, b.Tenant, "op", id, phases.Parsed(req))
	case "void":
		req, err := charges.ParseVoidRequest(id, []byte(`{}`))
		require.NoError(t, err)
		return s.Void(ctx, b.Tenant, "op", id, phases.Parsed(req))
	}
	req, _, err := charges.ParseRefundRequest(fmt.Appendf(nil, `{"charge":%q,"amount":400}`, id))
	require.NoError(t, err)
	return s.Refund(ctx, b.Tenant, "op", phases.Parsed(req))
}

// testOperationEventsAtEveryCrashPoint is TestNoStatusChangeWithoutItsEvent
// for capture, void and refund: charge.captured, charge.voided,
// refund.succeeded and refund.failed commit exactly with their change, and a
// refused capture or void (no change) writes nothing.
func testOperationEventsAtEveryCrashPoint(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"capture", "void", "refund"} {
		for _, oneCommit := range []bool{false, true} {
			for _, at := range operationCrashPoints[op] {
				for _, refused := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/one_commit=%v/%s/refused=%v", op, oneCommit, at, refused), func(t *testing.T) {
						t.Parallel()
						ctx := context.Background()
						b := setup(t)
						svc := b.Service(t, 0, phases.Config{})
						id := authorized(t, b, svc)
						if op == "refund" {
							req, err := charges.ParseCaptureRequest(id, []byte(`{}`))
							require.NoError(t, err)
							_, err = svc.Capture(ctx, b.Tenant, "cap", id, phases.Parsed(req))
							require.NoError(t, err)
						}
						if refused {
							require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{RejectRate: 1}))
						}
						cfg := phases.Config{OneCommitPerPhase: oneCommit}
						if at != noCrash {
							cfg.CrashHook = phasestest.CrashAt(at)
						}
						_, err := runOperation(t, b, b.Service(t, 0, cfg), op, id)
						if at != noCrash && err != nil {
							require.ErrorIs(t, err, phasestest.ErrCrash)
						}
						requireEventsMatchStatuses(t, b)

						res, err := runOperation(t, b, b.Service(t, b.Keys.Lease()+time.Second, phases.Config{OneCommitPerPhase: oneCommit}), op, id)
						require.NoError(t, err)
						want := map[bool][]int{false: {200, 201}, true: {402}}[refused]
						require.Contains(t, want, res.Response.Status, string(res.Response.Body))
						state, _, _ := b.KeyState(t, "op")
						require.Equal(t, "done", state)
						requireEventsMatchStatuses(t, b)

						c, err := svc.Get(ctx, b.Tenant, id)
						require.NoError(t, err)
						wantStatus := map[string]charges.Status{"capture": charges.StatusCaptured, "void": charges.StatusVoided, "refund": charges.StatusCaptured}[op]
						if refused && op != "refund" {
							wantStatus = charges.StatusAuthorized
						}
						require.Equal(t, wantStatus, c.Status)
						var n int
						require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1 AND type = ANY($2)`,
							b.Tenant, []string{"charge.captured", "charge.voided", "refund.succeeded", "refund.failed"}).Scan(&n))
						wantEvents := 1
						if refused && op != "refund" {
							wantEvents = 0
						}
						if op == "refund" {
							wantEvents = 2 // the capture before it, and the refund's end
						}
						require.Equal(t, wantEvents, n)
					})
				}
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
	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	req, _ := chargestest.Request(t, visa)
	_, err := b.Service(t, 0, phases.Config{}).Create(ctx, b.Tenant, "k", phases.Parsed(req))
	require.ErrorIs(t, err, charges.ErrPSPUnavailable)
	requireEventsMatchStatuses(t, b)
	var n int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
	require.Zero(t, n)

	// Past GIVE_UP_AFTER: the next failed attempt gives up.
	_, err = b.Service(t, 2*time.Hour, phases.Config{}).Create(ctx, b.Tenant, "k", phases.Parsed(req))
	require.ErrorIs(t, err, idempotency.ErrUnresolved)
	state, _, _ := b.KeyState(t, "k")
	require.Equal(t, "needs_attention", state)
	requireEventsMatchStatuses(t, b)
	var body string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT convert_from(body, 'UTF8') FROM events WHERE type = 'request.needs_attention'`).Scan(&body))
	require.Contains(t, body, `"object":{"object":"idempotency_key","key":"k","endpoint":"POST /v1/charges","state":"needs_attention"`)
}

// An endpoint subscribed to the capture, void and refund events gets a
// delivery queued for each of them, in their transactions, and one
// subscribed to charge.authorized alone gets none of them.
func TestOperationEventsReachSubscribedEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	types, err := webhooks.ValidateEvents([]string{"charge.captured", "charge.voided", "refund.succeeded", "refund.failed"})
	require.NoError(t, err)
	ops, err := webhooks.Create(ctx, b.Pool, b.Tenant, "https://example.com/ops", types)
	require.NoError(t, err)
	auth, err := webhooks.Create(ctx, b.Pool, b.Tenant, "https://example.com/auth", []string{"charge.authorized"})
	require.NoError(t, err)

	svc := b.Service(t, 0, phases.Config{})
	captured := authorized(t, b, svc)
	req, _ := chargestest.Request(t, visa)
	res, err := svc.Create(ctx, b.Tenant, "auth2", phases.Parsed(req))
	require.NoError(t, err)
	voided := chargeID(t, res.Response)
	res, err = runOperation(t, b, svc, "capture", captured)
	require.NoError(t, err)
	require.Equal(t, 200, res.Response.Status)
	vreq, err := charges.ParseVoidRequest(voided, []byte(`{}`))
	require.NoError(t, err)
	res, err = svc.Void(ctx, b.Tenant, "void", voided, phases.Parsed(vreq))
	require.NoError(t, err)
	require.Equal(t, 200, res.Response.Status)
	rreq, _, err := charges.ParseRefundRequest(fmt.Appendf(nil, `{"charge":%q,"amount":100}`, captured))
	require.NoError(t, err)
	res, err = svc.Refund(ctx, b.Tenant, "refund", phases.Parsed(rreq))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status)
	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{RejectRate: 1}))
	res, err = svc.Refund(ctx, b.Tenant, "refund2", phases.Parsed(rreq))
	require.NoError(t, err)
	require.Equal(t, 402, res.Response.Status)

	queued := func(endpoint string) []string {
		rows, err := b.Pool.Query(ctx, `
			SELECT e.type FROM webhook_deliveries d JOIN events e ON e.tenant_id = d.tenant_id AND e.id = d.event_id
			 WHERE d.tenant_id = $1 AND d.endpoint_id = $2`, b.Tenant, endpoint)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var typ string
			require.NoError(t, rows.Scan(&typ))
			out = append(out, typ)
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.ElementsMatch(t, []string{"charge.captured", "charge.voided", "refund.succeeded", "refund.failed"}, queued(ops.ID))
	require.ElementsMatch(t, []string{"charge.authorized", "charge.authorized"}, queued(auth.ID))
}
