package charges_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/harness/chargestest"
	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
)

// authorized returns the id of a new authorized charge of 1000.
func authorized(t *testing.T, b *chargestest.Bundle, svc *charges.Service) string {
	t.Helper()
	req, _ := chargestest.Request(t, visa)
	res, err := svc.Create(context.Background(), b.Tenant, "auth", charges.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status)
	return chargeID(t, res.Response)
}

// Many captures and voids with different keys race on one charge: exactly
// one wins at phasepay and at the PSP; every loser answers 400 as if it had
// come after the winner.
func TestConcurrentCaptureAndVoidOneWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	svc := b.Service(t, 0, phases.Config{})
	id := authorized(t, b, svc)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		status = map[int]int{}
	)
	for i := range 16 {
		wg.Go(func() {
			var res phases.Result
			var err error
			if i%2 == 0 {
				req, perr := charges.ParseCaptureRequest(id, []byte(`{}`))
				require.NoError(t, perr)
				res, err = svc.Capture(ctx, b.Tenant, fmt.Sprintf("c%d", i), id, charges.Parsed(req))
			} else {
				req, perr := charges.ParseVoidRequest(id, []byte(`{}`))
				require.NoError(t, perr)
				res, err = svc.Void(ctx, b.Tenant, fmt.Sprintf("v%d", i), id, charges.Parsed(req))
			}
			require.NoError(t, err)
			mu.Lock()
			status[res.Response.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, map[int]int{200: 1, 400: 15}, status)
	require.Equal(t, 1, len(b.Mock.Captures())+len(b.Mock.Voids()))
}

// Refunds with different keys race on one captured charge: together they
// never exceed what was captured, at phasepay or at the PSP.
func TestConcurrentRefundsNeverExceedCaptured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	svc := b.Service(t, 0, phases.Config{})
	id := authorized(t, b, svc)
	req, err := charges.ParseCaptureRequest(id, []byte(`{}`))
	require.NoError(t, err)
	res, err := svc.Capture(ctx, b.Tenant, "cap", id, charges.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 200, res.Response.Status, string(res.Response.Body))

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		status = map[int]int{}
	)
	for i := range 10 {
		wg.Go(func() {
			req, _, err := charges.ParseRefundRequest(fmt.Appendf(nil, `{"charge":%q,"amount":300}`, id))
			require.NoError(t, err)
			res, err := svc.Refund(ctx, b.Tenant, fmt.Sprintf("r%d", i), charges.Parsed(req))
			require.NoError(t, err)
			mu.Lock()
			status[res.Response.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, map[int]int{201: 3, 400: 7}, status)
	c, err := svc.Get(ctx, b.Tenant, id)
	require.NoError(t, err)
	require.EqualValues(t, 1000, c.AmountCaptured)
	require.EqualValues(t, 900, c.AmountRefunded)
	var atPSP int64
	for _, r := range b.Mock.Refunds() {
		atPSP += r.Amount
	}
	require.EqualValues(t, 900, atPSP)
}

// A capture of a charge whose authorization has no known outcome yet waits
// (409 charge_pending, nothing stored); once the authorization is known, the
// same request with the same key captures.
func TestCaptureWaitsForUnresolvedAuthorization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	svc := b.Service(t, 0, phases.Config{})
	require.NoError(t, b.Mock.SetFaults(psp.Faults{ErrorRate: 1}))
	req, _ := chargestest.Request(t, visa)
	_, err := svc.Create(ctx, b.Tenant, "auth", charges.Parsed(req))
	require.ErrorIs(t, err, charges.ErrPSPUnavailable)
	id := b.ChargeIDs(t, "auth")[0]

	capture, err := charges.ParseCaptureRequest(id, []byte(`{}`))
	require.NoError(t, err)
	_, err = svc.Capture(ctx, b.Tenant, "cap", id, charges.Parsed(capture))
	require.ErrorIs(t, err, charges.ErrChargePending)

	require.NoError(t, b.Mock.SetFaults(psp.Faults{}))
	_, err = b.Pool.Exec(ctx, `UPDATE idempotency_keys SET next_attempt_at = NULL WHERE key = 'auth'`)
	require.NoError(t, err)
	res, err := svc.Create(ctx, b.Tenant, "auth", charges.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status)
	res, err = svc.Capture(ctx, b.Tenant, "cap", id, charges.Parsed(capture))
	require.NoError(t, err)
	require.Equal(t, 200, res.Response.Status, string(res.Response.Body))
	require.Len(t, b.Mock.Captures(), 1)
}
