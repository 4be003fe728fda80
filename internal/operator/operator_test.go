package operator_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/operator"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// Every pool, server and client a test starts is stopped by its
// cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const visa = `{"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}`

// setup returns a bundle whose requests are given up at their first failed
// attempt, and an operator desk that looks charges up at its mock PSP.
func setup(t *testing.T) (*chargestest.Bundle, *charges.Service, *operator.Desk) {
	t.Helper()
	cfg := idempotency.Config{GiveUpAfter: time.Nanosecond, RetryBase: time.Millisecond}
	b := chargestest.Setup(t, cfg)
	srv := httptest.NewServer(b.Mock)
	t.Cleanup(srv.Close)
	tel, err := telemetry.New(context.Background(), "operator-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg.Lease = b.Keys.Lease()
	desk, err := operator.New(b.Pool, operator.Config{Keys: cfg, PSPURL: srv.URL, Telemetry: tel})
	require.NoError(t, err)
	return b, b.Service(t, 0, phases.Config{}), desk
}

// needsAttention makes key's request fail at the PSP until it waits for an
// operator.
func needsAttention(t *testing.T, b *chargestest.Bundle, svc *charges.Service, key string) {
	t.Helper()
	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	req, _ := chargestest.Request(t, visa)
	_, err := svc.Create(context.Background(), b.Tenant, key, phases.Parsed(req))
	require.ErrorIs(t, err, idempotency.ErrUnresolved)
	state, _, _ := b.KeyState(t, key)
	require.Equal(t, "needs_attention", state)
}

// pitfall O6 "An operator's act the timeline does not show": an
// operator's retry, a resolution the PSP could not confirm and the one
// that settled the request are each a timeline entry naming the operator,
// written by the statement that acts; the refused resolution is written at
// the lock_version taking the key raised, so no lock_version appears that
// no entry explains; the resolution comes before the finish it causes.
func TestOperatorActsAreOnTheTimeline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, svc, desk := setup(t)
	needsAttention(t, b, svc, "k")

	_, err := desk.Retry(ctx, "t", "k", "bob")
	require.NoError(t, err)
	h, err := idempotency.ReadHistory(ctx, b.Pool, b.Tenant, "k")
	require.NoError(t, err)
	last := h.Entries[len(h.Entries)-1]
	require.Equal(t, idempotency.KindRetried, last.Kind)
	require.Equal(t, "bob", last.Operator)
	require.Equal(t, idempotency.RoleOperator, last.By)
	require.Equal(t, idempotency.RoleOperator, idempotency.RoleOf(last.Holder))

	// The one attempt the retry made due fails too: back to needs_attention.
	needsAttention(t, b, svc, "k")
	_, _, before := b.KeyState(t, "k")

	// The PSP cannot be asked: the resolution is refused, and recorded.
	_, _, err = desk.Resolve(ctx, "t", "k", charges.Resolution{As: charges.ResolveSucceeded, Reason: "PSP says paid", By: "alice"})
	require.ErrorIs(t, err, charges.ErrPSPLookupFailed)
	state, _, lv := b.KeyState(t, "k")
	require.Equal(t, "needs_attention", state)
	require.Equal(t, before+1, lv, "taking the key for the resolution raised lock_version")
	h, err = idempotency.ReadHistory(ctx, b.Pool, b.Tenant, "k")
	require.NoError(t, err)
	refused := h.Entries[len(h.Entries)-1]
	require.Equal(t, idempotency.KindResolutionRefused, refused.Kind)
	require.Equal(t, "alice", refused.Operator)
	require.Equal(t, string(charges.ResolveSucceeded), refused.As)
	require.Equal(t, lv, refused.LockVersion, "the entry explains the new lock_version")
	require.Contains(t, refused.Detail, "could not be asked")

	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{}))
	_, resp, err := desk.Resolve(ctx, "t", "k", charges.Resolution{As: charges.ResolveFailed, Reason: "ticket 5521, Jane at the PSP", By: "alice"})
	require.NoError(t, err)
	require.Equal(t, 402, resp.Status)
	require.NotContains(t, string(resp.Body), "5521")
	require.Contains(t, string(resp.Body), charges.ResolvedFailedReason)
	h, err = idempotency.ReadHistory(ctx, b.Pool, b.Tenant, "k")
	require.NoError(t, err)
	n := len(h.Entries)
	resolved, finished := h.Entries[n-2], h.Entries[n-1]
	require.Equal(t, idempotency.KindResolved, resolved.Kind)
	require.Equal(t, "alice", resolved.Operator)
	require.Equal(t, string(charges.ResolveFailed), resolved.As)
	require.Equal(t, "ticket 5521, Jane at the PSP", resolved.Detail, "the reason, for operators")
	require.Equal(t, lv+1, resolved.LockVersion)
	require.Equal(t, idempotency.KindFinished, finished.Kind)
	require.Equal(t, 402, finished.ResponseStatus)

	var reason string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT failure_reason FROM charges WHERE tenant_id = $1 AND idempotency_key = 'k'`,
		b.Tenant).Scan(&reason))
	require.Equal(t, charges.ResolvedFailedReason, reason, "the charge keeps stable words too")
}

// The key is checked before the PSP configuration: a request that needs
// no resolution is refused as such, also without PSP_URL, and without one
// the refusal names PSP_URL before --force.
func TestResolveChecksTheKeyFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, svc, _ := setup(t)
	desk, err := operator.New(b.Pool, operator.Config{Keys: idempotency.Config{Lease: b.Keys.Lease()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = desk.Close(context.Background()) })

	req, _ := chargestest.Request(t, visa)
	_, err = svc.Create(ctx, b.Tenant, "done", phases.Parsed(req))
	require.NoError(t, err)
	_, _, err = desk.Resolve(ctx, "t", "done", charges.Resolution{As: charges.ResolveFailed, Reason: "r", By: "alice"})
	require.ErrorIs(t, err, idempotency.ErrNotNeedsAttention, "the key, not the missing PSP")
	_, _, err = desk.Resolve(ctx, "t", "nope", charges.Resolution{As: charges.ResolveFailed, Reason: "r", By: "alice"})
	require.ErrorIs(t, err, idempotency.ErrNotFound)

	needsAttention(t, b, svc, "stuck")
	_, _, err = desk.Resolve(ctx, "t", "stuck", charges.Resolution{As: charges.ResolveFailed, Reason: "r", By: "alice"})
	require.ErrorIs(t, err, operator.ErrPSPRequired)
	msg := err.Error()
	require.Contains(t, msg, "export PSP_URL=")
	require.Less(t, strings.Index(msg, "PSP_URL"), strings.Index(msg, "--force"), "the PSP first, --force after: %s", msg)
}
