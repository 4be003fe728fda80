package phases

import (
	"context"
	"fmt"
	"strings"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// Operation is one kind of idempotent request. It has a name, the requests
// it serves, and its phases from Start to Done.
//
// S is what the phases work on (a charge, a refund). The first phase makes
// it, or Load reads it when a run resumes, and each phase hands it on.
type Operation[S any] struct {
	// Name identifies the operation for good ("charges.create"). Every key
	// it claims stores it, and Resume finds the operation by it. Its spans
	// are Name, and Name+".resume" for a run that took a key over. Never
	// rename an operation whose keys may be unfinished.
	Name string
	// Method and Path are the requests it serves. Path's {name} segments
	// match any one segment ("/v1/charges/{id}/capture"), which Segment
	// reads.
	Method, Path string
	// Parse parses and fingerprints a body sent to path (NewRequest). Its
	// error refuses the request before its key decides anything. Only a
	// body AsSent needs it.
	Parse func(path string, body []byte) (Request, error)
	// Admit, if set, reads in the claim's transaction before the claim
	// commits, for a new or an unfinished key alike.
	//
	// Its error rolls the claim back. A request it turns away (an unknown
	// charge, say) leaves no key, and may be retried with the same key.
	Admit func(ctx context.Context, tx *Tx, tenantID int64, req Request) error
	// ObjectID returns the id of the object the request creates or acts on.
	// The key records it with the first phase, and Load finds the object
	// by it.
	//
	// Derive the id from what a retry carries (tenant, key, request), so
	// that a retry whose claim was lost in a failover finds the same id.
	// The incarnation says which one of the key to derive it for.
	ObjectID func(tenantID int64, key string, req Request, inc Incarnation) string
	// Load reads the object of a run that resumes past Start, as its last
	// committed phase left it.
	Load func(ctx context.Context, tx *Tx, run *Run[S]) (S, error)
	// Phases lead from Start to Done, in order. The last reaches Done, and
	// only it.
	Phases []Phase[S]
}

// Phase is one step between two recovery points. It makes an optional
// foreign call, then commits.
//
// Phases commit together unless a foreign call stands between them. Those
// before the first call commit with the claim. A phase with a call starts
// a transaction that the call-less phases after it join. A commit is
// needed before a foreign call, so that a crash during the call finds what
// it acts on, and at the end. Any other would cost a round trip and make
// nothing more recoverable.
type Phase[S any] struct {
	// To is the recovery point the phase reaches.
	To Point
	// Call, if set, is made before the phase's transaction, outside any
	// transaction, under a lease a heartbeat renews. Its Class decides
	// what happens (see Class).
	Call func(ctx context.Context, run *Run[S]) (CallOutcome, error)
	// Commit writes the phase's effects in tx and says what comes next.
	// The engine fences tx and commits it with To. A status change's event
	// belongs here, in the same tx.
	Commit func(ctx context.Context, tx *Tx, run *Run[S]) (Next, error)
}

// Next is what a phase's Commit decides comes next.
//
// The zero Next decides nothing. A Commit that returns it fails the run,
// so that no phase can leave its decision unsaid.
type Next struct {
	kind     nextKind
	response Response
}

type nextKind int

const (
	unsaid nextKind = iota
	proceed
	respond
	again
)

// Proceed commits the phase's recovery point and goes on to the next
// phase. The phase to Done cannot return it.
func Proceed() Next { return Next{kind: proceed} }

// Respond ends the request with resp, stored for replay in the phase's own
// transaction. It is the last phase's answer, or one decided early (a
// request the object's state does not allow).
func Respond(resp Response) Next { return Next{kind: respond, response: resp} }

// Again, from a phase with a call, commits the phase's effects without
// moving the key, and makes the call again.
//
// It is how a charge moves to its next PSP after a refusal. The refusal
// and the new attempt commit together, before anything is sent to the new
// PSP. The next call is Fresh, since this run committed what it starts from.
func Again() Next { return Next{kind: again} }

func (n Next) String() string {
	switch n.kind {
	case proceed:
		return "proceed"
	case respond:
		return "respond"
	case again:
		return "again"
	}
	return "unsaid"
}

// Run is one run of an operation on one key. Its phases share it.
type Run[S any] struct {
	// Lease is the run's hold on the key. Lease.Record is the key as the
	// run found it.
	Lease *idempotency.Lease
	// ObjectID is the key's object (Operation.ObjectID, or the key's record).
	ObjectID string
	// Object is the run's state. The first phase sets it, or Load reads it.
	Object S
	// Fresh says, in a Call, that this run committed the point before it.
	// Nothing can have been sent yet, so the call may skip the lookup that
	// precedes a resend.
	Fresh bool

	loaded bool      // Object is in hand, set by a commit of this run or loaded
	done   *Response // the answer stored, once a phase responded
}

// Request is the stored request the run executes.
func (r *Run[S]) Request() Request { return r.Lease.Record.Request }

// Incarnation is which object id ObjectID is asked for. That is the one
// derived for an incarnation of the key, or a random one.
type Incarnation struct {
	n      int
	random bool
}

// Derived returns the incarnation to derive the id for, from 0. False asks
// for a random id, the last resort after ObjectIDAttempts incarnations.
func (i Incarnation) Derived() (n int, ok bool) { return i.n, !i.random }

// ObjectIDAttempts bounds the incarnations whose derived ids a claim tries.
//
// The same key and body claimed again after retention, over and over,
// makes each new claim try every id before its own, one exchange each.
// Past the bound a claim asks for a random id, and its key is no longer
// protected from a claim lost in a failover.
const ObjectIDAttempts = 8

// incarnation is what the n-th try asks Operation.ObjectID for.
func incarnation(n int) Incarnation {
	if n < ObjectIDAttempts {
		return Incarnation{n: n}
	}
	return Incarnation{random: true}
}

// check refuses an operation that could never reach Done, a programming
// error found when it is registered.
func (op *Operation[S]) check() error {
	switch {
	case op.Name == "" || strings.TrimSpace(op.Name) != op.Name:
		return fmt.Errorf("an operation needs a name")
	case op.Method == "":
		return fmt.Errorf("%s: Method is required", op.Name)
	case op.Load == nil:
		return fmt.Errorf("%s: Load is required", op.Name)
	case len(op.Phases) == 0:
		return fmt.Errorf("%s: no phases", op.Name)
	}
	seen := map[Point]bool{Start: true}
	for i, p := range op.Phases {
		last := i == len(op.Phases)-1
		switch {
		case p.Commit == nil:
			return fmt.Errorf("%s: the phase to %s has no Commit", op.Name, p.To)
		case seen[p.To]:
			return fmt.Errorf("%s: recovery point %s reached twice (or start)", op.Name, p.To)
		case (p.To == Done) != last:
			return fmt.Errorf("%s: the last phase, and only it, must reach done", op.Name)
		}
		seen[p.To] = true
	}
	return nil
}

// after returns the index of the phase that leaves point.
func (op *Operation[S]) after(point Point) (int, bool) {
	if point == Start {
		return 0, true
	}
	for i, p := range op.Phases {
		if p.To == point {
			return i + 1, i+1 < len(op.Phases)
		}
	}
	return 0, false
}

// span returns the end of the transaction that phase i starts. That is the
// next phase with a call, or i+1 with OneCommitPerPhase.
func (op *Operation[S]) span(i int, oneCommit bool) int {
	end := i + 1
	for !oneCommit && end < len(op.Phases) && op.Phases[end].Call == nil {
		end++
	}
	return end
}

// withClaim returns how many phases commit in the claim's transaction.
// Those are the phases before the first call, or none with
// OneCommitPerPhase.
func (op *Operation[S]) withClaim(oneCommit bool) int {
	if oneCommit || op.Phases[0].Call != nil {
		return 0
	}
	return op.span(0, false)
}

// Segment returns the segment of path that pattern's {name} matches, or "".
// Operations read their path parameters from the stored request with it.
func Segment(pattern, path, name string) string {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return ""
	}
	for i, p := range ps {
		if p == "{"+name+"}" {
			return xs[i]
		}
	}
	return ""
}
