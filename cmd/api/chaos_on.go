//go:build chaos

package main

import (
	"context"
	"log/slog"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/testutil/faults"
)

// chaosFaults, in binaries built with the chaos tag, are the faults the chaos
// harness asks for in the environment (package internal/testutil/faults): a
// crash hook (PHASEPAY_CHAOS_CRASH) and a deliberate defect wrapped around
// the PSP (PHASEPAY_CHAOS_DEFECT).
func chaosFaults(getenv func(string) string, logger *slog.Logger) (func(context.Context, phases.CrashPoint) error, func(charges.Authorizer) (charges.Authorizer, error), error) {
	hook, err := faults.CrashHook(getenv, logger)
	if err != nil {
		return nil, nil, err
	}
	wrap := func(a charges.Authorizer) (charges.Authorizer, error) { return faults.Wrap(getenv, a) }
	return hook, wrap, nil
}
