//go:build chaos

package main

import (
	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/testutil/faults"
)

// chaosDefect, in binaries built with the chaos tag, wraps the PSP in the
// deliberate defect PHASEPAY_CHAOS_DEFECT names (package
// internal/testutil/faults), so that a reaper drives keys with the same
// defect as the api workers.
func chaosDefect(getenv func(string) string) (func(charges.Authorizer) (charges.Authorizer, error), error) {
	if getenv("PHASEPAY_CHAOS_DEFECT") == "" {
		return nil, nil
	}
	return func(a charges.Authorizer) (charges.Authorizer, error) { return faults.Wrap(getenv, a) }, nil
}
