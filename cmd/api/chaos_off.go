//go:build !chaos

package main

import (
	"context"
	"log/slog"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/phases"
)

// chaosFaults are none in normal builds: PHASEPAY_CHAOS_CRASH and
// PHASEPAY_CHAOS_DEFECT have effect only in binaries built with the chaos
// tag (see chaos_on.go).
func chaosFaults(func(string) string, *slog.Logger) (func(context.Context, phases.CrashPoint) error, func(charges.Authorizer) (charges.Authorizer, error), error) {
	return nil, nil, nil
}
