package charges_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// How each class of PSP answer ends a charge (psp.Classify): the pitfalls
// of treating them alike.

// mockWorld is a charges test world whose mock PSP has a clock the test
// moves, to make the PSP forget idempotency keys (MockConfig.KeyTTL).
type mockWorld struct {
	*chargestest.Bundle
	mock   *mockpsp.Mock
	client *psp.Client
	offset atomic.Int64 // nanoseconds added to the mock's clock
}

func newMockWorld(t *testing.T, cfg mockpsp.Config) *mockWorld {
	t.Helper()
	w := &mockWorld{Bundle: setup(t)}
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(w.offset.Load())) }
	mock, err := mockpsp.NewFromConfig(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	w.mock = mock
	w.client, err = psp.NewClient(psp.ClientConfig{BaseURL: srv.URL, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	require.NoError(t, err)
	return w
}

func (w *mockWorld) service(t *testing.T, offset time.Duration, cfg phases.Config) *charges.Service {
	t.Helper()
	return chargestest.NewService(t, w.PoolAt(t, offset), w.Keys, w.client, cfg)
}

// posts counts the authorization requests (not lookups) the mock received.
func (w *mockWorld) posts() int {
	n := 0
	for _, r := range w.mock.Requests() {
		if r.Method == "POST" {
			n++
		}
	}
	return n
}

func problemOf(t *testing.T, resp idempotency.Response) (code, charge, detail string) {
	t.Helper()
	var p struct{ Code, Charge, Detail string }
	require.NoError(t, json.Unmarshal(resp.Body, &p))
	return p.Code, p.Charge, p.Detail
}

// A PSP that refuses a request (400: nothing done there) has given a final
// answer: the charge fails with a stored 402 payment_failed carrying the
// PSP's reason, the key is done, and the request is never sent again — not
// by a client's retry, which replays the answer, nor by the reaper, which
// only takes unfinished keys.
func TestFinalPSPFailureIsStoredAndNeverResent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newMockWorld(t, mockpsp.Config{Faults: mockpsp.Faults{RejectRate: 1}})
	req, _ := chargestest.Request(t, visa)
	svc := w.service(t, 0, phases.Config{})

	res, err := svc.Create(ctx, w.Tenant, "refused", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 402, res.Response.Status)
	code, id, detail := problemOf(t, res.Response)
	require.Equal(t, "payment_failed", code)
	require.NotEmpty(t, detail)
	c, err := svc.Get(ctx, w.Tenant, id)
	require.NoError(t, err)
	require.Equal(t, charges.StatusFailed, c.Status)
	require.Nil(t, c.PSPReference)
	state, point, _ := w.KeyState(t, "refused")
	require.Equal(t, "done", state)
	require.Equal(t, "done", point)
	require.Equal(t, 1, w.posts(), "sent once")

	require.NoError(t, w.mock.SetFaults(mockpsp.Faults{}))
	again, err := w.service(t, time.Hour, phases.Config{}).Create(ctx, w.Tenant, "refused", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, phases.OutcomeReplay, again.Outcome)
	require.Equal(t, res.Response, again.Response)
	leases, err := w.Keys.TakeOverExpired(ctx, w.PoolAt(t, time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, leases, "nothing left for the reaper")
	require.Equal(t, 1, w.posts(), "never sent again")
	require.Empty(t, w.mock.Authorizations())
}

// The PSP acted and the answer was lost on the way back: the request's own
// attempt looks the charge up by reference and records what it finds, as if
// the PSP had answered, so the client gets its 201 at once (no 503), and
// nothing is sent twice.
func TestLostAnswerIsResolvedByLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newMockWorld(t, mockpsp.Config{Faults: mockpsp.Faults{DropRate: 1}})
	req, _ := chargestest.Request(t, visa)

	res, err := w.service(t, 0, phases.Config{}).Create(ctx, w.Tenant, "lost", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status, string(res.Response.Body))
	auths := w.mock.Authorizations()
	require.Len(t, auths, 1)
	require.Equal(t, 1, auths[0].Attempts, "found by lookup, not sent again")
	require.Equal(t, 1, w.posts())
	var c struct {
		ID           string  `json:"id"`
		PSPReference *string `json:"psp_reference"`
	}
	require.NoError(t, json.Unmarshal(res.Response.Body, &c))
	require.Equal(t, auths[0].ID, *c.PSPReference)
	require.Equal(t, auths[0].Reference, c.ID)
}

// Real PSPs forget idempotency keys (about a day later). A request whose
// worker died after the PSP authorized it and before the answer committed
// is resumed after the PSP forgot its key: a plain resend under the same key
// would be a new request there and authorize a second time. The takeover
// looks the charge up first, finds the authorization and records it.
func TestResendAfterPSPForgotKeyNeverChargesTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newMockWorld(t, mockpsp.Config{KeyTTL: time.Minute})
	req, _ := chargestest.Request(t, visa)

	_, err := w.service(t, 0, phases.Config{CrashHook: phasestest.CrashAt(phases.CrashAfterCall)}).
		Create(ctx, w.Tenant, "forgot", phases.Parsed(req))
	require.ErrorIs(t, err, phasestest.ErrCrash)
	require.Len(t, w.mock.Authorizations(), 1)

	w.offset.Store(int64(2 * time.Minute)) // the PSP has forgotten the key
	res, err := w.service(t, w.Keys.Lease()+time.Second, phases.Config{}).Create(ctx, w.Tenant, "forgot", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status, string(res.Response.Body))
	auths := w.mock.Authorizations()
	require.Len(t, auths, 1, "never charged twice")
	require.Equal(t, chargeID(t, res.Response), auths[0].Reference)
	require.Equal(t, 1, w.posts(), "the takeover looked up instead of resending")
}
