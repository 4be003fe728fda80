package idempotency

import (
	"fmt"
	"strings"
)

// RequestState is where a key's request stands, in the one vocabulary that
// every interface uses: the tenant's GET /v1/idempotency_keys (`state` and
// `?state=`), the operator's `api requests list --state` and `--json`, the
// request.needs_attention event and the docs. It is the stored State with a
// started key split by whether a worker holds its lease right now, a
// distinction the database alone can make (by its clock, phasepay_now()).
//
// This file is the only place the stored states are mapped to it:
// RequestStateOf in Go, requestStateSQL and requestStateFilterSQL in SQL
// (TestRequestStateSQLAgreesWithGo checks that the three agree).
type RequestState string

// The request states, in the order every list of them is written.
const (
	RequestInProgress     RequestState = "in_progress"     // started, a worker holds its lease
	RequestUnfinished     RequestState = "unfinished"      // started, nobody holds it: waiting for its next attempt
	RequestNeedsAttention RequestState = "needs_attention" // given up: an operator must act
	RequestCompleted      RequestState = "completed"       // done, its answer stored
)

// RequestStates returns every request state, in the documented order.
func RequestStates() []RequestState {
	return []RequestState{RequestInProgress, RequestUnfinished, RequestNeedsAttention, RequestCompleted}
}

// RequestStateAliases are the other names a filter accepts, and the state
// each means. They are read, never written: `done` is what the operator's
// commands called a completed request before the vocabularies were one, and
// a script that still says it keeps working.
func RequestStateAliases() map[string]RequestState {
	return map[string]RequestState{"done": RequestCompleted}
}

// ParseRequestState reads a state filter: one of RequestStates, or an
// alias of one.
func ParseRequestState(s string) (RequestState, error) {
	for _, st := range RequestStates() {
		if s == string(st) {
			return st, nil
		}
	}
	if st, ok := RequestStateAliases()[s]; ok {
		return st, nil
	}
	names := make([]string, 0, 4)
	for _, st := range RequestStates() {
		names = append(names, string(st))
	}
	return "", fmt.Errorf("state %q: must be one of %s (done is accepted for completed)", s, strings.Join(names, ", "))
}

// RequestStateOf is the request state of a key stored in state s whose
// lease is (leaseHeld) or is not held: locked_until later than
// phasepay_now().
func RequestStateOf(s State, leaseHeld bool) RequestState {
	switch {
	case s == StateDone:
		return RequestCompleted
	case s == StateNeedsAttention:
		return RequestNeedsAttention
	case leaseHeld:
		return RequestInProgress
	default:
		return RequestUnfinished
	}
}

// requestStateSQL is RequestStateOf over a row of idempotency_keys.
const requestStateSQL = `CASE WHEN state = 'done' THEN 'completed'
            WHEN state = 'needs_attention' THEN 'needs_attention'
            WHEN locked_until > phasepay_now() THEN 'in_progress'
            ELSE 'unfinished' END`

// requestStateFilterSQL keeps the rows whose request state is $n (any if
// $n is empty). It spells each state as a condition on the stored columns
// rather than comparing requestStateSQL to $n, so that the planner can read
// unfinished and needs_attention keys through the partial index
// idempotency_keys_unfinished.
func requestStateFilterSQL(n int) string {
	p := fmt.Sprintf("$%d", n)
	return `(` + p + ` = ''
   OR (` + p + ` = 'completed' AND state = 'done')
   OR (` + p + ` = 'needs_attention' AND state = 'needs_attention')
   OR (` + p + ` = 'in_progress' AND state = 'started' AND locked_until > phasepay_now())
   OR (` + p + ` = 'unfinished' AND state = 'started' AND (locked_until IS NULL OR locked_until <= phasepay_now())))`
}
