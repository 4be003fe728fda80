package charges_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// TestBatchedChargesEachMeetTheirOwnOutcome creates charges from many
// goroutines at once, so that their claims and commits share batches:
// new keys, declines, a key sent twice at once and a key reused with
// another body. Each request must get the answer it gets alone, each key
// one charge and one event.
func TestBatchedChargesEachMeetTheirOwnOutcome(t *testing.T) {
	b := chargestest.Setup(t, idempotency.Config{})
	svc := b.Service(t, 0, phases.Config{})
	ctx := context.Background()
	const n = 96
	type answer struct {
		key    string
		status int
		err    error
	}
	answers := make(chan answer, 2*n)
	var wg sync.WaitGroup
	send := func(key, method string, amount int) {
		defer wg.Done()
		body := fmt.Sprintf(`{"amount": %d, "currency": "usd", "payment_method": %q}`, amount, method)
		res, err := svc.Create(ctx, b.Tenant, key, phases.AsSent([]byte(body)))
		answers <- answer{key, res.Response.Status, err}
	}
	for i := range n {
		method := "pm_card_visa"
		if i%7 == 0 {
			method = "pm_card_chargeDeclined"
		}
		wg.Add(1)
		go send(fmt.Sprintf("k-%d", i), method, 100+i)
		if i%16 == 0 {
			wg.Add(2)
			go send(fmt.Sprintf("k-%d", i), method, 100+i) // the same request twice at once
			go send(fmt.Sprintf("k-%d", i), method, 999)   // the same key, another body
		}
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if errors.Is(a.err, idempotency.ErrMismatch) || errors.Is(a.err, idempotency.ErrInProgress) {
			continue // the same key with another body, or while its first runs
		}
		require.NoError(t, a.err, a.key)
		require.Contains(t, []int{http.StatusCreated, http.StatusPaymentRequired, http.StatusConflict,
			http.StatusUnprocessableEntity}, a.status, a.key)
	}
	for i := range n {
		key := fmt.Sprintf("k-%d", i)
		state, point, _ := b.KeyState(t, key)
		require.Equal(t, "done", state, key)
		require.Equal(t, "done", point, key)
		ids := b.ChargeIDs(t, key)
		require.Len(t, ids, 1, key)
		require.Len(t, b.AuthorizationsFor(ids[0]), 1, key)
		var events int
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1 AND convert_from(body, 'UTF8') LIKE '%' || $2 || '%'`,
			b.Tenant, ids[0]).Scan(&events))
		require.Equal(t, 1, events, key)
	}
	stats := svc.BatchStats()
	t.Logf("%d batches, %d requests in them", stats.Batches, stats.Requests)
	require.Positive(t, stats.Batches, "no two requests shared a batch")
}
