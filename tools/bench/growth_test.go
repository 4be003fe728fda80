package bench

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A long step of the benchmark is never silent: heartbeat reports while it
// runs, and not after it stopped.
func TestHeartbeatReportsUntilStopped(t *testing.T) {
	t.Parallel()
	var e env
	var calls, nonPositive atomic.Int32
	stop := e.heartbeat(5*time.Millisecond, func(elapsed time.Duration) {
		if elapsed <= 0 {
			nonPositive.Add(1)
		}
		calls.Add(1)
	})
	require.Eventually(t, func() bool { return calls.Load() >= 2 }, 5*time.Second, time.Millisecond)
	stop()
	n := calls.Load()
	time.Sleep(30 * time.Millisecond)
	require.Equal(t, n, calls.Load(), "no report after stop")
	require.Zero(t, nonPositive.Load(), "elapsed is the time since the start")
}
