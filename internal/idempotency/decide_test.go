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
		return idempotency.Record{State: state, Leased: leased, Request: idempotency.Canonical{Fingerprint: f}}
	}
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, idempotency.Decide(tt.rec, fp))
		})
	}
}
