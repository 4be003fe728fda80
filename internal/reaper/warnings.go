package reaper

import (
	"sync"
	"time"
)

// WarnRepeat is how often the reaper repeats a warning whose count has not
// changed: requests that need an operator, or due keys nobody picks up.
const WarnRepeat = time.Minute

// countWarning spaces the lines of one warning that a pass would otherwise
// log every Interval while its condition lasts (86,400 lines a day at the
// default interval during one incident, each saying the same): it is
// logged when its count changes, and repeated once every WarnRepeat while
// the count stays above zero; its end (the count back to zero) is logged
// once, at INFO.
type countWarning struct {
	mu     sync.Mutex
	last   int64
	at     time.Time // when it was last logged
	logged bool
}

// next says whether a count of n, at now, is to be logged (warn) or its
// end is (ended), and remembers it if so.
func (w *countWarning) next(n int64, now time.Time) (warn, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case n > 0 && (!w.logged || n != w.last || now.Sub(w.at) >= WarnRepeat):
		w.last, w.at, w.logged = n, now, true
		return true, false
	case n == 0 && w.logged && w.last > 0:
		w.last, w.at = 0, now
		return false, true
	}
	return false, false
}
