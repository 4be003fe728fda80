package phases

import (
	"context"
	"slices"
)

// CrashPoint names a moment at which a test, or the chaos run, may kill a
// run. Only CrashAfter makes one.
type CrashPoint struct{ name string }

// String is the crash point's name ("after_claim").
func (c CrashPoint) String() string { return c.name }

// The crash points every operation has. CrashAfterCall falls after a
// foreign call answered and before its answer committed, the lost answer.
var (
	CrashAfterClaim = CrashPoint{"after_claim"}
	CrashAfterCall  = CrashPoint{"after_call"}
)

// CrashAfter is the crash point after the commit of the transaction whose
// first phase reaches point.
func CrashAfter(point Point) CrashPoint { return CrashPoint{"after_" + string(point)} }

// CrashPoints lists the crash points a run of op may pass, in either
// commit mode, each once.
func CrashPoints[S any](op *Operation[S]) []CrashPoint {
	points := []CrashPoint{CrashAfterClaim}
	add := func(p CrashPoint) {
		if !slices.Contains(points, p) {
			points = append(points, p)
		}
	}
	for i, p := range op.Phases {
		if p.Call != nil {
			add(CrashAfterCall)
			if i == 0 {
				add(CrashAfter(Start)) // Again from the first phase
			}
		}
		if p.To != Done {
			add(CrashAfter(p.To))
		}
	}
	return points
}

// crash calls the crash hook at point. Its error stops the run where it
// stands, as if its process had died (crashed).
func (e *Engine) crash(ctx context.Context, at CrashPoint) error {
	if e.cfg.CrashHook == nil {
		return nil
	}
	if err := e.cfg.CrashHook(ctx, at); err != nil {
		return crashed{err}
	}
	return nil
}

// crashed is a crash hook's error. The run keeps whatever it holds, and
// drive releases nothing.
type crashed struct{ err error }

func (c crashed) Error() string { return c.err.Error() }
func (c crashed) Unwrap() error { return c.err }
