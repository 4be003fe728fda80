// Package phases runs idempotent requests as atomic phases over
// PostgreSQL. It owns everything a request with recovery points shares —
// the claim of its idempotency key, fencing, the lease and its heartbeat,
// takeover, the outcome classes of a foreign call, the retry schedule and
// the stored answer — and knows nothing of what any operation does.
//
// # Operations
//
// An operation is a value (Operation) with a stable Name, the request
// path it serves, and the arrows from the recovery point start to done,
// each a small function. Register checks it and makes it runnable; Do runs
// one request of it under a key; Resume drives a key someone abandoned,
// finding its operation by the name its claim stored. The operation's file
// is the whole of what it does, readable top to bottom (see
// internal/charges/authorize.go, and Example below).
//
// # Arrows
//
// An Arrow reaches one recovery point. Its Commit writes the arrow's
// effects and returns what comes next, a Transition that cannot be left
// unsaid:
//
//   - Next: the effects commit with the arrow's recovery point, and the
//     run goes on;
//   - Respond(answer): the request ends here; the answer is stored in the
//     same transaction and replayed byte for byte to every retry;
//   - Again: after a foreign call, the run stays where it was and makes
//     the call again (a charge moving to its next PSP).
//
// Every write of an arrow is fenced by the key's lock_version: a worker
// that stalled past its lease and was taken over matches no row, its
// transaction rolls back, and it answers only with what the key stores.
//
// # Transactions
//
// Which arrows commit together is declared, not inferred. WithClaim holds
// the arrows that commit in the claim's own transaction, before any
// foreign call: a new charge's claim and its pending charge row are one
// commit. Each Step is one transaction: an optional foreign Call, made
// outside any transaction under a heartbeat-renewed lease, then the
// arrows that commit its outcome. Config.OneCommitPerPhase commits every
// arrow on its own instead, for benchmarks and crash tests; the recovery
// points are the same.
//
// An arrow writes in the engine's transaction, Tx, which is pipelined: the
// fence, the arrow's writes (Queue), the stored answer and the COMMIT go
// out in one exchange with the database, plus one for each read the arrow
// cannot go on without (QueryRow). A write whose outcome matters checks it
// in the statement itself, so that its failure aborts the transaction.
//
// # Takeover
//
// A claim is committed before any foreign call, unique per (tenant, key)
// across partitions (internal/idempotency). A retry of a key finds it
// finished (the stored answer, replayed), used for another request (422),
// held by a live lease (409), waiting for its next scheduled attempt, or
// waiting for an operator. A key whose lease ran out is taken over: its
// lock_version moves on, so nothing its last holder may still try can
// commit, and the new holder resumes from the last committed recovery
// point, loading the operation's object (Operation.Load) as the last
// arrow left it. The reaper takes over every abandoned key this way, on
// its retry schedule.
//
// # Outcome classes
//
// A foreign call answers with a psp.Outcome, whose class alone decides
// what happens, the same whether the api or the reaper drives the key:
// success and final failure go on to the step's arrows (which record
// either, and may Respond); busy and unknown end the run at the point
// before the step with the lease released and the next attempt scheduled
// (RETRY_BASE·2ⁿ, jittered, at most RETRY_MAX), and past GIVE_UP_AFTER
// hand the key to an operator. An unknown outcome is never retried blind:
// the call of a run that did not itself commit the point before it looks
// the operation up by reference first (Run.Fresh is false), because the
// first attempt may have been acted on and its answer lost. A worker whose
// lease is taken over during its call stops the call.
//
// # Fast paths
//
// A key this process has seen is probably a retry: it is read before its
// claim (and a request as it came, AsSent, before its body is parsed), so
// that a replay costs one read. Either path gives the same answer; the
// guess only decides which costs less.
package phases
