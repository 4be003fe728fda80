package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the store's functions run statements on: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx. The caller owns the transaction, so a phase's effects
// and its recovery point commit together.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Defaults of Config.
const (
	LeaseDefault       = 60 * time.Second
	RetryBaseDefault   = time.Second
	RetryMaxDefault    = time.Hour
	GiveUpAfterDefault = 72 * time.Hour
)

// Config configures a Store.
type Config struct {
	// Lease is how long a claim, takeover, phase commit or heartbeat keeps a
	// key to its worker. A worker that has not advanced or extended the key
	// for this long is presumed dead and may be taken over. Default 60s.
	Lease time.Duration
	// RetryBase and RetryMax are the retry schedule of an unfinished
	// request (RETRY_BASE, RETRY_MAX): after its n-th failed attempt (n
	// from 0) the next is due about RetryBase·2ⁿ later, jittered by ±25%,
	// never more than RetryMax. Neither the reaper nor a client's retry
	// starts an attempt before it is due. Defaults 1s and 1h.
	RetryBase time.Duration
	RetryMax  time.Duration
	// GiveUpAfter (GIVE_UP_AFTER): a request still unfinished this long
	// after its claim becomes needs_attention at its next failed attempt.
	// Default 72h.
	GiveUpAfter time.Duration
	// NeedsAttention, if set, runs in the transaction that gives a key up
	// (see Lease.Release): the api and the reaper set it to write the
	// request.needs_attention event.
	NeedsAttention NeedsAttentionHook
	// Role is this process's part, the first word of the holder its
	// timeline entries name: RoleAPI (the default), RoleReaper or
	// RoleOperator (bin/api requests). See timeline.go.
	Role string
	// TimelineOff (TIMELINE=off) records no timeline and no holder: for
	// make bench's on/off measurement of what they cost, not for
	// production.
	TimelineOff bool
}

// Store claims and advances keys. It holds no connection: every method runs
// on the DBTX or transaction it is given.
type Store struct {
	cfg    Config
	holder string
}

// NewStore returns a Store, filling Config's defaults.
func NewStore(cfg Config) (*Store, error) {
	cfg.Lease = cmp.Or(cfg.Lease, LeaseDefault)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, RetryBaseDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, RetryMaxDefault)
	cfg.GiveUpAfter = cmp.Or(cfg.GiveUpAfter, GiveUpAfterDefault)
	cfg.Role = cmp.Or(cfg.Role, RoleAPI)
	if cfg.Lease < time.Second {
		return nil, fmt.Errorf("idempotency: lease %s is shorter than 1s", cfg.Lease)
	}
	if cfg.RetryBase < 0 || cfg.RetryMax < cfg.RetryBase {
		return nil, fmt.Errorf("idempotency: RETRY_BASE %s and RETRY_MAX %s: the base must not exceed the maximum", cfg.RetryBase, cfg.RetryMax)
	}
	if cfg.GiveUpAfter < 0 {
		return nil, fmt.Errorf("idempotency: GIVE_UP_AFTER %s must be positive", cfg.GiveUpAfter)
	}
	return &Store{cfg: cfg, holder: newHolder(cfg.Role)}, nil
}

// Lease returns the configured lease duration.
func (s *Store) Lease() time.Duration { return s.cfg.Lease }

// claimLockSQL serialises every claim of one (tenant, key): this is what keeps
// a key unique across partitions (see migrations/00002). The lock is held
// until the claim's transaction ends. Namespace 0x70700001.
const claimLockSQL = `SELECT current_setting('transaction_isolation'), pg_advisory_xact_lock(1886388225, hashtext($1::bigint::text || ':' || $2))::text`

// claimSQL inserts the key unless it exists and returns the row either way.
// It must be a statement of its own after claimLockSQL (pipelined with it is
// fine; inside one statement with it is not): a READ COMMITTED
// statement's snapshot is taken when it starts, so only a statement that
// starts after the lock was granted sees the row a competing claim committed
// while we waited. (For the same reason the claim must not run in a
// REPEATABLE READ or SERIALIZABLE transaction; Claim refuses a caller's
// transaction that is.)
//
// The key is found through its heads (idempotency_keys_newest,
// migrations/00008): one probe of the month's heads and, for a key that
// exists, one of the day partition that holds it, however many days are
// kept. A new key's row is routed to today's partition alone, and its
// head is written by the table's trigger in the same statement.
const claimSQL = `
WITH existing AS (
    SELECT ` + recordColumns + `
      FROM idempotency_keys_newest($1, $2)
), inserted AS (
    INSERT INTO idempotency_keys
           (tenant_id, key, fingerprint, request_method, request_path, request_body, locked_until, trace_context,
            recovery_point, object_id, operation, holder, timeline, lease_token)
    SELECT $1, $2, $3, $4, $5, $6, phasepay_now() + $7 * interval '1 microsecond', nullif($8, ''), $9, nullif($10, ''),
           nullif($11, ''), $12, phasepay_timeline_append(NULL, $13, 1), $14::uuid
     WHERE NOT EXISTS (SELECT 1 FROM existing)
    RETURNING ` + recordColumns + `
)
SELECT true, * FROM inserted
UNION ALL
SELECT false, * FROM existing`

// recordColumns is read by scanRecord, in this order.
const recordColumns = `tenant_id, key, created_at, fingerprint, request_method, request_path, request_body,
       state, recovery_point, lock_version, coalesce(locked_until > phasepay_now(), false), attempts,
       response_status, response_content_type, response_body, coalesce(trace_context, ''),
       next_attempt_at, coalesce(next_attempt_at <= phasepay_now(), true),
       greatest(0, ceil(extract(epoch FROM next_attempt_at - phasepay_now())))::int,
       coalesce(last_error, ''), coalesce(object_id, ''), coalesce(operation, '')`

// ClaimParams names the key to claim and the request it is claimed for.
type ClaimParams struct {
	TenantID int64
	Key      string
	Request  Canonical
	// TraceContext is stored opaque (a W3C traceparent), so that whoever
	// takes the key over can link to the trace that started it.
	TraceContext string
	// Point is the recovery point a new key starts at: PointStart (the
	// default), or the point of a first phase whose effects the caller
	// writes in the claim's own transaction. The new row is this
	// transaction's until it commits, so that phase needs no fence of its
	// own: the claim's commit is its commit.
	Point RecoveryPoint
	// ObjectID names the object that first phase creates (see
	// Lease.SetObject), if it has one.
	ObjectID string
	// Operation names the operation that runs the key (see
	// Record.Operation); empty for a key finished in its claim's own
	// transaction, which nothing ever resumes.
	Operation string
}

// Claim claims the key of a request inside tx, which the caller commits
// before it makes any foreign call: once committed, the claim is visible to
// every other request (they get 409, not a wait) and to the reaper.
//
// It returns the key's record and whether this call created it. A created
// record's lease belongs to the caller (see LeaseOf); for an existing one the
// caller asks Decide what to do.
func (s *Store) Claim(ctx context.Context, tx pgx.Tx, p ClaimParams) (rec Record, created bool, err error) {
	tenantID, key, req := p.TenantID, p.Key, p.Request
	// One round trip: the two statements are pipelined, but the server runs
	// them one after the other, so claimSQL starts, and takes its snapshot,
	// only once the lock is granted.
	batch := &pgx.Batch{}
	batch.Queue(claimLockSQL, tenantID, key)
	point := cmp.Or(p.Point, PointStart)
	batch.Queue(claimSQL, tenantID, key, req.Fingerprint[:], req.Method, req.Path, req.Body,
		s.cfg.Lease.Microseconds(), p.TraceContext, string(point), p.ObjectID, p.Operation, s.holderColumn(), s.claimEntries(point),
		newLeaseToken())
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	var isolation, ignored string
	if err := results.QueryRow().Scan(&isolation, &ignored); err != nil {
		return Record{}, false, fmt.Errorf("claim %q: lock: %w", key, err)
	}
	// Checked after the fact, but before the caller can commit: the error
	// makes it roll back whatever the claim wrote.
	if isolation != "read committed" {
		return Record{}, false, fmt.Errorf("claim %q: needs a READ COMMITTED transaction, got %s", key, isolation)
	}
	if rec, err = scanRecord(results.QueryRow(), &created); err != nil {
		return Record{}, false, fmt.Errorf("claim %q: %w", key, err)
	}
	if err := results.Close(); err != nil {
		return Record{}, false, fmt.Errorf("claim %q: %w", key, err)
	}
	return rec, created, nil
}

// lookupSQL reads the newest incarnation of a key, through its heads (see
// claimSQL): one round trip, whose cost does not grow with the days kept.
const lookupSQL = `SELECT false, ` + recordColumns + `
  FROM idempotency_keys_newest($1, $2)`

// Lookup reads a key. It returns ErrNotFound if there is none.
func (s *Store) Lookup(ctx context.Context, q DBTX, tenantID int64, key string) (Record, error) {
	var ignored bool
	rec, err := scanRecord(q.QueryRow(ctx, lookupSQL, tenantID, key), &ignored)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("look up %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("look up %q: %w", key, err)
	}
	return rec, nil
}

func scanRecord(row pgx.Row, created *bool) (Record, error) {
	var (
		rec         Record
		fp          []byte
		status      *int32
		contentType *string
		body        []byte
	)
	err := row.Scan(created, &rec.TenantID, &rec.Key, &rec.CreatedAt, &fp,
		&rec.Request.Method, &rec.Request.Path, &rec.Request.Body,
		&rec.State, &rec.Point, &rec.LockVersion, &rec.Leased, &rec.Attempts,
		&status, &contentType, &body, &rec.TraceContext,
		&rec.NextAttemptAt, &rec.Due, &rec.RetryAfter, &rec.LastError, &rec.ObjectID, &rec.Operation)
	if err != nil {
		return Record{}, err
	}
	copy(rec.Request.Fingerprint[:], fp)
	if status != nil {
		rec.Response = &Response{Status: int(*status), ContentType: *contentType, Body: body}
	}
	return rec, nil
}

// LeaseOf returns the lease of a record this worker created with Claim.
func (s *Store) LeaseOf(rec Record) *Lease {
	return &Lease{store: s, Record: rec}
}

// takeOverSQL moves the key to a new holder. The fencing token is the point:
// lock_version + 1 invalidates every write the previous holder may still try,
// and "lock_version = $4" makes two simultaneous takeovers (a client retry
// and a reaper, say) resolve to exactly one winner. The lease condition is
// re-checked here, by the database's clock, because the record the caller
// decided on may be stale. The lease token ($8) is what releases the lease
// if this statement's answer is lost (lost.go).
const takeOverSQL = `
UPDATE idempotency_keys
   SET lock_version = lock_version + 1,
       locked_until = phasepay_now() + $5 * interval '1 microsecond',
       holder = $6,
       timeline = phasepay_timeline_append(timeline, $7, lock_version + 1),
       lease_token = $8::uuid
 WHERE tenant_id = $1 AND key = $2 AND created_at = $3
   AND lock_version = $4
   AND state = 'started'
   AND (locked_until IS NULL OR locked_until <= phasepay_now())
   AND (next_attempt_at IS NULL OR next_attempt_at <= phasepay_now())
RETURNING lock_version, recovery_point`

// TakeOver takes the key of rec over from a holder whose lease expired. It
// returns ErrInProgress if someone else took it over, extended or finished it
// since rec was read; the caller may Lookup and Decide again. Any other
// error is a *LostTakeoverError: the takeover may have committed, and its
// Release gives the lease up.
func (s *Store) TakeOver(ctx context.Context, q DBTX, rec Record) (*Lease, error) {
	if rec.partial {
		// Its request body and trace context, which the run resumes
		// from, were never read.
		return nil, fmt.Errorf("take over %q: a record read by Peek cannot be taken over", rec.Key)
	}
	read, token, sent := rec, newLeaseToken(), time.Now()
	err := q.QueryRow(ctx, takeOverSQL, rec.TenantID, rec.Key, rec.CreatedAt, rec.LockVersion, s.cfg.Lease.Microseconds(),
		s.holderColumn(), s.takenOverEntries(), token).
		Scan(&rec.LockVersion, &rec.Point)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("take over %q: %w", rec.Key, ErrInProgress)
	}
	if err != nil {
		return nil, s.lostTakeover(fmt.Errorf("take over %q: %w", rec.Key, err), token, sent, &read)
	}
	rec.Leased = true
	return &Lease{store: s, Record: rec, token: token}, nil
}

// takeOverExpiredSQL is the reaper's claim on abandoned keys: started, lease
// run out, next attempt due (needs_attention keys are not started: never
// taken). FOR UPDATE SKIP LOCKED lets several reapers share
// the work without waiting on each other, and the lock it takes is re-checked
// against the row's latest version, so a key a client's retry took over a
// moment ago is skipped rather than taken twice. The takeover itself is the
// same fenced bump of lock_version as TakeOver's.
//
// The batch size is a constant of the statement ({{limit}}, filled in by
// takeOverExpiredFor), not a parameter: a generic plan takes a LIMIT $n to
// return a tenth of the keys due, and for a backlog of due keys (a PSP
// outage) it joined that many with a hash of every key of every day kept,
// read whole, at every takeover (pitfall Q8 "A LIMIT the plan cannot
// see").
const takeOverExpiredSQL = `
WITH due AS (` + dueKeysSQL + `)
UPDATE idempotency_keys k
   SET lock_version = k.lock_version + 1,
       locked_until = phasepay_now() + $1 * interval '1 microsecond',
       holder = $2,
       timeline = phasepay_timeline_append(k.timeline, $3, k.lock_version + 1),
       lease_token = $4::uuid
  FROM due
 WHERE k.tenant_id = due.tenant_id AND k.key = due.key AND k.created_at = due.created_at
RETURNING false, ` + qualifiedRecordColumns

// takeOverExpiredFor is takeOverExpiredSQL taking up to limit keys: one
// statement (and one prepared plan) per batch size the reaper uses.
func takeOverExpiredFor(limit int) string {
	return strings.Replace(takeOverExpiredSQL, "{{limit}}", strconv.Itoa(limit), 1)
}

// dueKeysSQL picks up to {{limit}} due keys, oldest due first.
const dueKeysSQL = `
    SELECT tenant_id, key, created_at
      FROM idempotency_keys
     WHERE state = 'started'
       AND ` + dueAtExpr + ` <= phasepay_now()
     ORDER BY ` + dueAtExpr + `
     LIMIT {{limit}}
       FOR UPDATE SKIP LOCKED`

// dueAtExpr is when a started key may next be taken over: once its lease
// has run out and its next attempt is due. It is the expression of the
// partial index idempotency_keys_due (migrations/00007), spelled exactly
// alike so that the planner uses it: the reaper's query then reads only the
// keys it takes, however many keys are stored.
const dueAtExpr = `greatest(coalesce(locked_until, '-infinity'::timestamptz), coalesce(next_attempt_at, '-infinity'::timestamptz))`

// qualifiedRecordColumns is recordColumns for a statement that joins
// idempotency_keys as k.
const qualifiedRecordColumns = `k.tenant_id, k.key, k.created_at, k.fingerprint, k.request_method, k.request_path,
       k.request_body, k.state, k.recovery_point, k.lock_version, true, k.attempts,
       k.response_status, k.response_content_type, k.response_body, coalesce(k.trace_context, ''),
       k.next_attempt_at, true, 0, coalesce(k.last_error, ''), coalesce(k.object_id, ''), coalesce(k.operation, '')`

// TakeOverExpired takes over up to limit abandoned keys (started, lease
// expired, retry backoff over) and returns their leases. Its error, once
// the statement was sent, is a *LostTakeoverError: the batch may have
// committed (its answer lost, or a row of it unreadable), holding keys no
// one drives, and its Release gives them all up (every key the batch took
// carries its one token).
func (s *Store) TakeOverExpired(ctx context.Context, q DBTX, limit int) ([]*Lease, error) {
	token, sent := newLeaseToken(), time.Now()
	lost := func(err error) error {
		return s.lostTakeover(fmt.Errorf("take over expired: %w", err), token, sent, nil)
	}
	rows, err := q.Query(ctx, takeOverExpiredFor(limit), s.cfg.Lease.Microseconds(), s.holderColumn(), s.takenOverEntries(), token)
	if err != nil {
		return nil, lost(err)
	}
	defer rows.Close()
	var leases []*Lease
	for rows.Next() {
		var ignored bool
		rec, err := scanRecord(rows, &ignored)
		if err != nil {
			return nil, lost(err)
		}
		leases = append(leases, &Lease{store: s, Record: rec, token: token})
	}
	if err := rows.Err(); err != nil {
		return nil, lost(err)
	}
	return leases, nil
}
