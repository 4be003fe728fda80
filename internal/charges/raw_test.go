package charges_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// A replay answered from its stored bytes (the FromBody methods, as the
// api calls them) is any replay to whoever watches: the same result as a
// replay of the parsed request, one span with the replay event and no
// phase, one replay counted; a re-encoded body too. One round trip each.
func TestReplayOfTheStoredBytesLooksLikeAnyReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	tb := newTelemetry()
	counter := &tripCounter{}
	pool := testdb.Pool(t, b.URL, b.T0, counter.configure)
	svc := chargestest.NewService(t, pool, b.Keys, b.PSP, tb.cfg)

	first, err := svc.Create(ctx, b.Tenant, "raw", phases.AsSent([]byte(visa)))
	require.NoError(t, err)
	require.Equal(t, phases.OutcomeNew, first.Outcome)
	tb.take(t)
	req, _ := chargestest.Request(t, visa)
	parsed, err := svc.Create(ctx, b.Tenant, "raw", phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, phases.OutcomeReplay, parsed.Outcome)
	require.Equal(t, first.Response, parsed.Response)
	parsedSpans := tb.take(t)

	for _, body := range []string{visa, "{\"payment_method\": \"pm_card_visa\", \"currency\": \"usd\", \"amount\": 1000}\n"} {
		trips := counter.n.Load()
		res, err := svc.Create(ctx, b.Tenant, "raw", phases.AsSent([]byte(body)))
		require.NoError(t, err)
		require.Equal(t, parsed, res, body)
		require.EqualValues(t, 1, counter.n.Load()-trips, "one round trip: %s", body)
		spans := tb.take(t)
		require.Equal(t, names(parsedSpans), names(spans))
		require.Equal(t, []string{phases.EventReplay}, events(spans[0]))
		require.Equal(t, b.Tenant, attrs(spans[0])["phasepay.tenant_id"].AsInt64())
	}
	require.Equal(t, map[string]int64{"new": 1, "replay": 3}, tb.outcomes(t))

	// Another body under the key is still the mismatch, an invalid one
	// still refused before anything is decided.
	_, err = svc.Create(ctx, b.Tenant, "raw", phases.AsSent([]byte(`{"amount":1001,"currency":"usd","payment_method":"pm_card_visa"}`)))
	require.ErrorIs(t, err, idempotency.ErrMismatch)
	_, err = svc.Create(ctx, b.Tenant, "raw", phases.AsSent([]byte(`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","x":1}`)))
	var perr *phases.ParseError
	require.ErrorAs(t, err, &perr)
	var verr *charges.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, map[string]int64{"new": 1, "replay": 3, "mismatch": 1}, tb.outcomes(t))
	require.Len(t, b.AuthorizationsFor(chargeID(t, first.Response)), 1)
}

// A capture's raw fingerprint covers its path, the charge's id: the same
// key and bytes on another charge are another request (422), not the
// first capture's replay; nothing is captured twice.
func TestCaptureReplayOnAnotherChargeIsAMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	svc := chargestest.NewService(t, b.Pool, b.Keys, b.PSP, phases.Config{})
	var ids []string
	for _, key := range []string{"auth-1", "auth-2"} {
		res, err := svc.Create(ctx, b.Tenant, key, phases.AsSent([]byte(visa)))
		require.NoError(t, err)
		ids = append(ids, chargeID(t, res.Response))
	}
	first, err := svc.Capture(ctx, b.Tenant, "cap", ids[0], phases.AsSent([]byte(`{}`)))
	require.NoError(t, err)
	require.Equal(t, 200, first.Response.Status)
	again, err := svc.Capture(ctx, b.Tenant, "cap", ids[0], phases.AsSent([]byte(`{}`)))
	require.NoError(t, err)
	require.Equal(t, phases.Result{Response: first.Response, Outcome: phases.OutcomeReplay}, again)
	_, err = svc.Capture(ctx, b.Tenant, "cap", ids[1], phases.AsSent([]byte(`{}`)))
	require.ErrorIs(t, err, idempotency.ErrMismatch)
	_, err = svc.Void(ctx, b.Tenant, "cap", ids[0], phases.AsSent([]byte(`{}`)))
	require.ErrorIs(t, err, idempotency.ErrMismatch, "nor on another operation's path")
	require.Len(t, b.Mock.Captures(), 1)
}
