package phases

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// A phase that decides nothing, or proceeds from the phase to done, fails
// the run rather than being guessed at. Its claim rolls back with its
// writes, and nothing is stored. The client may retry once the operation is
// fixed.
func TestUnsaidNextFailsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	pool := w.pool(t, 0)
	e, err := New(pool, w.store, Config{})
	require.NoError(t, err)
	for name, commit := range map[string]func(context.Context, *Tx, *Run[struct{}]) (Next, error){
		"unsaid":                         func(context.Context, *Tx, *Run[struct{}]) (Next, error) { return Next{}, nil },
		"proceed from the phase to done": func(context.Context, *Tx, *Run[struct{}]) (Next, error) { return Proceed(), nil },
	} {
		op := w.op("things."+name, Phase[struct{}]{To: Done, Commit: commit})
		Register(e, op)
		_, err := Do(ctx, e, op, w.tenant, name, pokePath("a"), AsSent([]byte(`{"n":1}`)))
		require.Error(t, err, name)
		_, err = w.store.Lookup(ctx, pool, w.tenant, name)
		require.ErrorIs(t, err, idempotency.ErrNotFound, "%s: the claim rolled back with the phase", name)
	}
}

// A key is resumed by the operation its claim named, not by whichever
// operation's path matches its request. Two operations may serve one path
// (a new version beside the old), and a key claimed by one must never be
// finished by the other.
func TestResumeFindsTheOperationByItsName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	ran := map[string]int{}
	op := func(name string) *Operation[struct{}] {
		return w.op(name, Phase[struct{}]{To: Done,
			Commit: func(context.Context, *Tx, *Run[struct{}]) (Next, error) {
				ran[name]++
				return Respond(Response{Status: 200, ContentType: "text/plain", Body: []byte(name)}), nil
			}})
	}
	register := func(e *Engine) (v1, v2 *Operation[struct{}]) {
		v1, v2 = op("things.poke"), op("things.poke.v2")
		Register(e, v1)
		Register(e, v2)
		return v1, v2
	}
	// A worker claims a key with the second operation and dies. (One commit
	// per phase: the claim commits alone.)
	dying, err := New(w.pool(t, 0), w.store, Config{OneCommitPerPhase: true, CrashHook: crashAt(CrashAfterClaim)})
	require.NoError(t, err)
	_, v2 := register(dying)
	_, err = Do(ctx, dying, v2, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":1}`)))
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
