package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// publicCause is a cause that carries its public words, as a PSP client's
// failures do (internal/psp's Failure).
type publicCause struct {
	words string
	raw   error
}

func (c publicCause) Error() string        { return c.raw.Error() }
func (c publicCause) Unwrap() error        { return c.raw }
func (c publicCause) PublicReason() string { return c.words }

// withWords is a cause whose tenant-readable words are words and whose raw
// text is raw.
func withWords(words, raw string) error { return publicCause{words: words, raw: errors.New(raw)} }

// TestLastErrorNamesNoInternalAddress (the key's side): a release writes
// the public words its cause carries as last_error, for the tenant, and the
// cause's text as last_error_detail, for operators; a cause without words
// gets generic ones, never its own text. The needs-attention hook (the
// request.needs_attention event) is given the words; finishing clears both.
func TestLastErrorNamesNoInternalAddress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var given []idempotency.Record
	store, err := idempotency.NewStore(idempotency.Config{GiveUpAfter: time.Hour,
		NeedsAttention: func(_ context.Context, _ idempotency.DBTX, rec idempotency.Record) error {
			given = append(given, rec)
			return nil
		}})
	require.NoError(t, err)

	const internal = `Get "http://10.1.2.3:8443/v1/authorizations?reference=ch_1": dial tcp 10.1.2.3:8443: connect: connection refused`
	t0 := time.Now().UTC().Truncate(time.Second)
	for _, c := range []struct {
		key, words string
		cause      error
	}{
		{"words", "PSP unreachable", fmt.Errorf("authorize: %w", withWords("PSP unreachable", internal))},
		{"no words", idempotency.ReasonInternal, errors.New(internal)},
		{"database", idempotency.ReasonDatabaseUnavailable, fmt.Errorf("commit: %w", io.ErrUnexpectedEOF)},
		{"canceled", idempotency.ReasonInterrupted, fmt.Errorf("%w: %s", context.Canceled, internal)},
	} {
		rec, _, err := claim(ctx, testdb.Pool(t, b.url, t0), store, b.tenant, c.key, b.req)
		require.NoError(t, err)
		_, err = store.LeaseOf(rec).Release(ctx, testdb.Pool(t, b.url, t0), c.cause, 0)
		require.NoError(t, err)
		v, err := idempotency.GetView(ctx, b.pool, b.tenant, c.key)
		require.NoError(t, err)
		require.Equal(t, c.words, v.LastError, c.key)
		require.Equal(t, c.cause.Error(), v.LastErrorDetail, c.key)
	}

	// Given up: the hook writes the words, never the detail.
	seen, err := store.Lookup(ctx, b.pool, b.tenant, "words")
	require.NoError(t, err)
	later := testdb.Pool(t, b.url, t0.Add(2*time.Hour))
	lease, err := store.TakeOver(ctx, later, seen)
	require.NoError(t, err)
	rel, err := lease.Release(ctx, later, withWords("PSP answered 503", "status 503: <html>psp-core.internal</html>"), 0)
	require.NoError(t, err)
	require.True(t, rel.NeedsAttention)
	require.Len(t, given, 1)
	require.Equal(t, "PSP answered 503", given[0].LastError)
	views, err := idempotency.List(ctx, later, idempotency.Filter{State: idempotency.RequestNeedsAttention})
	require.NoError(t, err)
	require.Len(t, views, 1)
	require.Equal(t, "PSP answered 503", views[0].LastError)
	require.Equal(t, "status 503: <html>psp-core.internal</html>", views[0].LastErrorDetail)

	// Finished: neither is left.
	seen, err = store.Lookup(ctx, b.pool, b.tenant, "no words")
	require.NoError(t, err)
	lease, err = store.TakeOver(ctx, testdb.Pool(t, b.url, t0.Add(time.Minute)), seen)
	require.NoError(t, err)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, lease.Finish(ctx, tx, idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte("{}")}))
	require.NoError(t, tx.Commit(ctx))
	v, err := idempotency.GetView(ctx, b.pool, b.tenant, "no words")
	require.NoError(t, err)
	require.Empty(t, v.LastError)
	require.Empty(t, v.LastErrorDetail)
}
