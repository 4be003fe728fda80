package phases

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// A phase that fails after its foreign call ended the run with the lease
// held and no attempt counted. The failures: its own error, a zero Next, a
// statement the database refuses, a row that does not decode.
//
// The reaper took the key over at every lease's end and called again, for
// ever. GIVE_UP_AFTER never applied, and retention kept the partition. Such
// a run now releases its lease counting an attempt, so GIVE_UP_AFTER hands
// the key to an operator. The tenant reads "internal error", the operator
// the error itself (last_error_detail).
func TestFailingPhaseEndsInNeedsAttention(t *testing.T) {
	t.Parallel()
	for name, commit := range map[string]func(context.Context, *Tx, *Run[struct{}]) (Next, error){
		"its own error": func(context.Context, *Tx, *Run[struct{}]) (Next, error) {
			return Next{}, errors.New("the phase's own bug")
		},
		"a zero next": func(context.Context, *Tx, *Run[struct{}]) (Next, error) {
			return Next{}, nil
		},
		"a refused statement": func(_ context.Context, tx *Tx, _ *Run[struct{}]) (Next, error) {
			tx.Queue(`SELECT 1 / 0`)
			return Respond(Response{Status: 201, ContentType: "application/json", Body: []byte(`{}`)}), nil
		},
		"a row that does not decode": func(ctx context.Context, tx *Tx, _ *Run[struct{}]) (Next, error) {
			var n int
			if err := tx.QueryRow(ctx, `SELECT 'not a number'`).Scan(&n); err != nil {
				return Next{}, err
			}
			return Respond(Response{Status: 201, ContentType: "application/json", Body: []byte(`{}`)}), nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testFailingPhaseEndsInNeedsAttention(t, commit)
		})
	}
}

func testFailingPhaseEndsInNeedsAttention(t *testing.T, commit func(context.Context, *Tx, *Run[struct{}]) (Next, error)) {
	ctx := context.Background()
	w := setupRaw(t)
	// A schedule in minutes, moved by the database's clock: attempts a
	// minute, then two, apart; given up ten minutes after the claim.
	var err error
	w.store, err = idempotency.NewStore(idempotency.Config{Lease: time.Minute, RetryBase: time.Minute,
		RetryMax: 2 * time.Minute, GiveUpAfter: 10 * time.Minute})
	require.NoError(t, err)
	var calls atomic.Int32
	op := w.op("things.fail", Phase[struct{}]{
		To: Done,
		Call: func(context.Context, *Run[struct{}]) (CallOutcome, error) {
			calls.Add(1)
			return CallOutcome{Class: Success}, nil
		},
		Commit: commit,
	})
	// A process (an api's engine, or a reaper driving one) at offset on
	// the database's clock, for one run.
	process := func(offset time.Duration, run func(*Engine, *reaper.Reaper)) {
		pool := testdb.Pool(t, w.url, w.t0.Add(offset), func(cfg *pgxpool.Config) { cfg.MaxConns = 2 })
		defer pool.Close()
		e, err := New(pool, w.store, Config{})
		require.NoError(t, err)
		defer e.Wait()
		Register(e, op)
		r, err := reaper.New(pool, w.store, e, reaper.Config{})
		require.NoError(t, err)
		run(e, r)
	}

	process(0, func(e *Engine, _ *reaper.Reaper) {
		_, err := Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":1}`)))
		require.Error(t, err)
	})
	// A reaper pass every three minutes of the database's clock, for half
	// an hour: past every lease, and past GIVE_UP_AFTER.
	for at := 3 * time.Minute; at <= 30*time.Minute; at += 3 * time.Minute {
		process(at, func(_ *Engine, r *reaper.Reaper) {
			_, err := r.RunOnce(ctx)
			require.NoError(t, err, "at +%s", at)
		})
	}

	var (
		state, lastError, detail string
		attempts                 int
		leased                   bool
	)
	require.NoError(t, w.pool(t, 30*time.Minute).QueryRow(ctx, `
SELECT state, attempts, coalesce(locked_until > phasepay_now(), false), coalesce(last_error, ''), coalesce(last_error_detail, '')
  FROM idempotency_keys WHERE tenant_id = $1 AND key = 'k'`, w.tenant).Scan(&state, &attempts, &leased, &lastError, &detail))
	require.Equal(t, string(idempotency.StateNeedsAttention), state,
		"%d foreign calls in half an hour, %d attempts counted: the key is never given up", calls.Load(), attempts)
	require.False(t, leased)
	require.Equal(t, int(calls.Load()), attempts, "every run that called counted its attempt")
	require.LessOrEqual(t, attempts, 7, "the schedule spaced the attempts out")
	require.Equal(t, idempotency.ReasonInternal, lastError, "the tenant reads stable words")
	require.NotEmpty(t, detail, "the operator reads what went wrong")
}
