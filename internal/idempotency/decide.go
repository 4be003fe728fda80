package idempotency

import "bytes"

// Decision is what a request gets when its key already exists.
type Decision int

// The decisions, in the order Decide tests them.
const (
	// Mismatch: the key belongs to a different request (422). Tested first:
	// a different request must never be told anything about the first one,
	// not even that it is still running.
	Mismatch Decision = iota + 1
	// Replay: the key is done; answer with its stored response.
	Replay
	// TakeOver: the key is started but nobody holds its lease (its worker
	// died, stalled or released it); take it over and resume.
	TakeOver
	// InProgress: a live worker holds the lease (409).
	InProgress
	// NotDue: the key is unfinished and free, but its next scheduled
	// attempt is not due yet (a PSP outage is being waited out): answer 503
	// with the time left, and call nobody.
	NotDue
	// Unresolved: the key needs an operator's attention (503); nothing is
	// sent again until an operator retries or resolves it.
	Unresolved
)

func (d Decision) String() string {
	switch d {
	case Mismatch:
		return "mismatch"
	case Replay:
		return "replay"
	case TakeOver:
		return "takeover"
	case InProgress:
		return "in_progress"
	case NotDue:
		return "not_due"
	case Unresolved:
		return "unresolved"
	}
	return "unknown"
}

// Decide is the inspect step of a claim that found an existing key. It is a
// pure function of the stored record and the new request's fingerprint; the
// lease's validity was computed by the database when the record was read.
func Decide(rec Record, fp Fingerprint) Decision {
	switch {
	case !bytes.Equal(rec.Request.Fingerprint[:], fp[:]):
		return Mismatch
	case rec.State == StateDone:
		return Replay
	case rec.State == StateNeedsAttention:
		return Unresolved
	case rec.Leased:
		return InProgress
	case !rec.Due:
		return NotDue
	default:
		return TakeOver
	}
}
