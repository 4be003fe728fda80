package chaos

import (
	"context"

	"github.com/phasepay/phasepay/tools/procs"
)

// Build compiles api, reaper and mockpsp into dir with the chaos tag (which
// enables PHASEPAY_CHAOS_CRASH and PHASEPAY_CHAOS_DEFECT, package
// internal/testutil/faults). moduleDir is the repository root.
func Build(ctx context.Context, moduleDir, dir string) error {
	return procs.Build(ctx, moduleDir, dir, "chaos")
}
