package charges_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
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

func chargeID(t *testing.T, resp idempotency.Response) string {
	t.Helper()
	var body struct {
		ID     string `json:"id"`
		Charge string `json:"charge"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &body))
	if body.Charge != "" {
		return body.Charge
	}
	return body.ID
}

// A worker dies after each commit, and after the PSP answered but before
// that answer committed. The retry that comes after the lease ran out takes
// over and finishes with one charge row and one PSP authorization, in both
// commit modes.
func TestResumeAfterCrashAtEveryPoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		oneCommit bool
		at        phases.CrashPoint
		// The retry finds the key done already: a crash after the final
		// commit loses only the answer, which the replay restores.
		wantReplay bool
	}{
		{false, phases.CrashAfterClaim, false},
		{false, phases.CrashAfterCall, false},
		{false, charges.CrashAfterPSPAuthorized, true},
		{true, phases.CrashAfterClaim, false},
		{true, charges.CrashAfterChargeCreated, false},
		{true, phases.CrashAfterCall, false},
		{true, charges.CrashAfterPSPAuthorized, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("one_commit=%v/%s", tt.oneCommit, tt.at), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			req, _ := chargestest.Request(t, visa)

			dying := b.Service(t, 0, phases.Config{OneCommitPerPhase: tt.oneCommit, CrashHook: phasestest.CrashAt(tt.at)})
			_, err := dying.Create(ctx, b.Tenant, "crash", phases.Parsed(req))
			require.ErrorIs(t, err, phasestest.ErrCrash)

			// Before the lease runs out, a retry is told to wait.
			_, err = b.Service(t, time.Second, phases.Config{OneCommitPerPhase: tt.oneCommit}).Create(ctx, b.Tenant, "crash", phases.Parsed(req))
			if !tt.wantReplay {
				require.ErrorIs(t, err, idempotency.ErrInProgress)
			}

			later := b.Service(t, b.Keys.Lease()+time.Second, phases.Config{OneCommitPerPhase: tt.oneCommit})
			res, err := later.Create(ctx, b.Tenant, "crash", phases.Parsed(req))
			require.NoError(t, err)
			require.Equal(t, 201, res.Response.Status, string(res.Response.Body))
			if tt.wantReplay {
				require.Equal(t, phases.OutcomeReplay, res.Outcome)
			} else {
				require.Equal(t, phases.OutcomeTakeover, res.Outcome)
			}

			id := chargeID(t, res.Response)
			require.Len(t, b.ChargeIDs(t, "crash"), 1)
			require.Len(t, b.AuthorizationsFor(id), 1)
			state, _, _ := b.KeyState(t, "crash")
			require.Equal(t, "done", state)

			again, err := later.Create(ctx, b.Tenant, "crash", phases.Parsed(req))
			require.NoError(t, err)
			require.Equal(t, phases.OutcomeReplay, again.Outcome)
			require.Equal(t, res.Response, again.Response)
		})
	}
}

// The PSP answered, then the worker died before recording it: the worker
// that takes over must find the first authorization, not make a second. It
// looks the charge up by reference before sending anything, so the PSP
// never even sees the request again (and a PSP that forgot the key in the
// meantime could not authorize twice).
func TestPSPCalledTwiceAfterTakeoverAuthorizesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	req, _ := chargestest.Request(t, visa)

	_, err := b.Service(t, 0, phases.Config{CrashHook: phasestest.CrashAt(phases.CrashAfterCall)}).Create(ctx, b.Tenant, "k", phases.Parsed(req))
	require.ErrorIs(t, err, phasestest.ErrCrash)
	first := b.Mock.Authorizations()
	require.Len(t, first, 1)

	res, err := b.Service(t, b.Keys.Lease()+time.Second, phases.Config{}).Create(ctx, b.Tenant, "k", phases.Parsed(req))
	require.NoError(t, err)
	auths := b.AuthorizationsFor(chargeID(t, res.Response))
	require.Len(t, auths, 1)
	require.Equal(t, first[0].ID, auths[0].ID)
	require.Equal(t, 1, auths[0].Attempts, "found by lookup, not sent again")
	require.Equal(t, charges.PSPKey(chargeID(t, res.Response)), auths[0].IdempotencyKey)
}

// gatedAuthorizer blocks the first call until released: a worker stalled in
// its PSP call (GC pause, SIGSTOP, network stall) past its lease.
type gatedAuthorizer struct {
	next     charges.Authorizer
	once     sync.Once
	entered  chan struct{}
	released chan struct{}
}

func (g *gatedAuthorizer) AuthorizeOutcome(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.released
	}
	return g.next.AuthorizeOutcome(ctx, req)
}

func (g *gatedAuthorizer) Lookup(ctx context.Context, reference string) ([]psp.Authorization, error) {
	return g.next.Lookup(ctx, reference)
}

// A worker stalls past its lease; another takes over and finishes. When the
// stalled worker wakes, its commit must match no row, and it must answer its
// client with the stored response, never with one of its own.
func TestStaleWorkerCannotCommitAfterTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	req, _ := chargestest.Request(t, visa)

	gate := &gatedAuthorizer{next: b.PSP, entered: make(chan struct{}), released: make(chan struct{})}
	stalled := chargestest.NewService(t, b.Pool, b.Keys, gate, phases.Config{})
	type result struct {
		res phases.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := stalled.Create(ctx, b.Tenant, "stall", phases.Parsed(req))
		done <- result{res, err}
	}()
	<-gate.entered

	fresh, err := b.Service(t, b.Keys.Lease()+time.Second, phases.Config{}).Create(ctx, b.Tenant, "stall", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, phases.OutcomeTakeover, fresh.Outcome)

	close(gate.released)
	stale := <-done
	require.NoError(t, stale.err)
	require.Equal(t, fresh.Response, stale.res.Response, "the stalled worker must answer with the stored response")

	_, _, lv := b.KeyState(t, "stall")
	require.EqualValues(t, 2, lv)
	require.Len(t, b.ChargeIDs(t, "stall"), 1)
	require.Len(t, b.AuthorizationsFor(chargeID(t, fresh.Response)), 1)
}

// A PSP outage releases the lease at charge_created and schedules the next
// attempt: a client's retry before it is due is told when to come back and
// calls nobody; once due, it resumes at once (no wait for a lease) with the
// same charge.
func TestPSPOutageIsRetriedOnSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	req, _ := chargestest.Request(t, visa)
	svc := b.Service(t, 0, phases.Config{})

	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	_, outageErr := svc.Create(ctx, b.Tenant, "outage", phases.Parsed(req))
	require.ErrorIs(t, outageErr, charges.ErrPSPUnavailable)
	rec, err := b.Keys.Lookup(ctx, b.Pool, b.Tenant, "outage")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateStarted, rec.State)
	require.Equal(t, charges.PointChargeCreated, rec.Point)
	require.False(t, rec.Leased)
	require.Equal(t, 1, rec.Attempts)
	require.Empty(t, b.Mock.Authorizations())
	var unavailable *charges.UnavailableError
	require.ErrorAs(t, outageErr, &unavailable)
	require.Equal(t, rec.ObjectID, unavailable.ObjectID, "the 503 names the charge that exists")
	require.Positive(t, unavailable.RetryAfterSeconds())

	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{}))
	_, err = svc.Create(ctx, b.Tenant, "outage", phases.Parsed(req))
	var wait *idempotency.WaitError
	require.ErrorAs(t, err, &wait, "a retry before the next attempt is due waits")
	require.Equal(t, rec.ObjectID, wait.ObjectID)
	require.Empty(t, b.Mock.Authorizations(), "the (now healthy) PSP is not called before the attempt is due")

	// Due: the retry resumes at once.
	due := b.Service(t, 2*time.Second, phases.Config{})
	res, err := due.Create(ctx, b.Tenant, "outage", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, phases.OutcomeTakeover, res.Outcome)
	require.Equal(t, 201, res.Response.Status)
	require.Len(t, b.ChargeIDs(t, "outage"), 1)
	require.Len(t, b.AuthorizationsFor(chargeID(t, res.Response)), 1)
}

func TestDeclinedChargeIsStoredAsProblem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	req, _ := chargestest.Request(t, `{"amount":500,"currency":"eur","payment_method":"pm_card_chargeDeclined"}`)
	svc := b.Service(t, 0, phases.Config{})

	res, err := svc.Create(ctx, b.Tenant, "declined", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 402, res.Response.Status)
	require.Equal(t, "application/problem+json", res.Response.ContentType)
	var p struct{ Code, Charge string }
	require.NoError(t, json.Unmarshal(res.Response.Body, &p))
	require.Equal(t, "card_declined", p.Code)

	c, err := svc.Get(ctx, b.Tenant, p.Charge)
	require.NoError(t, err)
	require.Equal(t, charges.StatusDeclined, c.Status)
	require.NotNil(t, c.DeclineCode)

	_, err = svc.Get(ctx, b.Tenant+1, p.Charge)
	require.ErrorIs(t, err, charges.ErrNotFound)
}
