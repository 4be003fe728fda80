package idempotency

import "time"

// State is the coarse state of a key.
type State string

// The states of a key. A key is started from its claim until the
// transaction that stores its response; then it is done for good. A started
// key still unresolved GIVE_UP_AFTER after its claim becomes needs_attention
// at its next failed attempt: no more automatic attempts, until an operator
// retries (back to started) or resolves it (done).
const (
	StateStarted        State = "started"
	StateDone           State = "done"
	StateNeedsAttention State = "needs_attention"
)

// RecoveryPoint names the last committed step of a started request. The
// caller defines its own points between these two.
type RecoveryPoint string

// The recovery points every request has.
const (
	// PointStart: claimed, nothing else committed.
	PointStart RecoveryPoint = "start"
	// PointDone: the response is stored.
	PointDone RecoveryPoint = "done"
)

// Response is a final answer, stored to be replayed byte for byte.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

// Record is a stored key as a claim or lookup read it.
type Record struct {
	TenantID  int64
	Key       string
	CreatedAt time.Time
	Request   Canonical
	State     State
	Point     RecoveryPoint
	// LockVersion is the fencing token: bumped by every takeover.
	LockVersion int64
	// Leased reports whether a lease was valid when the record was read,
	// by the database's clock.
	Leased bool
	// Attempts counts runs that released the lease without finishing.
	Attempts int
	// NextAttemptAt is when the next automatic attempt is due (nil: at
	// once). Due reports whether it was due when the record was read, and
	// RetryAfter how many whole seconds were left (0 when due), both by the
	// database's clock.
	NextAttemptAt *time.Time
	Due           bool
	RetryAfter    int
	// LastError is why the last attempt did not finish (also the reason a
	// needs_attention key gives).
	LastError string
	// ObjectID names what the request created (a charge id), once it has.
	ObjectID string
	// Response is set once State is StateDone.
	Response *Response
	// TraceContext is the claiming request's trace context, if it had one.
	TraceContext string
	// Operation names the operation that runs the key (phases.Operation's
	// Name), stored by its claim: what a takeover resumes it with.
	Operation string

	partial bool // read by Peek: enough to decide and answer, not to take over
}

// ID identifies one incarnation of a key: after retention drops it, the same
// (tenant, key) may be claimed again with a new CreatedAt.
type ID struct {
	TenantID  int64
	Key       string
	CreatedAt time.Time
}

// ID returns the record's identity.
func (r Record) ID() ID { return ID{TenantID: r.TenantID, Key: r.Key, CreatedAt: r.CreatedAt} }
