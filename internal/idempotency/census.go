package idempotency

import (
	"context"
	"fmt"
	"time"
)

// Census counts the keys that are not done, by what they wait for. It is
// what the reaper's gauges show, and it separates the two things an
// unfinished key can mean: a request waiting on its retry schedule (a PSP
// outage makes many, and that is the schedule working) and a request that
// is due and that no reaper picks up (overdue: something is wrong with
// the reapers).
type Census struct {
	// InFlight: started, lease held; a worker or reaper is driving it.
	InFlight int64
	// Waiting: started, no lease, next attempt not yet due or due for less
	// than the grace the reapers get to pick it up.
	Waiting int64
	// Overdue: started, no lease, due for longer than the grace.
	Overdue int64
	// OverdueMaxAttempts is the most attempts any overdue key has used.
	OverdueMaxAttempts int
	// NeedsAttention: given up after GIVE_UP_AFTER; only an operator
	// moves it on.
	NeedsAttention int64
}

// censusSQL reads only the keys that are not done, through the partial
// index idempotency_keys_unfinished (migrations/00007): a handful, or
// during a long PSP outage the requests it caught, never the millions of
// finished keys. A started key is due at dueAtExpr, the expression the
// reaper's own pick (dueKeysSQL) orders by; it is overdue once that moment
// is more than $1 (the grace, microseconds) in the past.
const censusSQL = `
SELECT count(*) FILTER (WHERE state = 'started' AND locked_until > phasepay_now()),
       count(*) FILTER (WHERE state = 'started' AND coalesce(locked_until <= phasepay_now(), true)
                          AND ` + dueAtExpr + ` > phasepay_now() - $1 * interval '1 microsecond'),
       count(*) FILTER (WHERE state = 'started' AND coalesce(locked_until <= phasepay_now(), true)
                          AND ` + dueAtExpr + ` <= phasepay_now() - $1 * interval '1 microsecond'),
       coalesce(max(attempts) FILTER (WHERE state = 'started' AND coalesce(locked_until <= phasepay_now(), true)
                          AND ` + dueAtExpr + ` <= phasepay_now() - $1 * interval '1 microsecond'), 0),
       count(*) FILTER (WHERE state = 'needs_attention')
  FROM idempotency_keys
 WHERE state <> 'done'`

// TakeCensus counts the unfinished keys; a started key due for longer than
// grace without being picked up is Overdue.
func (s *Store) TakeCensus(ctx context.Context, q DBTX, grace time.Duration) (Census, error) {
	var c Census
	err := q.QueryRow(ctx, censusSQL, grace.Microseconds()).
		Scan(&c.InFlight, &c.Waiting, &c.Overdue, &c.OverdueMaxAttempts, &c.NeedsAttention)
	if err != nil {
		return Census{}, fmt.Errorf("census of unfinished keys: %w", err)
	}
	return c, nil
}
