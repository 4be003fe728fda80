// Package phases runs idempotent operations as atomic phases over
// PostgreSQL: it owns everything a request with recovery points shares,
// and knows nothing of what any operation does.
//
// An operation (an Operation value) names its path, its recovery points and
// one small function per arrow between them. The Engine runs it:
//
//   - the claim, one exchange that also reads an existing key (a plain
//     read first for a key this process has seen: keyHints; with DoRaw,
//     before the request is parsed, which a retry with its first
//     attempt's bytes never is), whose row answers a replay, a mismatch,
//     an attempt not yet due and a request waiting for an operator;
//     Decide, and the takeover of an abandoned key;
//   - pipelined transactions (pipeline.go): a transaction's statements,
//     BEGIN and COMMIT included, go out in one exchange with the database
//     plus one per read it cannot go on without;
//   - the arrows, each fenced by the key's lock_version (Lease.Advance, or
//     Lease.Finish for the last), in a span named after the point it
//     reaches; arrows with no foreign call between them share one
//     transaction unless Config.OneCommitPerPhase, and the first of them
//     share the claim's;
//   - the foreign call of an arrow, outside any transaction, under a
//     heartbeat-renewed lease; its outcome class (psp.Classify) decides:
//     success and final failure go on to the arrow's commit, busy and
//     unknown release the lease on the retry schedule;
//   - finishing with a stored answer, releasing later when the database went
//     away, answering a run whose lease was taken over from the key alone,
//     and the crash hooks tests kill runs with.
//
// The reaper resumes any key through Engine.Resume, which finds the
// operation by the key's request path (Register).
//
// The shape follows Kill Bill's payment automaton (states and transitions
// declared once per operation, one runner for all; an unknown outcome is a
// state the runner knows how to leave), DBOS steps (a recorded step is
// skipped on recovery, not re-run) and River's worker registry (the runner
// knows nothing of what a job does).
package phases

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
)

// Operation is one kind of idempotent request: a path and the arrows from
// start to done. S is what its arrows work on (a charge, a refund): created
// or loaded once per run and handed from arrow to arrow.
type Operation[S any] struct {
	// Path is the request path keys of this operation are claimed under, a
	// pattern whose {name} segments match any one segment
	// ("/v1/charges/{id}/capture"). Resume finds the operation by it.
	Path string
	// Span names a new request's span ("charges.create"); ResumeSpan names
	// the span of a run that took the key over ("charges.resume").
	Span, ResumeSpan string
	// Admit, if set, runs in the claim's transaction before the claim, for
	// a new or unfinished key alike: an error rolls the claim back, so a
	// request it turns away (an unknown charge, one whose authorization is
	// not known yet) leaves no key behind and may be retried with the same
	// key.
	Admit func(ctx context.Context, tx pgx.Tx, tenantID int64, req idempotency.Canonical) error
	// ObjectID returns the id of the object the request creates or acts on,
	// recorded on the key with its first arrow (see Lease.SetObject): shown
	// to a client told to wait, and what Load finds the object by. An id
	// derived from what a retry carries (tenant, key, request) is the same
	// for a retry whose claim's commit was lost (a failover); incarnation
	// counts the earlier incarnations of the key whose object holds the id
	// derived before (ErrObjectIDTaken), from 0; -1 asks for an id that is
	// not derived (a random one), the last resort after objectIDAttempts.
	ObjectID func(tenantID int64, key string, req idempotency.Canonical, incarnation int) string
	// Load reads the object of a run that resumes past start: the state its
	// last committed arrow left.
	Load func(ctx context.Context, q idempotency.DBTX, lease *idempotency.Lease) (S, error)
	// Arrows lead from start to done, in order: Arrows[i] reaches
	// Arrows[i].To from the point before it. The last reaches
	// idempotency.PointDone, and its Commit calls Run.Finish.
	Arrows []Arrow[S]
}

// Arrow is one step between two recovery points.
type Arrow[S any] struct {
	// To is the recovery point the arrow commits.
	To idempotency.RecoveryPoint
	// Call, if set, is the foreign call made before the arrow's
	// transaction, outside any transaction, under a heartbeat-renewed lease.
	// Its outcome is Run.Outcome in Commit. A busy or unknown outcome ends
	// the run at the point before the arrow, with the lease released on the
	// retry schedule; Call never runs inside a transaction, so no arrow
	// shares one with the arrow before a call.
	Call func(ctx context.Context, run *Run[S]) (psp.Outcome, error)
	// Commit writes the arrow's effects inside tx, which the engine has
	// fenced (or will fence before it commits) and commits with the new
	// recovery point. A status change's event belongs here, in the same tx.
	// Commit may end the request early with Run.Finish: an answer decided
	// here (a request the object's state does not allow) is stored for
	// replay in this same transaction.
	//
	// tx is pipelined (see pipeTx): its Exec is queued and answers an
	// empty CommandTag, its errors surfacing at the next exchange, so a
	// check that needs a statement's result reads it (QueryRow) or makes
	// the statement fail; and what Exec's arguments point to must not
	// change before the commit.
	Commit func(ctx context.Context, tx pgx.Tx, run *Run[S]) error
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
	// Outcome is the answer of the arrow's Call, in its Commit.
	Outcome psp.Outcome

	loaded   bool
	again    bool
	response *idempotency.Response
}

// Request is the stored request the run executes.
func (r *Run[S]) Request() idempotency.Canonical { return r.Lease.Record.Request }

// Finish ends the request with resp, stored for replay in the transaction
// of the calling Commit.
func (r *Run[S]) Finish(resp idempotency.Response) { r.response = &resp }

// Again, called by the Commit of an arrow with a Call, keeps the run at the
// recovery point before the arrow and makes the arrow's Call again: the
// transaction commits the Commit's effects, fenced, without moving the key
// (the arrows after it in the group do not run). It is how a charge moves
// to its next PSP after a refusal: the refusal and the new attempt are
// recorded together before anything is sent to the new PSP. The next Call
// is Fresh: this very run committed the point it starts from.
func (r *Run[S]) Again() { r.again = true }

// match reports whether path matches pattern, {name} segments matching any
// one non-empty segment.
func match(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i, p := range ps {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if xs[i] == "" {
				return false
			}
			continue
		}
		if p != xs[i] {
			return false
		}
	}
	return true
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
