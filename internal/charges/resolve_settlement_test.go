package charges_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// settleWorld is a bundle whose requests are given up at their first failed
// attempt, so that a capture, void or refund the PSP does not answer needs
// an operator at once.
type settleWorld struct {
	*chargestest.Bundle
	svc *charges.Service
}

func newSettleWorld(t *testing.T) *settleWorld {
	t.Helper()
	b := chargestest.Setup(t, idempotency.Config{GiveUpAfter: time.Nanosecond, RetryBase: time.Millisecond})
	return &settleWorld{Bundle: b, svc: b.Service(t, 0, phases.Config{})}
}

// pspDid says whether the stuck operation acted at the PSP: done, its answer
// lost and every lookup failing; or never done, every send answered 503.
type pspDid bool

const (
	pspDone    pspDid = true
	pspNotDone pspDid = false
)

// run runs op ("capture", "void" or "refund") with key on the charge.
func (w *settleWorld) run(t *testing.T, op, key, chargeID, body string) (phases.Result, error) {
	t.Helper()
	ctx := context.Background()
	switch op {
	case "capture":
		req, err := charges.ParseCaptureRequest(chargeID, []byte(body))
		require.NoError(t, err)
		return w.svc.Capture(ctx, w.Tenant, key, chargeID, phases.Parsed(req))
	case "void":
		req, err := charges.ParseVoidRequest(chargeID, []byte(body))
		require.NoError(t, err)
		return w.svc.Void(ctx, w.Tenant, key, chargeID, phases.Parsed(req))
	default:
		req, _, err := charges.ParseRefundRequest([]byte(body))
		require.NoError(t, err)
		return w.svc.Refund(ctx, w.Tenant, key, phases.Parsed(req))
	}
}

// stuck runs op with key under faults that leave its outcome unknown, as
// did says, and checks that it waits for an operator.
func (w *settleWorld) stuck(t *testing.T, op, key, chargeID, body string, did pspDid) {
	t.Helper()
	faults := mockpsp.Faults{ErrorRate: 1}
	if did {
		faults = mockpsp.Faults{DropRate: 1, LookupErrorRate: 1}
	}
	require.NoError(t, w.Mock.SetFaults(faults))
	_, err := w.run(t, op, key, chargeID, body)
	require.ErrorIs(t, err, idempotency.ErrUnresolved)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{}))
	state, _, _ := w.KeyState(t, key)
	require.Equal(t, "needs_attention", state)
}

// ok runs op with key and requires its answer status.
func (w *settleWorld) ok(t *testing.T, op, key, chargeID, body string, status int) idempotency.Response {
	t.Helper()
	res, err := w.run(t, op, key, chargeID, body)
	require.NoError(t, err)
	require.Equal(t, status, res.Response.Status, string(res.Response.Body))
	return res.Response
}

// resolve resolves key as as, by "alice".
func (w *settleWorld) resolve(t *testing.T, key string, as charges.ResolveAs) (idempotency.Response, error) {
	t.Helper()
	return w.svc.Resolve(context.Background(), w.Tenant, key,
		charges.Resolution{As: as, Reason: "ticket 7731: checked the PSP's dashboard", By: "alice"})
}

// refused requires a resolution the PSP contradicts: refused with a reason
// naming want, the key left needing attention, the refusal on its timeline.
func (w *settleWorld) refused(t *testing.T, key string, as charges.ResolveAs, want string) {
	t.Helper()
	_, err := w.resolve(t, key, as)
	require.ErrorIs(t, err, charges.ErrResolutionContradicted)
	require.Contains(t, err.Error(), want)
	state, _, _ := w.KeyState(t, key)
	require.Equal(t, "needs_attention", state)
	last := w.timeline(t, key)
	require.Equal(t, idempotency.KindResolutionRefused, last[len(last)-1].Kind)
}

func (w *settleWorld) timeline(t *testing.T, key string) []idempotency.Entry {
	t.Helper()
	h, err := idempotency.ReadHistory(context.Background(), w.Pool, w.Tenant, key)
	require.NoError(t, err)
	return h.Entries
}

// resolved requires key settled by the resolution that answered resp: the
// answer the key replays, the resolution then the finish on its timeline,
// and the PSP's word in the audit record (none when forced).
func (w *settleWorld) resolved(t *testing.T, op, key, chargeID, body string, resp idempotency.Response, pspSaid string) {
	t.Helper()
	ctx := context.Background()
	state, _, _ := w.KeyState(t, key)
	require.Equal(t, "done", state)
	replay := w.ok(t, op, key, chargeID, body, resp.Status)
	require.Equal(t, string(resp.Body), string(replay.Body), "the key replays the resolution's answer")
	entries := w.timeline(t, key)
	n := len(entries)
	require.Equal(t, idempotency.KindResolved, entries[n-2].Kind)
	require.Equal(t, "alice", entries[n-2].Operator)
	require.Equal(t, idempotency.KindFinished, entries[n-1].Kind)
	require.Equal(t, resp.Status, entries[n-1].ResponseStatus)
	rec, err := w.Keys.Lookup(ctx, w.Pool, w.Tenant, key)
	require.NoError(t, err)
	res, err := charges.ResolutionsOf(ctx, w.Pool, rec.ID())
	require.NoError(t, err)
	require.Len(t, res, 1)
	if pspSaid == "" {
		require.Nil(t, res[0].PSPSaid)
		return
	}
	require.NotNil(t, res[0].PSPSaid)
	require.Contains(t, *res[0].PSPSaid, pspSaid)
}

// events returns the types of the events written for object. The tests pin
// the database clock, so nothing orders them: compare as sets.
func (w *settleWorld) events(t *testing.T, object string) []string {
	t.Helper()
	rows, err := w.Pool.Query(context.Background(), `
SELECT type FROM events
 WHERE tenant_id = $1 AND convert_from(body, 'UTF8')::jsonb #>> '{data,object,id}' = $2`, w.Tenant, object)
	require.NoError(t, err)
	defer rows.Close()
	types := []string{}
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		types = append(types, typ)
	}
	require.NoError(t, rows.Err())
	return types
}

func (w *settleWorld) charge(t *testing.T, id string) *charges.Charge {
	t.Helper()
	c, err := w.svc.Get(context.Background(), w.Tenant, id)
	require.NoError(t, err)
	return c
}

// captured returns a new charge of 1000, authorized and captured whole.
func (w *settleWorld) captured(t *testing.T) string {
	t.Helper()
	id := authorized(t, w.Bundle, w.svc)
	w.ok(t, "capture", "cap", id, `{}`, 200)
	return id
}

func problemCode(t *testing.T, resp idempotency.Response) string {
	t.Helper()
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &p))
	require.Contains(t, p.Detail, charges.ResolvedFailedReason, "stable words")
	require.NotContains(t, string(resp.Body), "7731", "the operator's reason stays with operators")
	return p.Code
}

// pitfall O4 "A capture, void or refund resolved as if it were a new
// charge": a capture's key is resolved by its capture. The PSP is asked
// for a capture of the charge's authorization: one it holds refuses
// --as failed and is recorded by --as succeeded (the amount the PSP
// captured, charge.captured, 200 with the charge); none refuses
// --as succeeded, and --as failed gives the charge's settlement back, so
// that a void may follow.
func TestResolveCaptureAsksThePSPForTheCapture(t *testing.T) {
	t.Parallel()
	t.Run("captured at the PSP", func(t *testing.T) {
		t.Parallel()
		w := newSettleWorld(t)
		id := authorized(t, w.Bundle, w.svc)
		w.stuck(t, "capture", "cap", id, `{"amount":600}`, pspDone)
		require.Len(t, w.Mock.Captures(), 1)

		w.refused(t, "cap", charges.ResolveFailed, w.Mock.Captures()[0].ID)
		resp, err := w.resolve(t, "cap", charges.ResolveSucceeded)
		require.NoError(t, err)
		require.Equal(t, 200, resp.Status)
		c := w.charge(t, id)
		require.Equal(t, charges.StatusCaptured, c.Status)
		require.EqualValues(t, 600, c.AmountCaptured, "the amount the PSP captured")
		require.ElementsMatch(t, []string{"charge.authorized", "charge.captured"}, w.events(t, id))
		w.resolved(t, "capture", "cap", id, `{"amount":600}`, resp, "captured")

		// The PSP knows the capture: a refund goes through.
		w.ok(t, "refund", "re", id, fmt.Sprintf(`{"charge":%q}`, id), 201)
	})
	t.Run("not captured at the PSP", func(t *testing.T) {
		t.Parallel()
		w := newSettleWorld(t)
		id := authorized(t, w.Bundle, w.svc)
		w.stuck(t, "capture", "cap", id, `{}`, pspNotDone)
		require.Empty(t, w.Mock.Captures())

		w.refused(t, "cap", charges.ResolveSucceeded, "no capture")
		resp, err := w.resolve(t, "cap", charges.ResolveFailed)
		require.NoError(t, err)
		require.Equal(t, 402, resp.Status)
		require.Equal(t, "payment_failed", problemCode(t, resp))
		require.Equal(t, charges.StatusAuthorized, w.charge(t, id).Status)
		require.Equal(t, []string{"charge.authorized"}, w.events(t, id), "the status did not change: no event")
		w.resolved(t, "capture", "cap", id, `{}`, resp, "no capture")

		// The settlement was given back: the charge can be voided.
		w.ok(t, "void", "void", id, `{}`, 200)
	})
}

// pitfall O4 "A capture, void or refund resolved as if it were a new
// charge": a void's key is resolved by its void, as a capture's by its
// capture.
func TestResolveVoidAsksThePSPForTheVoid(t *testing.T) {
	t.Parallel()
	t.Run("voided at the PSP", func(t *testing.T) {
		t.Parallel()
		w := newSettleWorld(t)
		id := authorized(t, w.Bundle, w.svc)
		w.stuck(t, "void", "void", id, `{}`, pspDone)
		require.Len(t, w.Mock.Voids(), 1)

		w.refused(t, "void", charges.ResolveFailed, w.Mock.Voids()[0].ID)
		resp, err := w.resolve(t, "void", charges.ResolveSucceeded)
		require.NoError(t, err)
		require.Equal(t, 200, resp.Status)
		require.Equal(t, charges.StatusVoided, w.charge(t, id).Status)
		require.ElementsMatch(t, []string{"charge.authorized", "charge.voided"}, w.events(t, id))
		w.resolved(t, "void", "void", id, `{}`, resp, "voided")
	})
	t.Run("not voided at the PSP", func(t *testing.T) {
		t.Parallel()
		w := newSettleWorld(t)
		id := authorized(t, w.Bundle, w.svc)
		w.stuck(t, "void", "void", id, `{}`, pspNotDone)

		w.refused(t, "void", charges.ResolveSucceeded, "no void")
		resp, err := w.resolve(t, "void", charges.ResolveFailed)
		require.NoError(t, err)
		require.Equal(t, 402, resp.Status)
		require.Equal(t, "payment_failed", problemCode(t, resp))
		require.Equal(t, charges.StatusAuthorized, w.charge(t, id).Status)
		require.Equal(t, []string{"charge.authorized"}, w.events(t, id))
		w.resolved(t, "void", "void", id, `{}`, resp, "no void")

		// The settlement was given back: the charge can be captured.
		w.ok(t, "capture", "cap", id, `{}`, 200)
	})
}

// pitfall O4 "A capture, void or refund resolved as if it were a new
// charge": a refund's key is resolved by its refund, looked up at the PSP by
// the refund's id. --as succeeded ends the pending refund succeeded (its
// amount refunded, refund.succeeded, 201 with the refund); --as failed ends
// it failed (refund.failed), its amount no longer held on the charge.
func TestResolveRefundAsksThePSPForTheRefund(t *testing.T) {
	t.Parallel()
	t.Run("refunded at the PSP", func(t *testing.T) {
		t.Parallel()
		w := newSettleWorld(t)
		id := w.captured(t)
		body := fmt.Sprintf(`{"charge":%q,"amount":400}`, id)
		w.stuck(t, "refund", "re", id, body, pspDone)
		require.Len(t, w.Mock.Refunds(), 1)
		refundID := w.objectOf(t, "re")

		w.refused(t, "re", charges.ResolveFailed, w.Mock.Refunds()[0].ID)
		resp, err := w.resolve(t, "re", charges.ResolveSucceeded)
		require.NoError(t, err)
		require.Equal(t, 201, resp.Status)
		r, err := w.svc.GetRefund(context.Background(), w.Tenant, refundID)
		require.NoError(t, err)
		require.Equal(t, charges.RefundSucceeded, r.Status)
		require.NotNil(t, r.PSPReference)
		require.Equal(t, w.Mock.Refunds()[0].ID, *r.PSPReference)
		require.EqualValues(t, 400, w.charge(t, id).AmountRefunded)
		require.Equal(t, []string{"refund.succeeded"}, w.events(t, refundID))
		w.resolved(t, "refund", "re", id, body, resp, "refunded")

		// 400 of 1000 refunded: 600 are left, not a cent more.
		w.ok(t, "refund", "re-too-much", id, fmt.Sprintf(`{"charge":%q,"amount":601}`, id), 400)
		w.ok(t, "refund", "re-rest", id, fmt.Sprintf(`{"charge":%q,"amount":600}`, id), 201)
	})
	t.Run("not refunded at the PSP", func(t *testing.T) {
		t.Parallel()
		w := newSettleWorld(t)
		id := w.captured(t)
		body := fmt.Sprintf(`{"charge":%q}`, id)
		w.stuck(t, "refund", "re", id, body, pspNotDone)
		refundID := w.objectOf(t, "re")

		w.refused(t, "re", charges.ResolveSucceeded, "no refund")
		resp, err := w.resolve(t, "re", charges.ResolveFailed)
		require.NoError(t, err)
		require.Equal(t, 402, resp.Status)
		require.Equal(t, "payment_failed", problemCode(t, resp))
		r, err := w.svc.GetRefund(context.Background(), w.Tenant, refundID)
		require.NoError(t, err)
		require.Equal(t, charges.RefundFailed, r.Status)
		require.Zero(t, w.charge(t, id).AmountRefunded)
		require.Equal(t, []string{"refund.failed"}, w.events(t, refundID))
		w.resolved(t, "refund", "re", id, body, resp, "no refund")

		// Its amount is no longer held: the whole charge can be refunded.
		w.ok(t, "refund", "re-again", id, body, 201)
	})
}

// A forced resolution of a settlement asks no PSP: --as succeeded records
// what the request asked for (the capture's amount), --as failed gives the
// settlement back, and the audit record has no word of the PSP's.
func TestForcedSettlementResolutionAsksNoPSP(t *testing.T) {
	t.Parallel()
	w := newSettleWorld(t)
	ctx := context.Background()
	id := authorized(t, w.Bundle, w.svc)
	w.stuck(t, "capture", "cap", id, `{"amount":700}`, pspNotDone)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))

	_, err := w.resolve(t, "cap", charges.ResolveSucceeded)
	require.ErrorIs(t, err, charges.ErrPSPLookupFailed, "unforced, the PSP is asked and cannot answer")
	asked := len(w.Mock.Requests())
	resp, err := w.svc.Resolve(ctx, w.Tenant, "cap", charges.Resolution{
		As: charges.ResolveSucceeded, Reason: "ticket 7731: the PSP's support confirmed the capture", By: "alice", Force: true})
	require.NoError(t, err)
	require.Equal(t, 200, resp.Status)
	require.Len(t, w.Mock.Requests(), asked, "the forced resolution asked nothing")
	c := w.charge(t, id)
	require.Equal(t, charges.StatusCaptured, c.Status)
	require.EqualValues(t, 700, c.AmountCaptured)
	require.NoError(t, w.Mock.SetFaults(mockpsp.Faults{}))
	w.resolved(t, "capture", "cap", id, `{"amount":700}`, resp, "")
}

// objectOf is the object the key names (its view's object_id).
func (w *settleWorld) objectOf(t *testing.T, key string) string {
	t.Helper()
	v, err := idempotency.GetView(context.Background(), w.Pool, w.Tenant, key)
	require.NoError(t, err)
	require.NotEmpty(t, v.ObjectID)
	return v.ObjectID
}

// With several PSPs, a settlement is looked up at the PSP that holds the
// charge's authorization, the one its capture went to, and at no other.
func TestResolveCaptureAsksThePSPThatHoldsTheAuthorization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newRoutedWorld(t, routedConfig{faults: map[string]mockpsp.Faults{"primary": {RejectRate: 1}}})
	svc := w.service(t, 0, phases.Config{})
	req, _ := chargestest.Request(t, visa)
	res, err := svc.Create(ctx, w.Tenant, "auth", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status, string(res.Response.Body))
	id := chargeID(t, res.Response)
	require.Equal(t, []string{"secondary"}, w.authorizedAt(id))

	require.NoError(t, w.mocks["secondary"].SetFaults(mockpsp.Faults{DropRate: 1, LookupErrorRate: 1}))
	capture, err := charges.ParseCaptureRequest(id, []byte(`{}`))
	require.NoError(t, err)
	_, err = svc.Capture(ctx, w.Tenant, "cap", id, phases.Parsed(capture))
	require.ErrorIs(t, err, charges.ErrPSPUnavailable)
	require.NoError(t, w.mocks["secondary"].SetFaults(mockpsp.Faults{}))
	// Given up (GIVE_UP_AFTER, as the reaper's release would).
	_, err = w.Pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'needs_attention', next_attempt_at = NULL WHERE tenant_id = $1 AND key = 'cap'`, w.Tenant)
	require.NoError(t, err)
	asked := map[string]int{}
	for _, name := range pspNames {
		asked[name] = len(w.mocks[name].Requests())
	}

	_, err = svc.Resolve(ctx, w.Tenant, "cap", charges.Resolution{As: charges.ResolveSucceeded, Reason: "checked", By: "ops"})
	require.NoError(t, err)
	c, err := svc.Get(ctx, w.Tenant, id)
	require.NoError(t, err)
	require.Equal(t, charges.StatusCaptured, c.Status)
	require.EqualValues(t, 1000, c.AmountCaptured)
	require.Len(t, w.mocks["primary"].Requests(), asked["primary"], "the primary holds nothing of it")
	require.Len(t, w.mocks["tertiary"].Requests(), asked["tertiary"])
	require.Greater(t, len(w.mocks["secondary"].Requests()), asked["secondary"])
	rec, err := w.Keys.Lookup(ctx, w.Pool, w.Tenant, "cap")
	require.NoError(t, err)
	resolutions, err := charges.ResolutionsOf(ctx, w.Pool, rec.ID())
	require.NoError(t, err)
	require.Len(t, resolutions, 1)
	require.NotNil(t, resolutions[0].PSPSaid)
	require.Contains(t, *resolutions[0].PSPSaid, "at secondary")
}
