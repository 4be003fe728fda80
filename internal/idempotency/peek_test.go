package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testdb"
)

// Peek reads fewer columns than Lookup, for a probable retry: every
// decision it makes, and every answer it gives without a claim, must be
// Lookup's. What it leaves out makes its record unfit for a takeover,
// which refuses it rather than resume a run with no request.
func TestPeekDecidesAndAnswersAsLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	then := testdb.Pool(t, b.url, t0)
	due := testdb.Pool(t, b.url, t0.Add(2*time.Second))
	other, err := idempotency.Canonicalize("POST", "/v1/things", []byte(`{"n":2}`))
	require.NoError(t, err)

	check := func(q idempotency.DBTX, key string, want idempotency.Decision) idempotency.Record {
		t.Helper()
		full, err := b.store.Lookup(ctx, q, b.tenant, key)
		require.NoError(t, err)
		peek, err := b.store.Peek(ctx, q, b.tenant, key)
		require.NoError(t, err)
		require.Equal(t, want, idempotency.Decide(peek, b.req.Fingerprint))
		for _, fp := range []idempotency.Fingerprint{b.req.Fingerprint, other.Fingerprint} {
			require.Equal(t, idempotency.Decide(full, fp), idempotency.Decide(peek, fp))
		}
		require.Equal(t, full.TenantID, peek.TenantID)
		require.Equal(t, full.Key, peek.Key)
		require.Equal(t, full.State, peek.State)
		require.Equal(t, full.Leased, peek.Leased)
		require.Equal(t, full.Due, peek.Due)
		require.Equal(t, full.RetryAfter, peek.RetryAfter)
		require.Equal(t, full.ObjectID, peek.ObjectID)
		require.Equal(t, full.Response, peek.Response)
		require.Empty(t, peek.Request.Body, "the request body is what Peek does not read")
		return peek
	}

	rec, _, err := claim(ctx, then, b.store, b.tenant, "k", b.req)
	require.NoError(t, err)
	check(then, "k", idempotency.InProgress)
	lease := b.store.LeaseOf(rec)
	require.NoError(t, pgx.BeginFunc(ctx, then, func(tx pgx.Tx) error { return lease.SetObject(ctx, tx, "obj_1") }))
	_, err = lease.Release(ctx, then, errors.New("psp unavailable"), 0)
	require.NoError(t, err)
	check(then, "k", idempotency.NotDue)
	peek := check(due, "k", idempotency.TakeOver)
	_, err = b.store.TakeOver(ctx, due, peek)
	require.Error(t, err)
	require.NotErrorIs(t, err, idempotency.ErrInProgress, "not a lost race: a record no takeover may start from")
	full, err := b.store.Lookup(ctx, due, b.tenant, "k")
	require.NoError(t, err)
	require.Equal(t, rec.LockVersion, full.LockVersion, "nothing taken over")

	rec, _, err = claim(ctx, then, b.store, b.tenant, "done", b.req)
	require.NoError(t, err)
	resp := idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"id": 1}` + "\n")}
	require.NoError(t, pgx.BeginFunc(ctx, then, func(tx pgx.Tx) error { return b.store.LeaseOf(rec).Finish(ctx, tx, resp) }))
	require.Equal(t, &resp, check(then, "done", idempotency.Replay).Response)

	_, err = b.store.Peek(ctx, then, b.tenant, "none")
	require.ErrorIs(t, err, idempotency.ErrNotFound)
}
