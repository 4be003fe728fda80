package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/faults"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/tools/chaos"
)

// A short seeded run across three mock PSPs: each in turn down, refusing
// or dropping answers for stretches, and the ordinary faults besides, with
// workers killed, frozen and crashed at every attempt boundary. At most one
// PSP may hold an authorization for any charge, the charge must record that
// one, a declined charge must never reach a second PSP, and no charge may
// start past its route's first PSP (derived ids, pitfall F3 "A second PSP after a lost claim"); failovers and
// the breakers must have been exercised.
func TestChaosRoutingShortRun(t *testing.T) {
	t.Parallel()
	dir, err := binaries()
	require.NoError(t, err)
	sum, err := chaos.Run(context.Background(), chaos.Config{
		Seed:             5,
		Intents:          120,
		Concurrency:      12,
		CrashProbability: 0.03,
		RejectRate:       0.05,
		KeyTTL:           time.Second,
		GiveUpAfter:      20 * time.Second,
		PSPs:             3,
		BinDir:           dir,
		AdminURL:         testdb.Admin(t),
	})
	require.NoError(t, err)
	t.Logf("\n%s\n%s", sum.Table(), sum.Line())
	require.Empty(t, sum.Violations)
	require.Equal(t, 120, sum.Authorized+sum.Declined+sum.Failed+sum.NeedsAttention)
	require.NotNil(t, sum.Routing)
	require.Equal(t, 3, sum.Routing.PSPs)
	require.LessOrEqual(t, sum.Routing.PSPsPerCharge, 1)
	require.Equal(t, "accepted", sum.History.Verdict)
	require.True(t, sum.History.Books.Kept(), sum.History.Books.Line())
	require.Len(t, sum.History.Books.PSPs, 3)
	require.Positive(t, sum.Routing.Failovers, "no charge failed over")
	require.Positive(t, sum.Routing.BreakerOpenings, "no breaker opened")
	require.Zero(t, sum.Routing.RoutedAround, "a charge with a derived id started past its route's first PSP")
	require.Positive(t, sum.Kills+sum.Pauses)
}

// Proof that the routing checks can fail: a build that takes an unknown
// outcome for a refusal moves charges whose answer was lost (and whose
// lookup failed) to the next PSP, which authorizes them again; the harness
// must find charges authorized at two PSPs.
func TestChaosRoutingCatchesFailoverOnUnknown(t *testing.T) {
	t.Parallel()
	dir, err := binaries()
	require.NoError(t, err)
	sum, err := chaos.Run(context.Background(), chaos.Config{
		Seed:             13,
		Intents:          60,
		Concurrency:      8,
		CrashProbability: 0.01,
		DropRate:         0.3,
		LookupErrorRate:  0.6,
		PSPs:             3,
		BinDir:           dir,
		Defect:           faults.DefectFailoverOnUnknown,
		AdminURL:         testdb.Admin(t),
	})
	require.NoError(t, err)
	t.Logf("\n%s", sum.Table())
	found := false
	for _, v := range sum.Violations {
		if strings.Contains(v, "authorized at 2 PSPs") {
			found = true
		}
	}
	require.True(t, found, "violations: %v", sum.Violations)
	require.False(t, sum.History.Books.Kept(), "the checker's reading of the books missed it")
}
