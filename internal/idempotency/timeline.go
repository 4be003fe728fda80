package idempotency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/envconfig"
)

// A request's timeline: every change a key goes through, recorded in the
// key's own row (the timeline column, migrations/00022) by the statement
// that makes the change, so that it costs no statement of its own and
// commits, rolls back and is dropped with what it records:
//
//	claimed     the claim's INSERT (Claim, QueueClaim)
//	reached     Advance (and the claim, for the point its first phases commit with it)
//	psp_call    noted by the phase engine after the call (Lease.Note) and written by
//	            the holder's next statement: the phase's commit or the release
//	released    Release (reason in stable words, the raw cause for operators, the next attempt)
//	taken_over  TakeOver (a client's retry in an api process), TakeOverExpired (a reaper)
//	heartbeat   Extend (a renewal during a slow call; a run of them is one entry, moved)
//	moved       noted by an operation that goes round its call again at another PSP
//	            (a charge's failover), written by Stay
//	retried     RetryNow (an operator made the next attempt due now)
//	resolved    noted by an operator's resolution, written by its Finish
//	resolution_refused
//	            noted by a resolution the PSP contradicted, written by ReturnToAttention
//	finished    Finish (the stored answer's status)
//
// Each entry names its holder, the process that wrote it
// (<role>:<host>:<pid>:<8 hex>), and the lock_version it held. The
// database stamps "at" (its clock: phasepay_now(), the transaction's start,
// the instant every other time of that transaction is stored at) and
// "lock_version" as the statement runs (phasepay_timeline_append).
//
// The timeline is the operator's record (bin/api requests show, the
// console) and, stripped of whatever names a process or a raw cause, the
// tenant's (GET /v1/idempotency_keys/{key}/timeline).

// Kind names what a timeline entry records.
type Kind string

// The kinds of timeline entries.
const (
	KindClaimed   Kind = "claimed"
	KindReached   Kind = "reached"
	KindReleased  Kind = "released"
	KindTakenOver Kind = "taken_over"
	KindPSPCall   Kind = "psp_call"
	// KindHeartbeat is the holder's last renewal of its lease in a run of
	// them (Extend): for operators, where a dead holder was last heard of.
	// A tenant's timeline does not show it.
	KindHeartbeat Kind = "heartbeat"
	KindFinished  Kind = "finished"
	// KindMoved: the request moved to another PSP (PSP) after a refusal,
	// and goes round its call again there (a charge's failover).
	KindMoved Kind = "moved"
	// An operator's acts (By is RoleOperator, Operator the name given):
	// the next attempt made due now; a resolution (As, Detail the
	// operator's reason); a resolution refused because the PSP
	// contradicted it or could not be asked (As, Detail why).
	KindRetried           Kind = "retried"
	KindResolved          Kind = "resolved"
	KindResolutionRefused Kind = "resolution_refused"
)

// Entry is one moment of a request's life, as stored in its key's timeline.
// Only the fields of its kind are set.
type Entry struct {
	// At is when the database recorded it: the start of the transaction
	// that made the change.
	At   time.Time `json:"at"`
	Kind Kind      `json:"kind"`
	// Holder is the process that wrote the entry (see Store.Holder).
	Holder string `json:"holder,omitempty"`
	// LockVersion is the key's fencing token after the change: the holder's.
	LockVersion int64 `json:"lock_version"`

	// RecoveryPoint (reached): the point committed.
	RecoveryPoint RecoveryPoint `json:"recovery_point,omitempty"`

	// Reason (released): why the attempt ended, in stable words a tenant
	// may read ("PSP unreachable", "PSP answered 503"); Detail, the raw
	// cause, for operators only; NextAttemptAt, when the next attempt is
	// due (nil: the key was given up, needs_attention).
	Reason        string     `json:"reason,omitempty"`
	Detail        string     `json:"detail,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`

	// By (taken_over): the role of the process that took the key over,
	// api (a client's retry) or reaper; (retried, resolved,
	// resolution_refused) RoleOperator.
	By string `json:"by,omitempty"`

	// A PSP call (psp_call): which PSP, which operation (authorize,
	// capture, void, refund) under which of the PSP's idempotency keys, the
	// outcome class (success, final_failure, busy, unknown), the HTTP status
	// of the PSP's last answer (nil: none arrived), how long the call took
	// with its quick retries and lookups, and how many of each it made.
	PSP        string `json:"psp,omitempty"`
	Operation  string `json:"operation,omitempty"`
	PSPKey     string `json:"psp_key,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	Status     *int   `json:"status,omitempty"`
	DurationMS *int64 `json:"duration_ms,omitempty"`
	Sends      *int   `json:"sends,omitempty"`
	Lookups    *int   `json:"lookups,omitempty"`

	// ResponseStatus (finished): the stored answer's HTTP status.
	ResponseStatus int `json:"response_status,omitempty"`

	// Operator (retried, resolved, resolution_refused): the name the
	// operator acted under (--by). For operators only: a tenant reads
	// "by": "operator". As: the resolution asked for, failed or
	// succeeded. An operator's reason, or why a resolution was refused,
	// is in Detail, for operators only like every Detail.
	Operator string `json:"operator,omitempty"`
	As       string `json:"as,omitempty"`
}

// KeyHash names a tenant's key where the key itself must not appear
// (spans, which leave the service for a tracing backend): the first 16
// hex digits of the SHA-256 of the key. An operator who has the key finds
// its traces by it (bin/api requests show prints it).
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// Roles of the processes that hold keys, the first word of a holder.
const (
	RoleAPI      = "api"
	RoleReaper   = "reaper"
	RoleOperator = "operator"
)

// newHolder names this process for the timeline: role, host, pid and 8 hex
// digits drawn now, so that two runs of one pid (a restarted container)
// are told apart.
func newHolder(role string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return fmt.Sprintf("%s:%s:%d:%s", role, strings.ReplaceAll(host, ":", "_"), os.Getpid(), hex.EncodeToString(b[:]))
}

// RoleOf returns the role a holder names (its first word).
func RoleOf(holder string) string {
	role, _, _ := strings.Cut(holder, ":")
	return role
}

// Holder names the process this store writes timeline entries as.
func (s *Store) Holder() string { return s.holder }

// entries encodes the entries a statement appends, stamped with this
// store's holder, or returns nil (SQL NULL: nothing appended) when the
// timeline is off.
func (s *Store) entries(es ...Entry) *string {
	if s.cfg.TimelineOff {
		return nil
	}
	b := make([]byte, 0, 160*len(es))
	b = append(b, '[')
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		e.Holder = s.holder
		b = appendUnstamped(b, e)
	}
	text := string(append(b, ']'))
	return &text
}

// claimEntries are a new key's first entries: claimed, and reached when
// its first phases commit with the claim (ClaimParams.Point).
func (s *Store) claimEntries(point RecoveryPoint) *string {
	if point == PointStart {
		return s.entries(Entry{Kind: KindClaimed})
	}
	return s.entries(Entry{Kind: KindClaimed}, Entry{Kind: KindReached, RecoveryPoint: point})
}

// takenOverEntries is a takeover's entry, by this store's role.
func (s *Store) takenOverEntries() *string {
	return s.entries(Entry{Kind: KindTakenOver, By: s.cfg.Role})
}

// holderColumn is the holder column's value for a claim or a takeover:
// NULL when the timeline is off, so that make bench's comparison measures
// everything this records.
func (s *Store) holderColumn() *string {
	if s.cfg.TimelineOff {
		return nil
	}
	return &s.holder
}

// TimelineOffFromEnv reads TIMELINE: "on" (the default) or "off", which
// records no timeline (make bench's comparison; never production).
func TimelineOffFromEnv(getenv envconfig.Getenv) (bool, error) {
	switch v := getenv("TIMELINE"); v {
	case "", "on":
		return false, nil
	case "off":
		return true, nil
	default:
		return false, fmt.Errorf("TIMELINE: %q must be on or off", v)
	}
}

// Note records e in the key's timeline with the holder's next write
// (Advance, Finish or Release), in that statement: a moment with no
// statement of its own, a PSP call. Notes of a run that ends without a
// write (its process died, its lease was lost, its transaction rolled
// back) are never recorded, like the run's other effects.
func (l *Lease) Note(e Entry) {
	if !l.store.cfg.TimelineOff {
		l.notes = append(l.notes, e)
	}
}

// take returns the holder's notes followed by own, encoded for a
// statement, and forgets the notes: they are written at most once.
func (l *Lease) take(own ...Entry) *string {
	es := append(l.notes, own...)
	l.notes = nil
	return l.store.entries(es...)
}

// History is what operators read of a key's life: its identity, its
// object, who holds it now and its timeline, oldest entry first.
type History struct {
	ID       ID
	ObjectID string
	// Holder holds the key's lease now ("" when nobody does).
	Holder string
	// TraceContext is the claiming request's W3C traceparent, if any.
	TraceContext string
	Entries      []Entry
}

// historySQL reads the newest incarnation of a key, as viewSQL does.
const historySQL = `SELECT tenant_id, key, created_at, coalesce(object_id, ''),
       CASE WHEN state = 'started' AND locked_until > phasepay_now() THEN coalesce(holder, '') ELSE '' END,
       coalesce(trace_context, ''), coalesce(timeline, '[]')
  FROM idempotency_keys WHERE tenant_id = $1 AND key = $2
 ORDER BY created_at DESC LIMIT 1`

// ReadHistory returns a key's history, or ErrNotFound: also once the key's
// partition was dropped, which takes its timeline with it.
func ReadHistory(ctx context.Context, q DBTX, tenantID int64, key string) (History, error) {
	var (
		h   History
		raw []byte
	)
	err := q.QueryRow(ctx, historySQL, tenantID, key).Scan(&h.ID.TenantID, &h.ID.Key, &h.ID.CreatedAt,
		&h.ObjectID, &h.Holder, &h.TraceContext, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return History{}, fmt.Errorf("timeline of %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return History{}, fmt.Errorf("timeline of %q: %w", key, err)
	}
	if err := json.Unmarshal(raw, &h.Entries); err != nil {
		return History{}, fmt.Errorf("timeline of %q: %w", key, err)
	}
	return h, nil
}
