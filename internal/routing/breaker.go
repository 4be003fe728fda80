package routing

import (
	"sync"
	"time"

	"github.com/phasepay/phasepay/internal/psp"
)

// State is a breaker's state.
type State int

// The states of a breaker, as its gauge reports them.
const (
	// Closed: new charges may start at the PSP.
	Closed State = iota
	// HalfOpen: the cool-down is over; one new charge (the probe) may
	// start there, and its outcome closes or reopens the breaker.
	HalfOpen
	// Open: new charges skip the PSP.
	Open
)

func (s State) String() string {
	switch s {
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return "closed"
}

// Breaker is one PSP's circuit breaker, in one process: each api process
// (and reaper) learns a PSP's health from its own calls. That is enough
// for what a breaker decides here, where NEW charges start, and it needs
// no coordination: a process whose breaker is still closed sends a few
// more new charges to a dead PSP, where they wait (an unknown outcome never
// moves a charge) exactly as they would with no breaker at all.
//
// It opens after Threshold unknown or busy outcomes in a row; after
// Cooldown it lets one new charge through as a probe (HalfOpen), and
// another every Cooldown while no answer came back. Any answer the PSP
// gives (success or final failure, of any charge's call) closes it; an
// unknown or busy one while half-open opens it again.
//
// Why the probe is a real charge, not a health check: a PSP that answers
// lookups may still lose every authorization's answer (the mock's
// drop_rate), and only an authorization tells. The probe charge risks no
// double charge: like any charge it stays at that PSP until its outcome is
// known.
type Breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time
	onChange  func(from, to State)

	mu       sync.Mutex
	state    State
	failures int       // unknown or busy outcomes in a row
	since    time.Time // when it opened, or when the last probe went
}

// NewBreaker returns a closed breaker. onChange, if set, is called (under
// the breaker's lock: it must not call back) on every change of state.
func NewBreaker(threshold int, cooldown time.Duration, now func() time.Time, onChange func(from, to State)) *Breaker {
	if now == nil {
		now = time.Now
	}
	return &Breaker{threshold: max(threshold, 1), cooldown: cooldown, now: now, onChange: onChange}
}

// Allow reports whether a new charge may start at the PSP, and takes the
// probe's place when the breaker is half-open.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		return true
	case Open:
		if b.now().Sub(b.since) < b.cooldown {
			return false
		}
		b.set(HalfOpen)
	default: // HalfOpen: one probe per cool-down
		if b.now().Sub(b.since) < b.cooldown {
			return false
		}
	}
	b.since = b.now()
	return true
}

// Record counts one call's outcome. A call the caller abandoned
// (canceled) says nothing about the PSP and is not recorded.
func (b *Breaker) Record(class psp.Class) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch class {
	case psp.ClassSuccess, psp.ClassFinalFailure:
		b.failures = 0
		if b.state != Closed {
			b.set(Closed)
		}
	default:
		b.failures++
		if b.state == HalfOpen || (b.state == Closed && b.failures >= b.threshold) {
			b.since = b.now()
			b.set(Open)
		}
	}
}

// HoldBack reports whether a charge that must go to this PSP (pinned) is
// to be held back without a call, and for how long: while the breaker is
// open and cooling down, or a probe went out less than a cool-down ago.
// Otherwise it lets the charge through, as the probe when the breaker is
// not closed (Allow). Holding a charge is safe since nothing was sent, and
// it spares a failing PSP the load of every new charge.
func (b *Breaker) HoldBack() (time.Duration, bool) {
	b.mu.Lock()
	left := b.cooldown - b.now().Sub(b.since)
	closed := b.state == Closed
	b.mu.Unlock()
	if closed || b.Allow() {
		return 0, false
	}
	return max(left, time.Millisecond), true
}

// State returns the breaker's state, without taking a probe's place: an
// open breaker whose cool-down is over still reads Open until a new charge
// asks (Allow).
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

func (b *Breaker) set(s State) {
	from := b.state
	b.state = s
	if b.onChange != nil && from != s {
		b.onChange(from, s)
	}
}
