package phases

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// errCrash stops a run at a crash point, as a dead process would.
var errCrash = errors.New("crashed")

// An arrow that returns no transition, or goes on from the arrow to done,
// fails the run: the request is refused and its claim rolled back with the
// arrow's writes, rather than guessed at. Nothing is stored; the client may
// retry once the operation is fixed.
func TestUnsaidTransitionFailsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	pool := w.pool(t, 0)
	e, err := New(pool, w.store, Config{})
	require.NoError(t, err)
	load := func(context.Context, idempotency.DBTX, *idempotency.Lease) (struct{}, error) { return struct{}{}, nil }
	for name, commit := range map[string]func(context.Context, *Tx, *Run[struct{}]) (Transition, error){
		"unsaid": func(context.Context, *Tx, *Run[struct{}]) (Transition, error) { return Transition{}, nil },
		"next from the arrow to done": func(context.Context, *Tx, *Run[struct{}]) (Transition, error) {
			return Next(), nil
		},
	} {
		op := &Operation[struct{}]{Name: "things." + name, ResumeSpan: "things.resume", Path: pokePattern, Load: load,
			WithClaim: []Arrow[struct{}]{{To: idempotency.PointDone, Commit: commit}}}
		Register(e, op)
		_, err := Do(ctx, e, op, w.tenant, name, AsSent(w.raw("a", `{"n":1}`)))
		require.Error(t, err, name)
		_, err = w.store.Lookup(ctx, pool, w.tenant, name)
		require.ErrorIs(t, err, idempotency.ErrNotFound, "%s: the claim rolled back with the arrow", name)
	}
}

// A key is resumed by the operation its claim named, not by whichever
// registered operation's path matches its request: two operations may
// serve one path (a new version beside the old, say), and a key claimed by
// one must never be finished by the other.
func TestResumeFindsTheOperationByItsName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	ran := map[string]int{}
	op := func(name string) *Operation[struct{}] {
		return &Operation[struct{}]{Name: name, ResumeSpan: name + ".resume", Path: pokePattern,
			Load: func(context.Context, idempotency.DBTX, *idempotency.Lease) (struct{}, error) { return struct{}{}, nil },
			Steps: []Step[struct{}]{{Arrows: []Arrow[struct{}]{{To: idempotency.PointDone,
				Commit: func(context.Context, *Tx, *Run[struct{}]) (Transition, error) {
					ran[name]++
					return Respond(idempotency.Response{Status: 200, ContentType: "text/plain", Body: []byte(name)}), nil
				}}}}},
		}
	}
	register := func(e *Engine) (v1, v2 *Operation[struct{}]) {
		v1, v2 = op("things.poke"), op("things.poke.v2")
		Register(e, v1)
		Register(e, v2)
		return v1, v2
	}
	// A worker claims a key with the second operation and dies.
	dying, err := New(w.pool(t, 0), w.store, Config{CrashHook: func(_ context.Context, at CrashPoint) error {
		if at == CrashAfterClaim {
			return errCrash
		}
		return nil
	}})
	require.NoError(t, err)
	_, v2 := register(dying)
	_, err = Do(ctx, dying, v2, w.tenant, "k", AsSent(w.raw("a", `{"n":1}`)))
	require.ErrorIs(t, err, errCrash)

	// The reaper, a lease later, takes it over and resumes it by its name.
	later := w.pool(t, 2*time.Minute)
	reaper, err := New(later, w.store, Config{})
	require.NoError(t, err)
	register(reaper)
	leases, err := w.store.TakeOverExpired(ctx, later, 10)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	require.Equal(t, "things.poke.v2", leases[0].Record.Operation)
	resp, err := reaper.Resume(ctx, leases[0])
	require.NoError(t, err)
	require.Equal(t, "things.poke.v2", string(resp.Body))
	require.Equal(t, map[string]int{"things.poke.v2": 1}, ran)
}
