package charges_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
)

// TestBatchedChargesEachMeetTheirOwnOutcome creates charges from many
// goroutines at once, so that their claims and commits share batches:
// new keys, declines, a key sent twice at once and a key reused with
// another body. Each request must get the answer it gets alone, each key
// one charge and one event.
func TestBatchedChargesEachMeetTheirOwnOutcome(t *testing.T) {
	t.Parallel()
	b := chargestest.Setup(t, idempotency.Config{})
	chargeTogether(t, b, b.Service(t, 0, phases.Config{}))
}

// TestBatchedChargesBehindATransactionPooler is the same behind PgBouncer
// in transaction mode, where no statement stays prepared: each set-based
// form goes out with its parameters' types, described once per process.
func TestBatchedChargesBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := chargestest.Setup(t, idempotency.Config{})
	bouncer := pgbouncer.ForTest(t, pgbouncer.Config{Server: b.URL, PoolSize: 8})
	cfg, err := dbpool.Config{URL: bouncer.URL(b.URL), Pooler: dbpool.PoolerTransaction}.PoolConfig()
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	chargeTogether(t, b, chargestest.NewService(t, pool, b.Keys, b.PSP, phases.Config{}))
}

// chargeTogether is TestBatchedChargesEachMeetTheirOwnOutcome on svc.
func chargeTogether(t *testing.T, b *chargestest.Bundle, svc *charges.Service) {
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

// TestKillInsideABatchLeavesEveryKeyRecoverable kills the run of every
// request of a batch between the batch's statements (nothing of it
// committed) and after its commit (all of it committed, no answer sent).
// Each key's retry after the lease must end it once: one charge, one
// authorization at the PSP, the answer the first run would have given.
func TestKillInsideABatchLeavesEveryKeyRecoverable(t *testing.T) {
	t.Parallel()
	for _, at := range []phases.CrashPoint{phases.CrashInBatch, phases.CrashAfterBatch} {
		t.Run(at.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := chargestest.Setup(t, idempotency.Config{})
			dying := b.Service(t, 0, phases.Config{CrashHook: phasestest.CrashAt(at)})
			const n = 48
			crashed := make(chan string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("k-%d", i)
					body := fmt.Sprintf(`{"amount": %d, "currency": "usd", "payment_method": "pm_card_visa"}`, 100+i)
					_, err := dying.Create(ctx, b.Tenant, key, phases.AsSent([]byte(body)))
					if errors.Is(err, phasestest.ErrCrash) {
						crashed <- key
						return
					}
					assert.NoError(t, err, key)
				}()
			}
			wg.Wait()
			close(crashed)
			require.NotEmpty(t, crashed, "no batch was killed")
			later := b.Service(t, b.Keys.Lease()+time.Second, phases.Config{})
			for key := range crashed {
				var i int
				_, err := fmt.Sscanf(key, "k-%d", &i)
				require.NoError(t, err)
				body := fmt.Sprintf(`{"amount": %d, "currency": "usd", "payment_method": "pm_card_visa"}`, 100+i)
				res, err := later.Create(ctx, b.Tenant, key, phases.AsSent([]byte(body)))
				require.NoError(t, err, key)
				require.Equal(t, http.StatusCreated, res.Response.Status, key)
			}
			for i := range n {
				key := fmt.Sprintf("k-%d", i)
				state, _, _ := b.KeyState(t, key)
				require.Equal(t, "done", state, key)
				ids := b.ChargeIDs(t, key)
				require.Len(t, ids, 1, key)
				require.Len(t, b.AuthorizationsFor(ids[0]), 1, key)
			}
		})
	}
}

// TestBatchedChargesBetweenPSPsRecordTheirAttempts: with several PSPs every
// attempt has its row, written with the charge and ended with the answer,
// in batches as alone. Half the charges are declined, so that a batch's
// attempts end with different outcomes.
func TestBatchedChargesBetweenPSPsRecordTheirAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newRoutedWorld(t, routedConfig{})
	svc := w.service(t, 0, phases.Config{})
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := visa
			if i%2 == 1 {
				body = declined
			}
			_, err := svc.Create(ctx, w.Tenant, fmt.Sprintf("r-%d", i), phases.AsSent([]byte(body)))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	for i := range n {
		c := w.chargeOfKey(t, fmt.Sprintf("r-%d", i))
		want := "authorized"
		if i%2 == 1 {
			want = "declined"
		}
		require.Equal(t, want, string(c.Status), c.ID)
		if want == "authorized" {
			require.Equal(t, []string{"primary"}, w.authorizedAt(c.ID), c.ID)
		}
		attempts := w.attempts(t, c.ID)
		require.Len(t, attempts, 1, c.ID)
		require.Equal(t, "primary", attempts[0].PSP)
		require.NotNil(t, attempts[0].Outcome, c.ID)
		require.Equal(t, want, *attempts[0].Outcome, c.ID)
	}
	require.Positive(t, svc.BatchStats().Batches, "no two requests shared a batch")
}
