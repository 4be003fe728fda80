package charges_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// scriptedPSP answers authorizations from a script, one outcome per call,
// and records what each call was asked.
type scriptedPSP struct {
	mu     sync.Mutex
	script []func(psp.AuthorizeRequest) psp.Outcome
	asked  []psp.AuthorizeRequest
}

func (s *scriptedPSP) AuthorizeOutcome(_ context.Context, req psp.AuthorizeRequest) (psp.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, req)
	if len(s.script) == 0 {
		return psp.Outcome{}, errors.New("unscripted call")
	}
	out := s.script[0](req)
	s.script = s.script[1:]
	if out.Class == psp.ClassUnknown {
		return out, &psp.Failure{Class: psp.ClassUnknown, Public: out.Reason, Err: fmt.Errorf("%w: scripted", psp.ErrUnavailable)}
	}
	return out, nil
}

func (s *scriptedPSP) Lookup(context.Context, string) ([]psp.Authorization, error) { return nil, nil }

// TestSpentKeyRenewsTheAttemptAtTheSamePSP: a PSP that reports the
// attempt's key spent (a saved 5xx replayed, or past the key window: an
// unknown outcome with NewKey) gets a new attempt at the same PSP under
// the next derived key, recorded before anything is sent under it and
// marked renewed; the old attempt ends as replaced. A PSP webhook's report
// then writes a hint on the new attempt and makes the request due, and
// the run it resumes records the PaymentIntent it reads by id.
func TestSpentKeyRenewsTheAttemptAtTheSamePSP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p := &scriptedPSP{script: []func(psp.AuthorizeRequest) psp.Outcome{
		func(psp.AuthorizeRequest) psp.Outcome {
			return psp.Outcome{Class: psp.ClassUnknown, NewKey: true, Reason: "PSP replays a saved error"}
		},
		func(psp.AuthorizeRequest) psp.Outcome {
			return psp.Outcome{Class: psp.ClassUnknown, Reason: "PSP search not yet settled"}
		},
		func(req psp.AuthorizeRequest) psp.Outcome {
			return psp.Outcome{Class: psp.ClassSuccess, FoundByLookup: true,
				Authorization: psp.Authorization{ID: req.Hint, Status: psp.StatusAuthorized}}
		},
	}}
	svc := chargestest.NewService(t, b.Pool, b.Keys, p, phases.Config{})
	req, _ := chargestest.Request(t, visa)

	_, err := svc.Create(ctx, b.Tenant, "renewed", phases.Parsed(req))
	require.ErrorIs(t, err, charges.ErrPSPUnavailable)
	ids := b.ChargeIDs(t, "renewed")
	require.Len(t, ids, 1)
	id := ids[0]
	require.Len(t, p.asked, 2, "the renewed key is asked at once, and waits")
	require.Equal(t, id+":authorize", p.asked[0].IdempotencyKey)
	require.False(t, p.asked[0].Renewed)
	require.Equal(t, id+":authorize:2", p.asked[1].IdempotencyKey)
	require.True(t, p.asked[1].Renewed)
	require.WithinDuration(t, time.Now(), p.asked[1].KeyCreatedAt, time.Minute)

	type row struct {
		N         int
		PSP, Key  string
		Outcome   *string
		Reference *string
	}
	rows := func() []row {
		r, err := b.Pool.Query(ctx, `SELECT n, psp, psp_key, outcome, psp_reference FROM charge_attempts WHERE tenant_id = $1 AND charge_id = $2 ORDER BY n`, b.Tenant, id)
		require.NoError(t, err)
		defer r.Close()
		var out []row
		for r.Next() {
			var x row
			require.NoError(t, r.Scan(&x.N, &x.PSP, &x.Key, &x.Outcome, &x.Reference))
			out = append(out, x)
		}
		return out
	}
	got := rows()
	require.Len(t, got, 2)
	require.Equal(t, "replaced", *got[0].Outcome)
	require.Equal(t, got[0].PSP, got[1].PSP, "the same PSP")
	require.Nil(t, got[1].Outcome)

	due, err := svc.PSPReport(ctx, b.Tenant, id, got[1].PSP, "pi_reported")
	require.NoError(t, err)
	require.True(t, due)
	require.Equal(t, "pi_reported", *rows()[1].Reference)

	res, err := svc.Create(ctx, b.Tenant, "renewed", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status)
	require.Equal(t, "pi_reported", p.asked[2].Hint)
	c, err := svc.Get(ctx, b.Tenant, id)
	require.NoError(t, err)
	require.Equal(t, charges.StatusAuthorized, c.Status)
	require.Equal(t, "pi_reported", *c.PSPReference)
	require.Equal(t, "authorized", *rows()[1].Outcome)

	due, err = svc.PSPReport(ctx, b.Tenant, id, got[1].PSP, "pi_again")
	require.NoError(t, err)
	require.False(t, due, "a settled charge: the report changes nothing")
	_, err = svc.PSPReport(ctx, b.Tenant, "ch_nosuchcharge", got[1].PSP, "pi_x")
	require.ErrorIs(t, err, charges.ErrNotFound)
}
