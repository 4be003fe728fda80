package phases

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A phase that made the object but did not set Run.Object left the run
// marked as holding it. The next call got a nil object, and was told it
// was Fresh, so it skipped the lookup that precedes a resend. The run now
// loads an object no phase set before its call, and the call is not Fresh.
func TestRunLoadsAnObjectNoPhaseSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	e, err := New(w.pool(t, 0), w.store, Config{})
	require.NoError(t, err)
	var (
		loads int
		seen  *int
		fresh bool
	)
	op := &Operation[*int]{Name: "things.forget", Method: "POST", Path: pokePattern, Parse: w.parse,
		Load: func(context.Context, *Tx, *Run[*int]) (*int, error) {
			loads++
			n := 7
			return &n, nil
		},
		Phases: []Phase[*int]{{
			To:     "made",
			Commit: func(context.Context, *Tx, *Run[*int]) (Next, error) { return Proceed(), nil },
		}, {
			To: Done,
			Call: func(_ context.Context, run *Run[*int]) (CallOutcome, error) {
				seen, fresh = run.Object, run.Fresh
				return CallOutcome{Class: Success}, nil
			},
			Commit: func(context.Context, *Tx, *Run[*int]) (Next, error) {
				return Respond(Response{Status: 200, ContentType: "text/plain", Body: []byte("ok")}), nil
			},
		}},
	}
	Register(e, op)
	_, err = Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.NoError(t, err)
	require.NotNil(t, seen, "the call got an object no phase set and Load never read")
	require.Equal(t, 1, loads)
	require.False(t, fresh, "an object the run loaded may have been sent before")
}

// A call whose key the service spent (Renew) is committed, and its phase
// must record the renewed call and go again. A phase that proceeds instead
// fails the run, and nothing it wrote commits.
func TestRenewedCallMustGoAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	e, err := New(w.pool(t, 0), w.store, Config{})
	require.NoError(t, err)
	t.Cleanup(e.Wait)
	calls := 0
	renewals := 0
	for _, tc := range []struct {
		name  string
		again bool
	}{{"things.renew", true}, {"things.renew.proceeds", false}} {
		op := w.op(tc.name, Phase[struct{}]{
			To: Done,
			Call: func(context.Context, *Run[struct{}]) (CallOutcome, error) {
				calls++
				if calls == 1 || !tc.again {
					return CallOutcome{Class: Unknown, Renew: true}, nil
				}
				return CallOutcome{Class: Success}, nil
			},
			Commit: func(_ context.Context, tx *Tx, _ *Run[struct{}]) (Next, error) {
				if calls == 1 || !tc.again {
					renewals++
					tx.Queue(`INSERT INTO tenants (name) VALUES ('renewed')`)
					if tc.again {
						return Again(), nil
					}
					return Proceed(), nil
				}
				return Respond(Response{Status: 200, ContentType: "text/plain", Body: []byte("ok")}), nil
			},
		})
		Register(e, op)
		_, err := Do(ctx, e, op, w.tenant, tc.name, pokePath("a"), AsSent([]byte(`{"n":1}`)))
		if tc.again {
			require.NoError(t, err)
			require.Equal(t, 2, calls, "renewed once, then called again")
		} else {
			require.ErrorContains(t, err, "must go again after a renewed call")
		}
	}
	var n int
	require.NoError(t, w.pool(t, 0).QueryRow(ctx, `SELECT count(*) FROM tenants WHERE name = 'renewed'`).Scan(&n))
	require.Equal(t, 1, n, "only the renewal that went again committed")
	require.Equal(t, 2, renewals)
}

// Incarnations past ObjectIDAttempts ask for a random id, and only they.
func TestIncarnationsAreDerivedThenRandom(t *testing.T) {
	t.Parallel()
	for n := range ObjectIDAttempts {
		got, ok := incarnation(n).Derived()
		require.True(t, ok)
		require.Equal(t, n, got)
	}
	_, ok := incarnation(ObjectIDAttempts).Derived()
	require.False(t, ok)
}
