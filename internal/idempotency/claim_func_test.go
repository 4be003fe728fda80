package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// claimFunc runs QueueClaim's claim, idempotency_keys_claim, in a
// transaction of its own, and returns whether it created the key and the
// created_at of the row it returned.
func claimFunc(t *testing.T, b *testBundle, key string) (created bool, at time.Time) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		created, at = claimIn(t, b, tx, key)
		return nil
	}))
	return created, at
}

func claimIn(t *testing.T, b *testBundle, tx pgx.Tx, key string) (created bool, at time.Time) {
	t.Helper()
	rows, err := tx.Query(context.Background(), idempotency.ClaimFuncSQLForTest, b.tenant, key, b.req.Fingerprint[:],
		b.req.Method, b.req.Path, b.req.Body, time.Minute.Microseconds(), "", "start", "", "test.op", nil, nil,
		"00000000-0000-4000-8000-000000000001")
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		values, err := rows.Values()
		require.NoError(t, err)
		created, at = values[0].(bool), values[3].(time.Time)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 1, n, "the claim returns the key's one row")
	return created, at
}

// headScans returns the scans of key heads (index or sequential, over every
// month) that this backend has made and not yet reported.
func headScans(t *testing.T, tx pgx.Tx) int64 {
	t.Helper()
	var n int64
	require.NoError(t, tx.QueryRow(context.Background(), `
		SELECT coalesce(sum(coalesce(idx_scan, 0) + seq_scan), 0) FROM pg_stat_xact_user_tables
		 WHERE relname ~ '^idempotency_key_heads_p[0-9]{6}$'`).Scan(&n))
	return n
}

// A new key, the claim's common case, costs one probe of the heads, after
// the key's lock (migrations/00016): a probe before the lock as well, to
// spare a replay the lock, cost every new key a second one. One probe reads
// each month of heads once.
func TestNewKeyClaimProbesHeadsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var months int64
	require.NoError(t, b.pool.QueryRow(ctx,
		`SELECT count(*) FROM pg_inherits WHERE inhparent = 'idempotency_key_heads'::regclass`).Scan(&months))
	require.Positive(t, months)

	for i := range 3 { // cached plans too
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			// Read before and after: the backend's counters may still
			// hold counts of earlier transactions, not yet reported.
			before := headScans(t, tx)
			created, _ := claimIn(t, b, tx, fmt.Sprintf("new-%d", i))
			require.True(t, created)
			require.Equal(t, months, headScans(t, tx)-before, "scans of the heads by a new key's claim")
			return nil
		}))
	}
}

// idempotency_keys_claim finds a key as newest() does (migrations/00016
// writes newest()'s two statements out in it, after the key's lock): no
// head, a new key; a head and its row, that row; a head whose day was
// dropped, a new key, and newest() then answers the new row.
func TestClaimFunctionFindsWhatNewestFinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	finishedKey(t, b, day(-10).Add(time.Hour), "gone", true)
	finishedKey(t, b, day(0).Add(time.Hour), "kept", true)
	_, err := b.pool.Exec(ctx, `DROP TABLE `+partitionName(day(-10)))
	require.NoError(t, err)

	newest := func(key string) (at time.Time, found bool) {
		err := b.pool.QueryRow(ctx, `SELECT created_at FROM idempotency_keys_newest($1, $2)`, b.tenant, key).Scan(&at)
		if errors.Is(err, pgx.ErrNoRows) {
			return time.Time{}, false
		}
		require.NoError(t, err)
		return at, true
	}

	keptAt, found := newest("kept")
	require.True(t, found)
	created, at := claimFunc(t, b, "kept")
	require.False(t, created)
	require.Equal(t, keptAt, at)

	_, found = newest("gone")
	require.False(t, found, "a head whose day was dropped is a miss")
	created, at = claimFunc(t, b, "gone")
	require.True(t, created, "a key whose day was dropped is claimed anew")
	newAt, found := newest("gone")
	require.True(t, found)
	require.Equal(t, at, newAt, "the newest head wins")

	created, _ = claimFunc(t, b, "fresh")
	require.True(t, created)
	created, _ = claimFunc(t, b, "fresh")
	require.False(t, created)
}
