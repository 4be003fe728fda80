package charges_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// storedAttempt is a charge_attempts row as the tests read it.
type storedAttempt struct {
	N         int
	PSP, Key  string
	Outcome   *string
	Reference *string
}

func storedAttempts(t *testing.T, b *chargestest.Bundle, chargeID string) []storedAttempt {
	t.Helper()
	rows, err := b.Pool.Query(context.Background(),
		`SELECT n, psp, psp_key, outcome, psp_reference FROM charge_attempts WHERE tenant_id = $1 AND charge_id = $2 ORDER BY n`,
		b.Tenant, chargeID)
	require.NoError(t, err)
	defer rows.Close()
	var out []storedAttempt
	for rows.Next() {
		var r storedAttempt
		require.NoError(t, rows.Scan(&r.N, &r.PSP, &r.Key, &r.Outcome, &r.Reference))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// With one PSP a charge's first attempt, under its own PSP key, has no
// row: the charge says all of it. Authorized, declined or failed, the
// charge is the answer and no attempt is written.
func TestSinglePSPChargeWritesNoAttemptRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	svc := b.Service(t, 0, phases.Config{})
	for key, card := range map[string]string{"ok": visa, "declined": `{"amount":1000,"currency":"usd","payment_method":"pm_card_declined"}`} {
		req, _ := chargestest.Request(t, card)
		_, err := svc.Create(ctx, b.Tenant, key, phases.Parsed(req))
		require.NoError(t, err, key)
		ids := b.ChargeIDs(t, key)
		require.Len(t, ids, 1)
		require.Empty(t, storedAttempts(t, b, ids[0]), key)
		require.Len(t, b.AuthorizationsFor(ids[0]), 1, "%s: sent once, under %s", key, charges.PSPKey(ids[0]))
	}
}

// A PSP's webhook that reports an object for a single-PSP charge whose
// first attempt has no row records that attempt with the hint, open; the
// run it resumes sends the hint and ends the attempt with its answer.
func TestHintRecordsTheUnrecordedFirstAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p := &scriptedPSP{script: []func(psp.AuthorizeRequest) psp.Outcome{
		func(psp.AuthorizeRequest) psp.Outcome {
			return psp.Outcome{Class: psp.ClassUnknown, Reason: "PSP timed out"}
		},
		func(req psp.AuthorizeRequest) psp.Outcome {
			return psp.Outcome{Class: psp.ClassSuccess, FoundByLookup: true,
				Authorization: psp.Authorization{ID: req.Hint, Status: psp.StatusAuthorized}}
		},
	}}
	svc := chargestest.NewService(t, b.Pool, b.Keys, p, phases.Config{})
	req, _ := chargestest.Request(t, visa)
	_, err := svc.Create(ctx, b.Tenant, "hinted", phases.Parsed(req))
	require.ErrorIs(t, err, charges.ErrPSPUnavailable)
	id := b.ChargeIDs(t, "hinted")[0]
	require.Empty(t, storedAttempts(t, b, id))

	due, err := svc.PSPReport(ctx, b.Tenant, id, charges.DefaultPSP, "pi_reported")
	require.NoError(t, err)
	require.True(t, due)
	rows := storedAttempts(t, b, id)
	require.Len(t, rows, 1)
	require.Equal(t, storedAttempt{N: 1, PSP: charges.DefaultPSP, Key: charges.PSPKey(id), Reference: rows[0].Reference}, rows[0])
	require.Equal(t, "pi_reported", *rows[0].Reference)
	// Twice: the same row.
	_, err = svc.PSPReport(ctx, b.Tenant, id, charges.DefaultPSP, "pi_reported")
	require.NoError(t, err)
	require.Len(t, storedAttempts(t, b, id), 1)

	res, err := svc.Create(ctx, b.Tenant, "hinted", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, 201, res.Response.Status)
	require.Equal(t, "pi_reported", p.asked[1].Hint)
	require.Equal(t, charges.PSPKey(id), p.asked[1].IdempotencyKey)
	rows = storedAttempts(t, b, id)
	require.Len(t, rows, 1)
	require.Equal(t, "authorized", *rows[0].Outcome)
}
