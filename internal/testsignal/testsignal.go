// Package testsignal lets a test wait for something a background service
// did, instead of sleeping and hoping (River's rivershared/testsignal is
// the model). A service calls Signal at the point a test may care about;
// it costs nothing until the test calls Init, which must happen before the
// service starts.
package testsignal

import "time"

// WaitTimeoutDefault bounds WaitOrTimeout.
const WaitTimeoutDefault = 10 * time.Second

// TB is the part of testing.TB a signal needs (this package is imported by
// services, which must not import testing).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Signal carries values of type T from a service to a test.
type Signal[T any] struct {
	t  TB
	ch chan T
}

// Init arms the signal for t. Call it before the service starts.
func (s *Signal[T]) Init(t TB) {
	s.t = t
	s.ch = make(chan T, 1000)
}

// Signal hands v to a waiting test; a no-op until Init. It never blocks: a
// test that stops reading loses signals past the buffer.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// WaitOrTimeout returns the next value, failing the test after
// WaitTimeoutDefault. Call it from the test's goroutine only.
func (s *Signal[T]) WaitOrTimeout() T {
	s.t.Helper()
	select {
	case v := <-s.ch:
		return v
	case <-time.After(WaitTimeoutDefault):
		s.t.Fatalf("testsignal: no signal within %s", WaitTimeoutDefault)
		var zero T
		return zero
	}
}

// Next returns the next value if one is waiting.
func (s *Signal[T]) Next() (T, bool) {
	select {
	case v := <-s.ch:
		return v, true
	default:
		var zero T
		return zero, false
	}
}
