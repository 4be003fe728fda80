package phases

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// An operation reads its path parameters back from the stored request:
// whole segments, so a capture's path names its charge.
func TestSegment(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ch_1", Segment("/v1/charges/{id}/capture", "/v1/charges/ch_1/capture", "id"))
	require.Empty(t, Segment("/v1/charges/{id}/capture", "/v1/refunds", "id"))
	require.Empty(t, Segment("/v1/charges/{id}/capture", "/v1/charges/ch_1/capture", "other"))
}

// An operation that could not run to done, or could not be told apart
// from another, is refused when it is registered: a programming error found
// at start-up, not on the first request that reaches it.
func TestRegisterRefusesOperationsThatCannotEnd(t *testing.T) {
	t.Parallel()
	commit := func(context.Context, *Tx, *Run[int]) (Transition, error) { return Next(), nil }
	load := func(context.Context, idempotency.DBTX, *idempotency.Lease) (int, error) { return 0, nil }
	arrow := func(to idempotency.RecoveryPoint) Arrow[int] { return Arrow[int]{To: to, Commit: commit} }
	good := func() *Operation[int] {
		return &Operation[int]{Name: "test.op", Load: load,
			WithClaim: []Arrow[int]{arrow("a")},
			Steps:     []Step[int]{{Arrows: []Arrow[int]{arrow("b"), arrow(idempotency.PointDone)}}},
		}
	}
	require.NotPanics(t, func() { Register(&Engine{ops: map[string]resumer{}}, good()) })
	for name, mutate := range map[string]func(*Operation[int]){
		"no name":          func(op *Operation[int]) { op.Name = "" },
		"no Load":          func(op *Operation[int]) { op.Load = nil },
		"no arrows":        func(op *Operation[int]) { op.WithClaim, op.Steps = nil, nil },
		"an empty step":    func(op *Operation[int]) { op.Steps = append(op.Steps, Step[int]{}) },
		"no Commit":        func(op *Operation[int]) { op.WithClaim[0].Commit = nil },
		"a point twice":    func(op *Operation[int]) { op.WithClaim[0].To = "b" },
		"start reached":    func(op *Operation[int]) { op.WithClaim[0].To = idempotency.PointStart },
		"last is not done": func(op *Operation[int]) { op.Steps[0].Arrows[1].To = "c" },
		"done before last": func(op *Operation[int]) { op.WithClaim[0].To = idempotency.PointDone },
	} {
		op := good()
		mutate(op)
		require.Panics(t, func() { Register(&Engine{ops: map[string]resumer{}}, op) }, name)
	}
	e := &Engine{ops: map[string]resumer{}}
	Register(e, good())
	require.Panics(t, func() { Register(e, good()) }, "a name registered twice")
}

// A run resumes at the arrow after its recovery point: the next in its
// step, or the first of the next step (whose foreign call runs first).
func TestAfterFindsTheArrowThatLeavesAPoint(t *testing.T) {
	t.Parallel()
	called := func(context.Context, *Run[int]) (psp.Outcome, error) { return psp.Outcome{}, nil }
	op := &Operation[int]{Name: "test.op",
		Load:      func(context.Context, idempotency.DBTX, *idempotency.Lease) (int, error) { return 0, nil },
		WithClaim: []Arrow[int]{{To: "a"}, {To: "b"}},
		Steps:     []Step[int]{{Call: called, Arrows: []Arrow[int]{{To: "c"}, {To: idempotency.PointDone}}}},
	}
	for i := range op.WithClaim {
		op.WithClaim[i].Commit = func(context.Context, *Tx, *Run[int]) (Transition, error) { return Next(), nil }
	}
	for i := range op.Steps[0].Arrows {
		op.Steps[0].Arrows[i].Commit = func(context.Context, *Tx, *Run[int]) (Transition, error) { return Next(), nil }
	}
	steps, err := op.compile()
	require.NoError(t, err)
	for point, want := range map[idempotency.RecoveryPoint]position{
		idempotency.PointStart: {0, 0}, "a": {0, 1}, "b": {1, 0}, "c": {1, 1},
	} {
		got, ok := after(steps, point)
		require.True(t, ok, point)
		require.Equal(t, want, got, point)
	}
	_, ok := after(steps, idempotency.PointDone)
	require.False(t, ok, "nothing leaves done")
	_, ok = after(steps, "unknown")
	require.False(t, ok)
}
