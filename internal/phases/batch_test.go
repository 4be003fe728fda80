package phases

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// batchOf queues fn for each of keys in a transaction of its own, and
// returns them as the jobs of one batch.
func batchOf(e *Engine, keys []string, fn func(tx *Tx, i int)) []*batchJob {
	jobs := make([]*batchJob, len(keys))
	for i, k := range keys {
		tx := &Tx{p: &pipeTx{pool: e.pool}}
		fn(tx, i)
		jobs[i] = &batchJob{tx: tx.p, key: batchKey{key: k}, done: make(chan struct{})}
	}
	return jobs
}

// finishBatch runs jobs as one batch, then those it sent back alone, as
// inBatchTx does, and returns each one's error.
func finishBatch(ctx context.Context, e *Engine, jobs []*batchJob) []error {
	e.runBatch(ctx, jobs)
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		<-j.done
		errs[i] = j.err
		if j.alone {
			errs[i] = j.tx.Commit(ctx)
		}
		j.tx.release()
	}
	return errs
}

// TestBatchWithALostLeaseRunsEachAlone: one key of a batch of finishes was
// taken over. Its fence fails the batch's statement, nothing of the batch
// commits, and each request runs alone: the others finish, and the one
// whose lease was lost meets ErrLeaseLost, as it would alone. A fence
// failing is never a success for anyone.
func TestBatchWithALostLeaseRunsEachAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	pool := w.pool(t, 0)
	e, err := New(pool, w.store, Config{})
	require.NoError(t, err)
	keys := []string{"a", "b", "c"}
	leases := make([]*idempotency.Lease, len(keys))
	for i, k := range keys {
		leases[i] = claimAlone(t, w, e, k)
	}
	_, err = pool.Exec(ctx, `UPDATE idempotency_keys SET lock_version = lock_version + 1 WHERE tenant_id = $1 AND key = 'b'`, w.tenant)
	require.NoError(t, err)

	jobs := batchOf(e, keys, func(tx *Tx, i int) {
		require.NoError(t, leases[i].Finish(ctx, tx, Response{Status: 200, ContentType: "application/json", Body: []byte(`{}`)}))
	})
	errs := finishBatch(ctx, e, jobs)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], idempotency.ErrLeaseLost)
	require.NoError(t, errs[2])
	require.Equal(t, BatchStats{Batches: 1, Requests: 3, Refused: 1}, e.BatchStats())
	for _, k := range []string{"a", "c"} {
		rec, err := w.store.Lookup(ctx, pool, w.tenant, k)
		require.NoError(t, err)
		require.Equal(t, idempotency.StateDone, rec.State, k)
	}
	rec, err := w.store.Lookup(ctx, pool, w.tenant, "b")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateStarted, rec.State)
}

// TestBatchOfClaimsWithAnExistingKeyRunsEachAlone: a claim of many fails
// whole when one of its keys exists, and each claim then meets its own
// decision alone: the new keys are created, the existing one is read.
func TestBatchOfClaimsWithAnExistingKeyRunsEachAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	e, err := New(w.pool(t, 0), w.store, Config{})
	require.NoError(t, err)
	claimAlone(t, w, e, "old")
	keys := []string{"new-1", "old", "new-2"}
	claims := make([]*idempotency.QueuedClaim, len(keys))
	jobs := batchOf(e, keys, func(tx *Tx, i int) {
		claims[i] = w.store.QueueClaim(tx, claimParams(t, w, keys[i]))
	})
	errs := finishBatch(ctx, e, jobs)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], idempotency.ErrKeyExists)
	require.True(t, claims[1].Found)
	require.NoError(t, errs[2])
	require.False(t, claims[0].Found)
	require.False(t, claims[0].Lease.Record.CreatedAt.IsZero())
	require.Equal(t, int64(1), e.BatchStats().Refused)
}

// TestBatchOfClaimsAnswersEachItsOwnRow: a batch of new claims commits
// together, and each claim reads the row of its own key.
func TestBatchOfClaimsAnswersEachItsOwnRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	e, err := New(w.pool(t, 0), w.store, Config{})
	require.NoError(t, err)
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%02d", 19-i) // not in the order of their locks
	}
	claims := make([]*idempotency.QueuedClaim, len(keys))
	jobs := batchOf(e, keys, func(tx *Tx, i int) {
		claims[i] = w.store.QueueClaim(tx, claimParams(t, w, keys[i]))
	})
	for i, err := range finishBatch(ctx, e, jobs) {
		require.NoError(t, err, keys[i])
		require.Equal(t, keys[i], claims[i].Lease.Record.Key)
		require.Equal(t, int64(1), claims[i].Lease.Record.LockVersion)
	}
	require.Equal(t, BatchStats{Batches: 1, Requests: 20}, e.BatchStats())
}

// TestBatchTakesNoKeyTwice: two requests for one key never share a batch,
// requests of another shape wait for a batch of their own, and a batch
// holds at most Max.
func TestBatchTakesNoKeyTwice(t *testing.T) {
	l := newLane(BatchConfig{Max: 3}, &batchStats{})
	job := func(key, sql string) *batchJob {
		return &batchJob{key: batchKey{key: key}, tx: &pipeTx{pending: []queued{{sql: sql}}}}
	}
	a1, b, a2, other, c, d := job("a", "x"), job("b", "x"), job("a", "x"), job("e", "y"), job("c", "x"), job("d", "x")
	l.waiting = []*batchJob{a1, b, a2, other, c, d}
	require.Equal(t, []*batchJob{a1, b, c}, l.take())
	require.Equal(t, []*batchJob{a2, other, d}, l.waiting)
	require.Equal(t, []*batchJob{a2, d}, l.take())
	require.Equal(t, []*batchJob{other}, l.take())
	require.Empty(t, l.waiting)
}

func claimParams(t *testing.T, w *rawWorld, key string) idempotency.ClaimParams {
	req, err := idempotency.Canonicalize("POST", "/v1/pokes", []byte(`{}`))
	require.NoError(t, err)
	return idempotency.ClaimParams{TenantID: w.tenant, Key: key, Request: req}
}

// claimAlone claims key on its own.
func claimAlone(t *testing.T, w *rawWorld, e *Engine, key string) *idempotency.Lease {
	var q *idempotency.QueuedClaim
	require.NoError(t, inPipeTx(context.Background(), e.pool, func(tx *Tx) error {
		q = w.store.QueueClaim(tx, claimParams(t, w, key))
		return nil
	}))
	return q.Lease
}
