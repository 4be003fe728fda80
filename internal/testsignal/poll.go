package testsignal

import (
	"fmt"
	"time"
)

// PollInterval is how often WaitFor checks its condition.
const PollInterval = 5 * time.Millisecond

// WaitFor checks cond every PollInterval until it holds, failing the test
// with what (a format, with args) if it does not within d.
//
// It is for conditions no service signals: a row a subprocess writes, a
// server setting, an HTTP answer. Unlike require.Eventually, cond runs on
// the caller's goroutine, so it may use require itself.
func WaitFor(t TB, d time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("testsignal: not within %s: %s", d, fmt.Sprintf(what, args...))
			return
		}
		<-tick.C
	}
}
