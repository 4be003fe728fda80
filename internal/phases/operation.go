package phases

import (
	"context"
	"fmt"
	"strings"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// Operation is one kind of idempotent request: a stable name, a path, and
// the arrows from start to done, grouped into the transactions that commit
// them. S is what its arrows work on (a charge, a refund): created or
// loaded once per run and handed from arrow to arrow.
//
// An operation's transactions are declared, not inferred: WithClaim holds
// the arrows that commit in the claim's own transaction (before any
// foreign call, so the claim and the first effects cost one commit), and
// each Step is one transaction of its own, after its optional foreign call.
// Reading the Operation value is reading when each recovery point commits.
type Operation[S any] struct {
	// Name identifies the operation for good ("charges.create"): it is
	// stored on every key the operation claims, Resume finds the operation
	// of a key by it, and it names the request's span. Never rename an
	// operation whose keys may still be unfinished.
	Name string
	// ResumeSpan names the span of a run that took a key over
	// ("charges.resume").
	ResumeSpan string
	// Path is the request path pattern keys of this operation are claimed
	// under, whose {name} segments match any one segment
	// ("/v1/charges/{id}/capture"); Segment reads them back from a stored
	// request.
	Path string
	// Admit, if set, runs in the claim's transaction before the claim, for
	// a new or unfinished key alike: an error rolls the claim back, so a
	// request it turns away (an unknown charge, one whose authorization is
	// not known yet) leaves no key behind and may be retried with the same
	// key. It reads; what it reads goes out with the claim.
	Admit func(ctx context.Context, tx *Tx, tenantID int64, req idempotency.Canonical) error
	// ObjectID returns the id of the object the request creates or acts on,
	// recorded on the key with its first arrow: shown to a client told to
	// wait, and what Load finds the object by. An id derived from what a
	// retry carries (tenant, key, request) is the same for a retry whose
	// claim's commit was lost (a failover); incarnation counts the earlier
	// incarnations of the key whose object holds the id derived before
	// (ErrObjectIDTaken), from 0; -1 asks for an id that is not derived (a
	// random one), the last resort after ObjectIDAttempts.
	ObjectID func(tenantID int64, key string, req idempotency.Canonical, incarnation int) string
	// Load reads the object of a run that resumes past start: the state its
	// last committed arrow left.
	Load func(ctx context.Context, q idempotency.DBTX, lease *idempotency.Lease) (S, error)
	// WithClaim are the arrows committed in the claim's transaction, in
	// order: the claim's new key row records their last recovery point and
	// the object, so they need no fence of their own. They cannot have a
	// foreign call: the call must come after the claim commits.
	WithClaim []Arrow[S]
	// Steps are the transactions after the claim, in order.
	Steps []Step[S]
}

// Step is one transaction of an operation: an optional foreign call, then
// the arrows that commit together, fenced by the key's lock_version.
type Step[S any] struct {
	// Call, if set, is the foreign call made before the step's
	// transaction, outside any transaction, under a heartbeat-renewed
	// lease. Its outcome class decides what happens (psp.Classify):
	// success and final failure go on to the arrows, where Run.Outcome
	// holds it; busy and unknown end the run at the point before the step,
	// with the lease released on the retry schedule.
	Call func(ctx context.Context, run *Run[S]) (psp.Outcome, error)
	// Arrows commit in the step's one transaction, in order.
	Arrows []Arrow[S]
}

// Arrow is one step between two recovery points.
type Arrow[S any] struct {
	// To is the recovery point the arrow commits.
	To idempotency.RecoveryPoint
	// Commit writes the arrow's effects in tx, which the engine fences and
	// commits with the new recovery point, and says what comes next: Next
	// (go on), Respond (the request ends with this answer, stored in this
	// same transaction) or Again (go round the step's foreign call once
	// more). A status change's event belongs here, in the same tx.
	Commit func(ctx context.Context, tx *Tx, run *Run[S]) (Transition, error)
}

// Transition is what an arrow's Commit decided. The zero Transition is
// not one: a Commit that returns it fails the run, so that none can leave
// its decision unsaid.
type Transition struct {
	kind     transitionKind
	response idempotency.Response
}

type transitionKind int

const (
	unsaid transitionKind = iota
	next
	respond
	again
)

// Next: the arrow's effects commit with its recovery point, and the run
// goes on to the next arrow. The arrow to done cannot return it.
func Next() Transition { return Transition{kind: next} }

// Respond ends the request with resp, stored for replay in the transaction
// of the calling Commit (the key is done): the last arrow's answer, or an
// answer decided early (a request the object's state does not allow).
func Respond(resp idempotency.Response) Transition {
	return Transition{kind: respond, response: resp}
}

// Again, from the first arrow of a step with a foreign call, keeps the key
// at the recovery point before the step and makes the step's call again:
// the transaction commits the arrow's effects, fenced, without moving the
// key (the arrows after it do not run). It is how a charge moves to its
// next PSP after a refusal: the refusal and the new attempt are recorded
// together before anything is sent to the new PSP. The next call is Fresh:
// this very run committed the point it starts from.
func Again() Transition { return Transition{kind: again} }

func (t Transition) String() string {
	switch t.kind {
	case next:
		return "next"
	case respond:
		return "respond"
	case again:
		return "again"
	}
	return "unsaid"
}

// Run is one run of an operation on one key: what its arrows share.
type Run[S any] struct {
	// Lease is the run's hold on the key; Lease.Record.Request the stored
	// request it executes.
	Lease *idempotency.Lease
	// ObjectID is the key's object (Operation.ObjectID, or the key's record).
	ObjectID string
	// Object is the run's state: set by the first arrow's Commit, or by
	// Load when the run resumes.
	Object S
	// Fresh, in a Call, says that this very run committed the point before
	// it: nothing can have been sent to the PSP yet, so the call skips the
	// lookup that precedes a resend (psp FirstSend).
	Fresh bool
	// Outcome is the answer of the step's Call, in its arrows' Commits.
	Outcome psp.Outcome

	loaded bool
	done   *idempotency.Response // the answer stored, once an arrow responded
}

// Request is the stored request the run executes.
func (r *Run[S]) Request() idempotency.Canonical { return r.Lease.Record.Request }

// step is a Step as the engine runs it; the arrows of WithClaim are step 0,
// marked withClaim.
type step[S any] struct {
	Step[S]
	withClaim bool
}

// position is where an arrow sits: its step, and its index in the step.
type position struct{ step, arrow int }

// compile checks op and lays out its steps: WithClaim first (if any), then
// Steps. A mistake is a programming error found when the operation is
// registered.
func (op *Operation[S]) compile() ([]step[S], error) {
	var steps []step[S]
	if len(op.WithClaim) > 0 {
		steps = append(steps, step[S]{Step: Step[S]{Arrows: op.WithClaim}, withClaim: true})
	}
	for _, s := range op.Steps {
		steps = append(steps, step[S]{Step: s})
	}
	switch {
	case op.Name == "" || strings.TrimSpace(op.Name) != op.Name:
		return nil, fmt.Errorf("an operation needs a name")
	case op.Load == nil:
		return nil, fmt.Errorf("%s: Load is required", op.Name)
	case len(steps) == 0:
		return nil, fmt.Errorf("%s: no arrows", op.Name)
	}
	seen := map[idempotency.RecoveryPoint]bool{idempotency.PointStart: true}
	for i, s := range steps {
		if len(s.Arrows) == 0 {
			return nil, fmt.Errorf("%s: step %d has no arrows", op.Name, i)
		}
		for j, a := range s.Arrows {
			last := i == len(steps)-1 && j == len(s.Arrows)-1
			switch {
			case a.Commit == nil:
				return nil, fmt.Errorf("%s: the arrow to %s has no Commit", op.Name, a.To)
			case seen[a.To]:
				return nil, fmt.Errorf("%s: recovery point %s reached twice (or start)", op.Name, a.To)
			case (a.To == idempotency.PointDone) != last:
				return nil, fmt.Errorf("%s: the last arrow, and only it, must reach done", op.Name)
			}
			seen[a.To] = true
		}
	}
	return steps, nil
}

// after returns the position of the arrow that leaves point: the first
// arrow for start, else the arrow after the one that reached point.
func after[S any](steps []step[S], point idempotency.RecoveryPoint) (position, bool) {
	if point == idempotency.PointStart {
		return position{}, true
	}
	for i, s := range steps {
		for j, a := range s.Arrows {
			if a.To != point {
				continue
			}
			if j+1 < len(s.Arrows) {
				return position{i, j + 1}, true
			}
			return position{i + 1, 0}, i+1 < len(steps)
		}
	}
	return position{}, false
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
