package idempotency

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Census counts the keys that are not done, by what they wait for. It is
// what the reaper's gauges show, and it separates the two things an
// unfinished key can mean: a request waiting on its retry schedule (a PSP
// outage makes many, and that is the schedule working) and a request that
// is due and that no reaper picks up (overdue: something is wrong with
// the reapers).
//
// Each count stops at CensusLimit: the census reads what it counts, and a
// reaper takes one every pass, so a long outage's million waiting keys
// read as CensusLimit ("at least"), and cost no more to count.
type Census struct {
	// InFlight: started, lease held; a worker or reaper is driving it.
	InFlight int64
	// Waiting: started, no lease, next attempt not yet due or due for less
	// than the grace the reapers get to pick it up. InFlight and Waiting
	// are counted among the first CensusLimit such keys in due order: past
	// it, the two add up to CensusLimit (a lease runs out within LEASE, so
	// the keys in flight come first, unless that many waiting keys are due
	// within a lease too).
	Waiting int64
	// Overdue: started, no lease, due for longer than the grace.
	Overdue int64
	// OverdueMaxAttempts is the most attempts any overdue key has used (of
	// the CensusLimit longest overdue).
	OverdueMaxAttempts int
	// NeedsAttention: given up after GIVE_UP_AFTER; only an operator
	// moves it on.
	NeedsAttention int64
}

// CensusLimit is where each count of the census stops.
const CensusLimit = 500

// censusSQL reads at most CensusLimit keys for each count, each count a
// walk of an index that stops at its LIMIT (pitfall Q9 "A backlog every
// pass reads again"): the started keys through idempotency_keys_due in due
// order (dueAtExpr, the reaper's own pick's order, dueKeysSQL), from the
// grace ($1 µs) back for the overdue ones and on from it for the others;
// the needs_attention ones through idempotency_keys_needs_attention. It
// counted every unfinished key, read through idempotency_keys_unfinished:
// during a long PSP outage, millions at every reaper pass. The limit is a
// constant of the statement: a generic plan takes a LIMIT $n to return a
// tenth of what it limits.
var censusSQL = strings.ReplaceAll(`
WITH recent AS (
    SELECT locked_until FROM idempotency_keys
     WHERE state = 'started' AND `+dueAtExpr+` > phasepay_now() - $1 * interval '1 microsecond'
     ORDER BY `+dueAtExpr+`
     LIMIT {{limit}}
), overdue AS (
    SELECT attempts FROM idempotency_keys
     WHERE state = 'started' AND `+dueAtExpr+` <= phasepay_now() - $1 * interval '1 microsecond'
     ORDER BY `+dueAtExpr+`
     LIMIT {{limit}}
)
SELECT (SELECT count(*) FROM recent WHERE locked_until > phasepay_now()),
       (SELECT count(*) FROM recent WHERE coalesce(locked_until <= phasepay_now(), true)),
       (SELECT count(*) FROM overdue),
       (SELECT coalesce(max(attempts), 0) FROM overdue),
       (SELECT count(*) FROM (SELECT FROM idempotency_keys WHERE state = 'needs_attention'
                               ORDER BY tenant_id, created_at LIMIT {{limit}}) n)`, "{{limit}}", strconv.Itoa(CensusLimit))

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
