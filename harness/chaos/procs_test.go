package chaos

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// superviseSh supervises a shell script as the harness supervises api and
// reaper, and stops it when the test ends.
func superviseSh(t *testing.T, script string) *process {
	t.Helper()
	p := newProcess("sh", "/bin/sh", nil, "-c", script)
	require.NoError(t, p.start())
	go p.supervise(20 * time.Millisecond)
	t.Cleanup(func() { p.stop(5 * time.Second) })
	return p
}

func restartsOf(p *process) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// A process that exits by itself (as an api did when its database went
// away) is an unplanned exit, reported with its exit status and last
// words; the supervisor still restarts it, so the run goes on.
func TestProcessExitingByItselfIsAnUnplannedExit(t *testing.T) {
	t.Parallel()
	p := superviseSh(t, `echo '{"msg":"database unreachable"}' >&2; exit 1`)
	require.Eventually(t, func() bool { return restartsOf(p) >= 2 }, 10*time.Second, 10*time.Millisecond)
	exits := p.unplannedExits()
	require.GreaterOrEqual(t, len(exits), 2)
	require.Contains(t, exits[0], "exit status 1")
	require.Contains(t, exits[0], "database unreachable")
}

// The harness's own kills, crashes at chaos crash points (the process logs
// the point, then SIGKILLs itself) and the final stop are planned.
func TestHarnessKillsAndCrashPointsAreNotUnplannedExits(t *testing.T) {
	t.Parallel()
	killed := superviseSh(t, `exec sleep 60`)
	killed.signal(syscall.SIGKILL)
	require.Eventually(t, func() bool { return restartsOf(killed) >= 1 }, 10*time.Second, 10*time.Millisecond)

	crashed := superviseSh(t, `echo '{"level":"WARN","msg":"chaos crash","point":"after_claim"}' >&2; kill -9 $$`)
	require.Eventually(t, func() bool { return restartsOf(crashed) >= 2 }, 10*time.Second, 10*time.Millisecond)

	stopped := superviseSh(t, `exec sleep 60`)
	stopped.stop(5 * time.Second)

	require.Empty(t, killed.unplannedExits())
	require.Empty(t, crashed.unplannedExits())
	require.Empty(t, stopped.unplannedExits())
}

// A SIGKILL the harness did not send is not one of its kills, even though
// the signal is the same.
func TestSIGKILLFromElsewhereIsAnUnplannedExit(t *testing.T) {
	t.Parallel()
	p := superviseSh(t, `kill -9 $$`)
	require.Eventually(t, func() bool { return len(p.unplannedExits()) >= 1 }, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, p.unplannedExits()[0], "signal: killed")
}

// TestRecoveredPanicIsAViolation: a panic the api recovered (and answered
// 500) is reported with where it happened; other log lines are not.
func TestRecoveredPanicIsAViolation(t *testing.T) {
	logs := `{"level":"WARN","msg":"chaos crash","point":"after_claim"}
{"level":"ERROR","msg":"panic","panic":"runtime error: invalid memory address or nil pointer dereference","stack":"goroutine 1 [running]:\nruntime/debug.Stack()\ngithub.com/phasepay/phasepay/internal/httpapi.(*server).recoverPanics.func1.1()\ngithub.com/phasepay/phasepay/internal/phases.Do[...](0x1)\n\t/src/internal/phases/engine.go:212 +0xfc8\n"}
{"level":"ERROR","msg":"request failed","error":"panic: runtime error"}
`
	got := recoveredPanics(logs)
	require.Len(t, got, 1)
	require.Equal(t, "runtime error: invalid memory address or nil pointer dereference at github.com/phasepay/phasepay/internal/phases.Do[...](0x1)", got[0])
	require.Empty(t, recoveredPanics(`{"level":"INFO","msg":"request","status":500}`))
}
