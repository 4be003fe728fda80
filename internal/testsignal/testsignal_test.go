package testsignal_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testsignal"
)

// fakeTB records a failure instead of ending the test.
type fakeTB struct{ failed string }

func (*fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestSignalIsANoOpUntilInit(t *testing.T) {
	t.Parallel()
	var s testsignal.Signal[int]
	s.Signal(1) // unarmed: dropped, never blocks
	s.Init(t)
	_, ok := s.Next()
	require.False(t, ok, "a signal sent before Init is not kept")
	s.Signal(2)
	require.Equal(t, 2, s.WaitOrTimeout())
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	calls := 0
	tb := &fakeTB{}
	testsignal.WaitFor(tb, time.Second, func() bool { calls++; return calls == 3 }, "three calls")
	require.Empty(t, tb.failed)
	require.Equal(t, 3, calls)
}

func TestWaitForFailsAtItsDeadline(t *testing.T) {
	t.Parallel()
	tb := &fakeTB{}
	start := time.Now()
	testsignal.WaitFor(tb, 20*time.Millisecond, func() bool { return false }, "never %s", "true")
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	require.Contains(t, tb.failed, "never true")
}
