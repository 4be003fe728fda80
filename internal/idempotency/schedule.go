package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/envconfig"
)

// releaseSQL ends an attempt that could not finish (the PSP's outcome is
// unknown, or it was busy) at the key's last recovery point: the lease ends
// now and the next attempt is scheduled. The schedule is computed here, by
// the database, so that the api and every reaper agree on it:
//
//   - the n-th failed attempt (n = attempts before this one, from 0) makes
//     the next due RetryBase·2ⁿ later, jittered by ±25% so that keys that
//     failed together (a PSP outage) do not come back together, and never
//     more than RetryMax later; never sooner than $8, the PSP's own
//     Retry-After for a busy answer;
//   - a key claimed more than GiveUpAfter ago becomes needs_attention
//     instead: no next attempt, until an operator acts. last_error stays as
//     its reason.
//
// The timeline gains the holder's notes ($10: the PSP call that failed)
// and "released" with the reason in stable words ($11), the raw cause and
// the next attempt just decided: the jitter is drawn once (FROM jitter), so
// that the next attempt written in the entry is the one set.
//
// Fenced like every write of a holder: a worker that lost its lease cannot
// reschedule (or give up on) a key someone else now holds.
const releaseSQL = `
UPDATE idempotency_keys
   SET locked_until = NULL,
       holder = NULL,
       attempts = attempts + 1,
       last_error = left($5, 1000),
       state = CASE WHEN created_at <= phasepay_now() - $9 * interval '1 microsecond'
                    THEN 'needs_attention' ELSE 'started' END,
       next_attempt_at = ` + releaseNextAttemptSQL + `,
       timeline = CASE WHEN $10::text IS NULL THEN timeline
           ELSE phasepay_timeline_append(timeline, $10, lock_version) || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                'at', phasepay_timeline_time(phasepay_now()), 'kind', 'released', 'holder', $12::text,
                'lock_version', lock_version, 'reason', $11::text, 'detail', left($5, 1000),
                'next_attempt_at', phasepay_timeline_time(` + releaseNextAttemptSQL + `))))
           END
  FROM (SELECT random() AS r) jitter
 WHERE tenant_id = $1 AND key = $2 AND created_at = $3
   AND lock_version = $4
   AND state = 'started'
RETURNING state, next_attempt_at, greatest(1, ceil(extract(epoch FROM next_attempt_at - phasepay_now())))::int`

// releaseNextAttemptSQL is the next attempt releaseSQL decides (NULL: given
// up), from the key's row before the release and the jitter drawn once.
const releaseNextAttemptSQL = `CASE WHEN created_at <= phasepay_now() - $9 * interval '1 microsecond' THEN NULL
           ELSE phasepay_now() + greatest(
                    least(least($6 * power(2, least(attempts, 40)), $7) * (0.75 + jitter.r / 2), $7),
                    $8) * interval '1 microsecond'
           END`

// Released is what Release decided for the key.
type Released struct {
	// NeedsAttention: the key was given up (GiveUpAfter) and waits for an
	// operator; NextAttemptAt and RetryAfter are then zero.
	NeedsAttention bool
	// NextAttemptAt is when the next attempt is due; RetryAfter is that in
	// whole seconds from now (at least 1), for a Retry-After header.
	NextAttemptAt time.Time
	RetryAfter    int
}

// NeedsAttentionHook is told of a key given up (needs_attention) inside the
// very transaction of releaseSQL that gives it up, so that what it writes
// (an event, internal/events) commits exactly when the key's state does:
// never one without the other. rec is the key as releaseSQL left it. An
// error rolls the release back. (A hook rather than a call: this package
// knows nothing of what is built on it.)
type NeedsAttentionHook func(ctx context.Context, tx DBTX, rec Record) error

// beginner opens a transaction: a pool, a connection, or a transaction (a
// savepoint).
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Release ends the holder's attempt without finishing: the lease is given
// up at the key's last recovery point and the next attempt is scheduled
// (see releaseSQL), no sooner than notBefore from now (a PSP's Retry-After;
// 0 for the schedule alone). cause is recorded as the key's last_error and
// as the detail of the timeline's released entry, whose reason is the
// cause's stable words (Because).
// It returns ErrLeaseLost if the lease was already lost, in which case
// there is nothing to release. With a Config.NeedsAttention hook, the
// release runs in a transaction of its own on q (a savepoint if q is one)
// and the hook runs in it when the key is given up.
func (l *Lease) Release(ctx context.Context, q DBTX, cause error, notBefore time.Duration) (Released, error) {
	r := l.Record
	msg := "released"
	if cause != nil {
		msg = cause.Error()
	}
	// The notes go with this statement, whichever way it ends: a release
	// that fails is not tried again with them.
	notes, reason := l.take(), reasonOf(cause)
	var rel Released
	release := func(q DBTX) error {
		var (
			state State
			next  *time.Time
		)
		rel = Released{}
		err := q.QueryRow(ctx, releaseSQL, r.TenantID, r.Key, r.CreatedAt, r.LockVersion, msg,
			l.store.cfg.RetryBase.Microseconds(), l.store.cfg.RetryMax.Microseconds(), notBefore.Microseconds(),
			l.store.cfg.GiveUpAfter.Microseconds(), notes, reason, l.store.holder).Scan(&state, &next, &rel.RetryAfter)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("release %q: %w", r.Key, ErrLeaseLost)
		}
		if err != nil {
			return fmt.Errorf("release %q: %w", r.Key, err)
		}
		if state != StateNeedsAttention {
			rel.NextAttemptAt = *next
			return nil
		}
		rel = Released{NeedsAttention: true}
		if hook := l.store.cfg.NeedsAttention; hook != nil {
			given := r
			given.State, given.Leased, given.NextAttemptAt, given.Due, given.RetryAfter = StateNeedsAttention, false, nil, false, 0
			given.Attempts++
			given.LastError = truncateRunes(msg, 1000)
			if err := hook(ctx, q, given); err != nil {
				return fmt.Errorf("release %q: needs attention: %w", r.Key, err)
			}
		}
		return nil
	}
	if l.store.cfg.NeedsAttention == nil {
		if err := release(q); err != nil {
			return Released{}, err
		}
		return rel, nil
	}
	b, ok := q.(beginner)
	if !ok {
		return Released{}, fmt.Errorf("release %q: %T cannot begin the transaction the needs-attention hook runs in", r.Key, q)
	}
	if err := pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error { return release(tx) }); err != nil {
		return Released{}, err
	}
	return rel, nil
}

// truncateRunes is SQL's left(s, n): the first n characters.
func truncateRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// ScheduleFromEnv reads the retry schedule every process shares: RETRY_BASE
// (default 1s), RETRY_MAX (1h) and GIVE_UP_AFTER (72h), each a Go duration.
func ScheduleFromEnv(getenv envconfig.Getenv) (base, maxWait, giveUpAfter time.Duration, err error) {
	if base, err = envconfig.Duration(getenv, "RETRY_BASE", RetryBaseDefault); err != nil {
		return 0, 0, 0, err
	}
	if maxWait, err = envconfig.Duration(getenv, "RETRY_MAX", RetryMaxDefault); err != nil {
		return 0, 0, 0, err
	}
	if maxWait < base {
		return 0, 0, 0, fmt.Errorf("RETRY_MAX: %s is less than RETRY_BASE %s", maxWait, base)
	}
	if giveUpAfter, err = envconfig.Duration(getenv, "GIVE_UP_AFTER", GiveUpAfterDefault); err != nil {
		return 0, 0, 0, err
	}
	return base, maxWait, giveUpAfter, nil
}
