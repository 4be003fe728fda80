//go:build !chaos

package main

import "github.com/phasepay/phasepay/internal/charges"

// chaosDefect is none in normal builds: PHASEPAY_CHAOS_DEFECT has effect
// only in binaries built with the chaos tag (see chaos_on.go).
func chaosDefect(func(string) string) (func(charges.Authorizer) (charges.Authorizer, error), error) {
	return nil, nil
}
