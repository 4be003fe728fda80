package idempotency_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	fp := idempotency.Fingerprint{1}
	other := idempotency.Fingerprint{2}
	rec := func(state idempotency.State, leased bool, f idempotency.Fingerprint) idempotency.Record {
		return idempotency.Record{State: state, Leased: leased, Due: true, Request: idempotency.Canonical{Fingerprint: f}}
	}
	notDue := func(r idempotency.Record) idempotency.Record { r.Due = false; r.RetryAfter = 7; return r }
	tests := []struct {
		name string
		rec  idempotency.Record
		want idempotency.Decision
	}{
		{"done, same request", rec(idempotency.StateDone, false, fp), idempotency.Replay},
		{"started, lease valid", rec(idempotency.StateStarted, true, fp), idempotency.InProgress},
		{"started, lease expired", rec(idempotency.StateStarted, false, fp), idempotency.TakeOver},
		// A different request learns nothing of the first, whatever its state.
		{"done, other request", rec(idempotency.StateDone, false, other), idempotency.Mismatch},
		{"started leased, other request", rec(idempotency.StateStarted, true, other), idempotency.Mismatch},
		{"started expired, other request", rec(idempotency.StateStarted, false, other), idempotency.Mismatch},
		// A free key whose next attempt is not due waits: nothing is sent.
		{"started free, not due", notDue(rec(idempotency.StateStarted, false, fp)), idempotency.NotDue},
		// A live lease is reported as such even while the schedule says wait.
		{"started leased, not due", notDue(rec(idempotency.StateStarted, true, fp)), idempotency.InProgress},
		{"needs attention", rec(idempotency.StateNeedsAttention, false, fp), idempotency.Unresolved},
		{"needs attention, not due", notDue(rec(idempotency.StateNeedsAttention, false, fp)), idempotency.Unresolved},
		{"needs attention, other request", rec(idempotency.StateNeedsAttention, false, other), idempotency.Mismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, idempotency.Decide(tt.rec, fp))
		})
	}
}
