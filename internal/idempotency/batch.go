package idempotency

import "github.com/phasepay/phasepay/internal/sqlbatch"

// The set-based forms of the claim and of the fenced writes, for the phase
// engine's batches of concurrent requests (package sqlbatch gives the
// rules). Each keeps its statement's guarantee for every request in it.
func init() {
	// The claim of many new keys: idempotency_keys_claim_many
	// (migrations/00036) takes every key's lock in a sorted order, and
	// fails whole if any key exists, so that each request meets its own
	// decision alone.
	sqlbatch.Register(claimFuncSQL, `SELECT true, `+recordColumns+`
  FROM idempotency_keys_claim_many($1::bigint[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::bytea[],
                                   $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                                   $13::text[], $14::uuid[])`)
	// The check after it, once per request: the claim created every key.
	sqlbatch.Register(claimedSQL, `SELECT phasepay_claimed() FROM generate_series(1, $1::int)`)
	// finishSQL for many keys, each fenced by its own lock_version. The
	// fence counts the rows it matched against the requests: one lost
	// lease fails the batch, and its request meets ErrLeaseLost alone.
	// Its state test is written so that no index on started keys alone
	// matches it (startedOnly).
	sqlbatch.Register(finishSQL, fencedMany(`
UPDATE idempotency_keys k
   SET state = 'done',
       recovery_point = 'done',
       locked_until = NULL,
       holder = NULL,
       timeline = phasepay_timeline_append(k.timeline, u.timeline, k.lock_version),
       next_attempt_at = NULL,
       last_error = NULL,
       last_error_detail = NULL,
       response_status = u.status,
       response_content_type = u.content_type,
       response_body = u.body,
       finished_at = phasepay_now()
  FROM unnest($1::bigint[], $2::text[], $3::timestamptz[], $4::bigint[], $5::int[], $6::text[], $7::bytea[], $8::text[])
       AS u(tenant_id, key, created_at, lock_version, status, content_type, body, timeline)
 WHERE k.tenant_id = u.tenant_id AND k.key = u.key AND k.created_at = u.created_at
   AND k.lock_version = u.lock_version
   AND `+startedOnly, "finish"))
	// advanceSQL for many keys, fenced like finishSQL's form.
	sqlbatch.Register(advanceSQL, fencedMany(`
UPDATE idempotency_keys k
   SET recovery_point = u.point,
       locked_until = phasepay_now() + u.lease_us * interval '1 microsecond',
       timeline = phasepay_timeline_append(k.timeline, u.timeline, k.lock_version)
  FROM unnest($1::bigint[], $2::text[], $3::timestamptz[], $4::bigint[], $5::text[], $6::bigint[], $7::text[])
       AS u(tenant_id, key, created_at, lock_version, point, lease_us, timeline)
 WHERE k.tenant_id = u.tenant_id AND k.key = u.key AND k.created_at = u.created_at
   AND k.lock_version = u.lock_version
   AND `+startedOnly, "advance"))
}

// startedOnly is the fence's "the key is still started" in a set-based
// form. Written as k.state = 'started', the one plan these statements get
// (plan_cache_mode = force_generic_plan) reads every started key of every
// day through the partial index on started keys and joins the requests to
// them: cheap while few keys run, and a read of the whole backlog per
// batch in a PSP outage (pitfall Q9 "A backlog every pass reads again").
// Written so that the partial index's predicate does not match, the plan
// probes each request's key by its primary key, in its day alone.
const startedOnly = `k.state || '' = 'started'`

// fencedMany is fenced for an UPDATE of many keys, one per element of $1:
// it fails with PPF01 unless the fence matched every one.
func fencedMany(update, what string) string {
	return `WITH fenced AS (` + update + `
RETURNING 1)
SELECT phasepay_fence(CASE WHEN (SELECT count(*) FROM fenced) = cardinality($1::bigint[]) THEN 1 ELSE 0 END, '` + what + ` of many')`
}
