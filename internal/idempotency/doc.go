// Package idempotency makes a request safe to retry: it claims a client's
// idempotency key, decides what a repeated request gets, and lets the holder
// of a key advance it through recovery points under a lease and a fencing
// token until it stores the final response for replay.
//
// It knows nothing of what the request does. A caller (internal/charges)
// names its own recovery points and runs its effects inside the transactions
// that advance them.
//
// The life of a key:
//
//	Claim ──new──▶ started (lease held, lock_version = 1)
//	  │                │ Advance(point) … Advance(point)   each fenced by lock_version
//	  │                │ Release(cause)                    transient failure: lease dropped, resumable
//	  │                ▼
//	  │              done (response stored)                Finish, fenced
//	  │
//	  └─existing──▶ Decide(record, fingerprint):
//	                  other fingerprint  → Mismatch  (422)
//	                  done               → Replay    (stored status and body)
//	                  lease expired      → TakeOver  (lock_version + 1, resume)
//	                  lease valid        → InProgress (409)
//
// Which clock decides: every lease comparison is made by PostgreSQL against
// phasepay_now() (see migrations), never against a process clock.
package idempotency
