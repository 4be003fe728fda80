// Package phases runs idempotent requests as atomic phases over PostgreSQL.
//
//	send := &phases.Operation[*Note]{
//		Name: "notes.send", Method: "POST", Path: "/v1/notes",
//		Parse: parseNote, ObjectID: noteID, Load: loadNote,
//		Phases: []phases.Phase[*Note]{
//			{To: "note_created", Commit: createNote},                 // tx 1, with the claim
//			{To: "delivered", Call: deliver, Commit: recordDelivery}, // tx 2, after the call
//			{To: phases.Done, Commit: answer},                        // tx 2 too
//		},
//	}
//	phases.Register(engine, send)
//	res, err := phases.Do(ctx, engine, send, tenantID, key, "/v1/notes", phases.AsSent(body))
//
// The engine owns what every such request shares. It claims the
// idempotency key, fences, holds the lease and takes keys over. It
// classifies a foreign call's outcome, schedules retries and stores the
// answer. It knows nothing of what an operation does.
//
// # Phases
//
// An Operation lists its phases from Start to Done. A phase reaches one
// recovery point. It may make a foreign Call, then its Commit writes its
// effects and returns what comes next (Next):
//
//   - Proceed: the effects commit with the phase's recovery point, and the
//     next phase runs.
//   - Respond(answer): the request ends here. The answer is stored in the
//     same transaction and replayed byte for byte to every retry.
//   - Again: after a call, the key stays where it was and the call is made
//     again (a charge moving to its next PSP).
//
// Every write of a phase is fenced by the key's lock_version. A worker
// that stalled past its lease and was taken over matches no row. Its
// transaction rolls back, and it answers only with what the key stores.
//
// # Transactions
//
// Phases commit together unless a foreign call stands between them. The
// phases before the first call commit with the claim. A phase with a call
// commits with the call-less phases after it. So an operation with one call
// costs two commits, and its file shows where each falls.
//
// Why not a marker per transaction? A commit is needed before a foreign
// call, so that a crash during the call finds what the call acts on, and
// at the end. Any other commit costs a round trip and makes nothing more
// recoverable, so the rule leaves nothing to declare.
// Config.OneCommitPerPhase commits every phase alone instead, for
// benchmarks and crash tests.
//
// A phase writes in the engine's transaction, Tx, which is pipelined. The
// fence, the writes, the stored answer and the COMMIT go out in one
// exchange, plus one for each read the phase cannot go on without.
//
// # Foreign calls
//
// A call returns a CallOutcome, whose Class alone decides what happens,
// whoever drives the key. Success and Final go on to the phase's Commit.
// Busy and Unknown end the run at the point before the phase, its lease
// released. The next attempt is due after RETRY_BASE·2ⁿ, jittered, at most
// RETRY_MAX. Past GIVE_UP_AFTER the key goes to an operator.
//
// An unknown outcome is never retried blind. A call that is not Fresh
// looks the operation up first, since an earlier attempt may have been
// acted on and its answer lost. What the Commit needs of the answer (an
// authorization id, a decline code) travels in the operation's own
// object, not through the engine.
//
// # Takeover
//
// A claim commits before any foreign call, unique per (tenant, key) across
// partitions (internal/idempotency). A retry finds its key finished, used
// for another request (422), held by a live lease (409), waiting for its
// next attempt, or waiting for an operator. A key whose lease ran out is
// taken over. Its lock_version moves on, and the new holder resumes from
// the last committed recovery point, reading the object with Load. The
// reaper takes over every abandoned key this way.
//
// # Fast paths
//
// A key this process has seen is probably a retry. It is read before its
// claim, and a body AsSent before it is parsed, so that a replay costs one
// read. Either path gives the same answer. The guess only decides which
// costs less.
//
// # Adding an operation
//
// docs/adding-an-operation.md walks through a fifth operation, step by
// step. The examples below run operations against a real database.
package phases
