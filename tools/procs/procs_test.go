package procs

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// superviseSh supervises a shell script as the harness supervises api and
// reaper, and stops it when the test ends.
func superviseSh(t *testing.T, script string) *Process {
	t.Helper()
	p := New("sh", "/bin/sh", nil, "-c", script)
	require.NoError(t, p.Start())
	go p.Supervise(20 * time.Millisecond)
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	return p
}

// A process that exits by itself (as an api did when its database went
// away) is an unplanned exit, reported with its exit status and last
// words; the supervisor still restarts it, so the run goes on.
func TestProcessExitingByItselfIsAnUnplannedExit(t *testing.T) {
	t.Parallel()
	p := superviseSh(t, `echo '{"msg":"database unreachable"}' >&2; exit 1`)
	require.Eventually(t, func() bool { return p.Restarts() >= 2 }, 10*time.Second, 10*time.Millisecond)
	exits := p.UnplannedExits()
	require.GreaterOrEqual(t, len(exits), 2)
	require.Contains(t, exits[0], "exit status 1")
	require.Contains(t, exits[0], "database unreachable")
}

// The harness's own kills, crashes at chaos crash points (the process logs
// the point, then SIGKILLs itself) and the final stop are planned.
func TestHarnessKillsAndCrashPointsAreNotUnplannedExits(t *testing.T) {
	t.Parallel()
	killed := superviseSh(t, `exec sleep 60`)
	killed.Signal(syscall.SIGKILL)
	require.Eventually(t, func() bool { return killed.Restarts() >= 1 }, 10*time.Second, 10*time.Millisecond)

	crashed := superviseSh(t, `echo '{"level":"WARN","msg":"chaos crash","point":"after_claim"}' >&2; kill -9 $$`)
	require.Eventually(t, func() bool { return crashed.Restarts() >= 2 }, 10*time.Second, 10*time.Millisecond)

	stopped := superviseSh(t, `exec sleep 60`)
	stopped.Stop(5 * time.Second)

	require.Empty(t, killed.UnplannedExits())
	require.Empty(t, crashed.UnplannedExits())
	require.Empty(t, stopped.UnplannedExits())
}

// A SIGKILL the harness did not send is not one of its kills, even though
// the signal is the same.
func TestSIGKILLFromElsewhereIsAnUnplannedExit(t *testing.T) {
	t.Parallel()
	p := superviseSh(t, `kill -9 $$`)
	require.Eventually(t, func() bool { return len(p.UnplannedExits()) >= 1 }, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, p.UnplannedExits()[0], "signal: killed")
}

func TestTicksSinceCountsNewProcessesFromZero(t *testing.T) {
	t.Parallel()
	before := map[int]int64{1: 100, 2: 50, 3: 70}
	after := map[int]int64{1: 130, 2: 50, 4: 9} // 3 ended, 4 started
	require.Equal(t, int64(30+0+9), TicksSince(before, after))
	require.InDelta(t, 390.0, TicksToMillis(39), 1e-9)
}
