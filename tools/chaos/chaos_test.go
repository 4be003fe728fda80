package chaos_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/faults"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/tools/chaos"
)

// binaries builds, once per test binary, the chaos build: the deliberate
// defects are switched on in it by the environment (Config.Defect).
var binaries = sync.OnceValues(func() (string, error) {
	built.Store(true)
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "phasepay-chaos-test-")
	if err != nil {
		return "", err
	}
	return dir, chaos.Build(context.Background(), root, dir)
})

// built says binaries ran, so TestMain does not build only to clean up
// when the tests that need them were not run.
var built atomic.Bool

func TestMain(m *testing.M) {
	code := m.Run()
	if !built.Load() {
		os.Exit(code)
	}
	if dir, err := binaries(); err == nil {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// A short seeded run of the harness: workers killed and frozen at random
// and crashed at phase boundaries, under PSP faults (503s, lost answers,
// final failures, failed lookups, keys forgotten after 1s, an outage
// longer than that and one longer than GIVE_UP_AFTER), and the database (a
// throw-away cluster of the run's own) stopped immediately and started
// again mid-load; every intent must end (authorized, declined, failed, or
// needs_attention with a reason) exactly once, and every api and reaper
// must ride the restart out without exiting. Authorized intents live on
// (captures, voids, refunds, held against the mock PSP's books), and a
// webhook sink with faults of its own must receive every event.
func TestChaosShortRun(t *testing.T) {
	t.Parallel()
	dir, err := binaries()
	require.NoError(t, err)
	sum, err := chaos.Run(context.Background(), chaos.Config{
		Seed:             7,
		Intents:          150,
		Concurrency:      12,
		CrashProbability: 0.03,
		DBRestarts:       1,
		DBDown:           2 * time.Second,
		RejectRate:       0.08,
		KeyTTL:           time.Second,
		Outages:          1,
		OutageLength:     2 * time.Second,
		OutageGap:        3 * time.Second,
		LongOutage:       6 * time.Second,
		GiveUpAfter:      4 * time.Second,
		BinDir:           dir,
	})
	require.NoError(t, err)
	t.Logf("\n%s\n%s", sum.Table(), sum.Line())
	require.Empty(t, sum.Violations)
	require.Equal(t, 150, sum.Authorized+sum.Declined+sum.Failed+sum.NeedsAttention)
	require.Positive(t, sum.Failed, "no final failure was exercised")
	require.Positive(t, sum.NeedsAttention, "the long outage gave nothing up")
	require.Equal(t, 2, sum.Outages)
	require.Positive(t, sum.Lookups)
	require.Positive(t, sum.Resends)
	require.Positive(t, sum.Kills+sum.Pauses)
	require.Positive(t, sum.Takeovers)
	require.Equal(t, 150, sum.Replays)
	// The independent checker saw every request, and accepted each key's
	// history; the probes under finished keys were among them.
	require.NotNil(t, sum.History)
	require.Equal(t, "accepted", sum.History.Verdict)
	require.GreaterOrEqual(t, sum.History.Partitions, 150+sum.Lives.Lives)
	require.Positive(t, sum.History.Lost, "no request lost its answer")
	require.Equal(t, 150/20, sum.MismatchProbes)
	require.True(t, sum.History.Books.Kept(), sum.History.Books.Line())
	require.Equal(t, 1, sum.DBRestarts)
	require.Zero(t, sum.UnplannedExits)
	_, err = time.ParseDuration(sum.ReaperProbe)
	require.NoError(t, err, "reaper probe: %s", sum.ReaperProbe)
	// Payment lives: captures, voids and refunds under the same chaos.
	require.Positive(t, sum.Lives.Lives)
	require.Positive(t, sum.Lives.Captures)
	require.Positive(t, sum.Lives.Voids)
	require.Positive(t, sum.Lives.Refunds)
	require.Positive(t, sum.Lives.Replays)
	// The webhook sink received every event, through its own faults.
	require.Positive(t, sum.Webhooks.Events)
	require.GreaterOrEqual(t, sum.Webhooks.Accepted, sum.Webhooks.Events)
	require.Greater(t, sum.Webhooks.Deliveries, sum.Webhooks.Accepted)
	require.Positive(t, sum.Webhooks.FailedAttempts)
	require.Positive(t, sum.Webhooks.Duplicates, "no event was delivered again after a dropped connection")

	// The report draws the run: its axis, a lane of marks for each fault
	// kind it injected, a line for each series it recorded.
	require.NotNil(t, sum.Timeline)
	kinds := map[string]bool{}
	for _, f := range sum.Timeline.Faults {
		kinds[f.Kind] = true
	}
	for _, k := range []string{"psp_outage", "db_down", "db_recovery"} {
		require.True(t, kinds[k], "no %s recorded: %v", k, kinds)
	}
	require.True(t, kinds["kill"] || kinds["pause"], "no kill nor pause recorded: %v", kinds)
	series := map[string]bool{}
	for _, s := range sum.Timeline.Series {
		series[s.Name] = true
	}
	for _, name := range []string{"started", "ended authorized", "takeovers", "latency p50", "latency p99", "pending"} {
		require.True(t, series[name], "no series %q: %v", name, series)
	}
	html, err := chaos.Report(sum, "http://127.0.0.1:8081")
	require.NoError(t, err)
	checkReport(t, string(html), sum)
}

// Proof that the harness can fail: a build whose PSP key is fresh on every
// call (the key is not propagated downstream) double-authorizes charges
// whose worker crashed after the PSP answered, and the harness says so.
func TestHarnessCatchesFreshPSPKeyDefect(t *testing.T) {
	t.Parallel()
	dir, err := binaries()
	require.NoError(t, err)
	sum, err := chaos.Run(context.Background(), chaos.Config{
		Seed:             11,
		Intents:          80,
		Concurrency:      8,
		CrashProbability: 0.1,
		BinDir:           dir,
		Defect:           faults.DefectFreshPSPKey,
		AdminURL:         testdb.Admin(t),
	})
	require.NoError(t, err)
	t.Logf("\n%s", sum.Table())
	require.NotEmpty(t, sum.Violations)
	found, books := false, false
	for _, v := range sum.Violations {
		if strings.Contains(v, "authorized 2 times by the PSP") {
			found = true
		}
		books = books || strings.HasPrefix(v, "history: PSP books: charge ch_")
	}
	require.True(t, found, "violations: %v", sum.Violations)
	// The independent checker's reading of the books finds them too.
	require.True(t, books, "violations: %v", sum.Violations)
	require.False(t, sum.History.Books.Kept())
}

// The short run again, briefly, with a PgBouncer in transaction mode
// between the workers and reapers and the database (half of them with a
// direct connection for LISTEN, half polling), and one database restart
// the pooler rides out: every intent still ends exactly once, payment
// lives and webhooks included.
func TestChaosBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	dir, err := binaries()
	require.NoError(t, err)
	sum, err := chaos.Run(context.Background(), chaos.Config{
		Seed:             13,
		Intents:          40,
		Concurrency:      8,
		CrashProbability: 0.03,
		KeyTTL:           time.Second,
		Pooler:           true,
		AdminURL:         testdb.Admin(t),
		BinDir:           dir,
	})
	require.NoError(t, err)
	t.Logf("\n%s\n%s", sum.Table(), sum.Line())
	require.Empty(t, sum.Violations)
	require.Equal(t, 40, sum.Authorized+sum.Declined+sum.Failed+sum.NeedsAttention)
	require.Positive(t, sum.Kills+sum.Pauses)
	require.Equal(t, 40, sum.Replays)
	require.Zero(t, sum.UnplannedExits)
	require.Positive(t, sum.Lives.Captures+sum.Lives.Refunds+sum.Lives.Voids)
	require.Positive(t, sum.Webhooks.Events)
	require.GreaterOrEqual(t, sum.Webhooks.Accepted, sum.Webhooks.Events)
}
