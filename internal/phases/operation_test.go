package phases

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// An operation reads its path parameters back from the stored request:
// whole segments, so a capture's path names its charge.
func TestSegment(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ch_1", Segment("/v1/charges/{id}/capture", "/v1/charges/ch_1/capture", "id"))
	require.Empty(t, Segment("/v1/charges/{id}/capture", "/v1/refunds", "id"))
	require.Empty(t, Segment("/v1/charges/{id}/capture", "/v1/charges/ch_1/capture", "other"))
}

// testOp is an operation of four phases, a call before the third:
// start → a → b ─call→ c → done.
func testOp() *Operation[int] {
	commit := func(context.Context, *Tx, *Run[int]) (Next, error) { return Proceed(), nil }
	called := func(context.Context, *Run[int]) (CallOutcome, error) { return CallOutcome{}, nil }
	return &Operation[int]{Name: "test.op", Method: "POST",
		Load: func(context.Context, *Tx, *Run[int]) (int, error) { return 0, nil },
		Phases: []Phase[int]{
			{To: "a", Commit: commit},
			{To: "b", Commit: commit},
			{To: "c", Call: called, Commit: commit},
			{To: Done, Commit: commit},
		},
	}
}

// An operation that could not run to done, or could not be told apart
// from another, is refused when it is registered. The mistake is found at
// start-up, not on the first request that reaches it.
func TestRegisterRefusesOperationsThatCannotEnd(t *testing.T) {
	t.Parallel()
	require.NotPanics(t, func() { Register(&Engine{ops: map[string]resumer{}}, testOp()) })
	for name, mutate := range map[string]func(*Operation[int]){
		"no name":          func(op *Operation[int]) { op.Name = "" },
		"no method":        func(op *Operation[int]) { op.Method = "" },
		"no Load":          func(op *Operation[int]) { op.Load = nil },
		"no phases":        func(op *Operation[int]) { op.Phases = nil },
		"no Commit":        func(op *Operation[int]) { op.Phases[0].Commit = nil },
		"a point twice":    func(op *Operation[int]) { op.Phases[0].To = "b" },
		"start reached":    func(op *Operation[int]) { op.Phases[0].To = Start },
		"last is not done": func(op *Operation[int]) { op.Phases[3].To = "d" },
		"done before last": func(op *Operation[int]) { op.Phases[0].To = Done },
	} {
		op := testOp()
		mutate(op)
		require.Panics(t, func() { Register(&Engine{ops: map[string]resumer{}}, op) }, name)
	}
	e := &Engine{ops: map[string]resumer{}}
	Register(e, testOp())
	require.Panics(t, func() { Register(e, testOp()) }, "a name registered twice")
}

// A run resumes at the phase after its recovery point.
func TestAfterFindsThePhaseThatLeavesAPoint(t *testing.T) {
	t.Parallel()
	op := testOp()
	for point, want := range map[Point]int{Start: 0, "a": 1, "b": 2, "c": 3} {
		got, ok := op.after(point)
		require.True(t, ok, "%s", point)
		require.Equal(t, want, got, "%s", point)
	}
	_, ok := op.after(Done)
	require.False(t, ok, "nothing leaves done")
	_, ok = op.after("unknown")
	require.False(t, ok)
}

// Phases commit together until a foreign call: those before the first call
// with the claim, each phase with a call with the call-less phases after
// it. One commit per phase commits each alone, and the claim alone.
func TestPhasesCommitTogetherUntilAForeignCall(t *testing.T) {
	t.Parallel()
	op := testOp()
	require.Equal(t, 2, op.withClaim(false), "a and b with the claim")
	require.Equal(t, 4, op.span(2, false), "c and done in one transaction")
	require.Equal(t, 2, op.span(1, false), "b alone, resumed at a")
	require.Zero(t, op.withClaim(true))
	for i := range op.Phases {
		require.Equal(t, i+1, op.span(i, true))
	}
	op.Phases[0].Call = op.Phases[2].Call
	require.Zero(t, op.withClaim(false), "a call first: the claim commits alone")
}

// Every crash point a run may pass is listed once, in either commit mode.
func TestCrashPointsListsEveryPoint(t *testing.T) {
	t.Parallel()
	require.Equal(t, []CrashPoint{CrashAfterClaim, CrashAfter("a"), CrashAfter("b"), CrashAfterCall, CrashAfter("c")},
		CrashPoints(testOp()))
	require.Equal(t, "after_b", CrashAfter("b").String())
}

// A run holds an object once a phase set it to anything but its zero value.
func TestHoldsIsNotTheZeroValue(t *testing.T) {
	t.Parallel()
	require.False(t, holds(&Run[*int]{}))
	require.True(t, holds(&Run[*int]{Object: new(int)}))
	require.False(t, holds(&Run[struct{ N int }]{}))
	require.True(t, holds(&Run[struct{ N int }]{Object: struct{ N int }{1}}))
}
