package phasestest

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/phasepay/phasepay/internal/phases"
)

// ErrCrash is what a CrashAt hook stops a run with.
var ErrCrash = errors.New("simulated crash")

// CrashAt returns a Config.CrashHook that stops every run reaching any of
// points, as if its process died there.
func CrashAt(points ...phases.CrashPoint) func(context.Context, phases.CrashPoint) error {
	return func(_ context.Context, at phases.CrashPoint) error {
		if slices.Contains(points, at) {
			return ErrCrash
		}
		return nil
	}
}

// CrashOnceAt is CrashAt for the first run that reaches any of points. The
// runs after it pass.
func CrashOnceAt(points ...phases.CrashPoint) func(context.Context, phases.CrashPoint) error {
	var done atomic.Bool
	return func(_ context.Context, at phases.CrashPoint) error {
		if slices.Contains(points, at) && done.CompareAndSwap(false, true) {
			return ErrCrash
		}
		return nil
	}
}
