//go:build !chaos

package main

import (
	"context"
	"log/slog"

	"github.com/phasepay/phasepay/internal/charges"
)

// chaosCrashHook is nil in normal builds: PHASEPAY_CHAOS_CRASH has effect
// only in binaries built with the chaos tag (see chaos_on.go).
func chaosCrashHook(func(string) string, *slog.Logger) (func(context.Context, charges.CrashPoint) error, error) {
	return nil, nil
}
