package charges_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// authorized returns the id of a new authorized charge of 1000.
func authorized(t *testing.T, b *chargestest.Bundle, svc *charges.Service) string {
	t.Helper()
	req, _ := chargestest.Request(t, visa)
	res, err := svc.Create(context.Background(), b.Tenant, "auth", phases.Parsed(req))
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
		errs   [16]error // each request's, asserted on the test's goroutine
	)
	for i := range errs {
		wg.Go(func() {
			var res phases.Result
			var err error
			if i%2 == 0 {
				req, perr := charges.ParseCaptureRequest(id, []byte(`{}`))
				if perr != nil {
					errs[i] = perr
					return
				}
				res, err = svc.Capture(ctx, b.Tenant, fmt.Sprintf("c%d", i), id, phases.Parsed(req))
			} else {
				req, perr := charges.ParseVoidRequest(id, []byte(`{}`))
				if perr != nil {
					errs[i] = perr
					return
				}
				res, err = svc.Void(ctx, b.Tenant, fmt.Sprintf("v%d", i), id, phases.Parsed(req))
			}
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			status[res.Response.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
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
	res, err := svc.Capture(ctx, b.Tenant, "cap", id, phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 200, res.Response.Status, string(res.Response.Body))

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		status = map[int]int{}
		errs   [10]error // each refund's, asserted on the test's goroutine
	)
	for i := range errs {
		wg.Go(func() {
			req, _, err := charges.ParseRefundRequest(fmt.Appendf(nil, `{"charge":%q,"amount":300}`, id))
			if err != nil {
				errs[i] = err
				return
			}
			res, err := svc.Refund(ctx, b.Tenant, fmt.Sprintf("r%d", i), phases.Parsed(req))
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			status[res.Response.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
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
	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{ErrorRate: 1}))
	req, _ := chargestest.Request(t, visa)
	_, err := svc.Create(ctx, b.Tenant, "auth", phases.Parsed(req))
	require.ErrorIs(t, err, charges.ErrPSPUnavailable)
	id := b.ChargeIDs(t, "auth")[0]

	capture, err := charges.ParseCaptureRequest(id, []byte(`{}`))
	require.NoError(t, err)
	_, err = svc.Capture(ctx, b.Tenant, "cap", id, phases.Parsed(capture))
	require.ErrorIs(t, err, charges.ErrChargePending)

	require.NoError(t, b.Mock.SetFaults(mockpsp.Faults{}))
	_, err = b.Pool.Exec(ctx, `UPDATE idempotency_keys SET next_attempt_at = NULL WHERE key = 'auth'`)
	require.NoError(t, err)
	res, err := svc.Create(ctx, b.Tenant, "auth", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status)
	res, err = svc.Capture(ctx, b.Tenant, "cap", id, phases.Parsed(capture))
	require.NoError(t, err)
	require.Equal(t, 200, res.Response.Status, string(res.Response.Body))
	require.Len(t, b.Mock.Captures(), 1)
}

// pitfall C5 "A refused request's key names an object that does not
// exist": a refund its charge does not allow (not captured, or more than is
// left) makes no refund, and its key names none (the key view's object_id
// is null), in both the claim's transaction and with one commit per phase;
// a refund that is made is named as before.
func TestRefusedRefundKeyNamesNoObject(t *testing.T) {
	t.Parallel()
	for _, oneCommit := range []bool{false, true} {
		t.Run(fmt.Sprintf("one_commit=%v", oneCommit), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			svc := b.Service(t, 0, phases.Config{OneCommitPerPhase: oneCommit})
			id := authorized(t, b, svc)
			refund := func(key, body string) int {
				t.Helper()
				req, _, err := charges.ParseRefundRequest([]byte(body))
				require.NoError(t, err)
				res, err := svc.Refund(ctx, b.Tenant, key, phases.Parsed(req))
				require.NoError(t, err)
				return res.Response.Status
			}
			objectOf := func(key string) string {
				t.Helper()
				v, err := idempotency.GetView(ctx, b.Pool, b.Tenant, key)
				require.NoError(t, err)
				return v.ObjectID
			}

			require.Equal(t, 400, refund("not-captured", fmt.Sprintf(`{"charge":%q}`, id)))
			require.Empty(t, objectOf("not-captured"), "charge_not_refundable made no refund")

			req, err := charges.ParseCaptureRequest(id, []byte(`{}`))
			require.NoError(t, err)
			_, err = svc.Capture(ctx, b.Tenant, "cap", id, phases.Parsed(req))
			require.NoError(t, err)
			require.Equal(t, 400, refund("too-much", fmt.Sprintf(`{"charge":%q,"amount":5000}`, id)))
			require.Empty(t, objectOf("too-much"), "amount_too_large made no refund")

			require.Equal(t, 201, refund("made", fmt.Sprintf(`{"charge":%q,"amount":100}`, id)))
			made := objectOf("made")
			require.Regexp(t, `^re_`, made)
			_, err = svc.GetRefund(ctx, b.Tenant, made)
			require.NoError(t, err, "the key names a refund that answers")
		})
	}
}
