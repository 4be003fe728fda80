package main

// Tests named after the idempotency pitfalls they guard against, through
// real HTTP.

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

// TestConcurrentDuplicatesExecuteOnce: a client that retries aggressively
// (or a load balancer that duplicates) must not charge twice. Every
// duplicate either waits for nothing and gets 409, or arrives after the
// first finished and gets its stored answer.
func TestConcurrentDuplicatesExecuteOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const (
		n   = 50
		key = "dup-storm"
	)

	start := make(chan struct{})
	results := make([]asyncResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := b.send(t.Context(), http.MethodPost, "/v1/charges", map[string]string{"Idempotency-Key": key}, []byte(visaBody), true)
			results[i] = asyncResult{response: r, err: err}
		})
	}
	close(start)
	wg.Wait()

	var (
		created, conflicts, fresh int
		body201                   string
	)
	for i, r := range results {
		require.NoError(t, r.err, "request %d", i)
		switch r.status {
		case http.StatusCreated:
			created++
			if body201 == "" {
				body201 = string(r.body)
			}
			require.Equal(t, body201, string(r.body), "request %d: every 201 must carry the same charge", i)
			if r.header.Get("Idempotent-Replayed") != "true" {
				fresh++
			}
		case http.StatusConflict:
			conflicts++
			requireProblem(t, r.response, http.StatusConflict, "idempotency_key_in_use")
			requireRetryAfter(t, r.response)
		default:
			require.FailNow(t, "unexpected status", "request %d: %d %s", i, r.status, r.body)
		}
	}
	t.Logf("%d created (%d executed, %d replayed), %d conflicts", created, fresh, created-fresh, conflicts)
	require.Equal(t, 1, fresh, "exactly one request executes; every other 201 is a replay")
	require.Equal(t, 1, b.keyRows(t, key))
	require.Equal(t, 1, b.chargeRows(t, key), "exactly one charge")
	require.Len(t, b.psp.Authorizations(), 1, "exactly one authorization")

	// After the dust settles, a retry replays the one charge.
	final := b.post(t, key, visaBody)
	require.Equal(t, http.StatusCreated, final.status)
	require.Equal(t, "true", final.header.Get("Idempotent-Replayed"))
	require.Equal(t, body201, string(final.body))
}

// TestClaimCommittedBeforeWork: a claim held in an open transaction around
// the PSP call would make a duplicate block on its row lock for the whole
// call, and leave nothing for the reaper to see. The claim and the charge
// must be committed, visible to any other connection, while the PSP call
// is in flight, and a duplicate must get 409 at once.
func TestClaimCommittedBeforeWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const (
		key     = "slow-1"
		latency = 2 * time.Second
	)
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{LatencyMS: int(latency.Milliseconds())}))

	first := b.postAsync(t, key, visaBody)
	b.waitAuthorizing(t, 1)

	// Read from the test's own connection while the PSP call sleeps.
	st := b.keyState(t, key)
	require.Equal(t, "started", st.State)
	require.Equal(t, "charge_created", st.RecoveryPoint)
	require.True(t, st.LeaseValid, "the running request holds a valid lease")
	var status string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT status FROM charges WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenant.ID, key).Scan(&status))
	require.Equal(t, "pending", status)

	dup := b.postAsync(t, key, visaBody)
	select {
	case r := <-dup:
		require.NoError(t, r.err)
		requireProblem(t, r.response, http.StatusConflict, "idempotency_key_in_use")
		requireRetryAfter(t, r.response)
		require.Less(t, r.elapsed, latency/2)
	case <-first:
		require.FailNow(t, "the duplicate waited for the first request to finish")
	case <-time.After(latency / 2):
		require.FailNow(t, "the duplicate was not answered within half the PSP latency")
	}

	r := await(t, first)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	require.Equal(t, 1, b.chargeRows(t, key))
	require.Len(t, b.psp.Authorizations(), 1)
}

// TestReplayWithDifferentParametersIs422: a key reused for another request
// must be refused, never answered with the first request's stored
// response (the client would believe its new charge was made) and never
// executed.
func TestReplayWithDifferentParametersIs422(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "reuse-1"

	first := b.post(t, key, visaBody)
	require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)

	variants := map[string]string{
		"amount":              strings.Replace(visaBody, `"amount":1000`, `"amount":1001`, 1),
		"currency":            strings.Replace(visaBody, `"usd"`, `"eur"`, 1),
		"payment method":      strings.Replace(visaBody, `pm_card_visa`, `pm_card_mastercard`, 1),
		"description":         strings.Replace(visaBody, `order 42`, `order 43`, 1),
		"description dropped": `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"order":"42"}}`,
		"metadata value":      strings.Replace(visaBody, `{"order":"42"}`, `{"order":"43"}`, 1),
		"metadata added":      strings.Replace(visaBody, `{"order":"42"}`, `{"order":"42","x":"y"}`, 1),
		"metadata empty":      strings.Replace(visaBody, `{"order":"42"}`, `{}`, 1),
		"declining card":      strings.Replace(visaBody, `pm_card_visa`, mockpsp.PaymentMethodDeclined, 1),
	}
	t.Run("group", func(t *testing.T) {
		for name, body := range variants {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := b.post(t, key, body)
				requireProblem(t, r, http.StatusUnprocessableEntity, "idempotency_key_mismatch")
				require.Empty(t, r.header.Values("Idempotent-Replayed"))
				require.NotContains(t, string(r.body), decodeCharge(t, first.body).ID, "a mismatch must not leak the first request's charge")
			})
		}
	})

	require.Equal(t, 1, b.chargeRows(t, key))
	require.Len(t, b.psp.Authorizations(), 1, "no variant reached the PSP")
	// The key still belongs to the first request.
	again := b.post(t, key, visaBody)
	require.Equal(t, string(first.body), string(again.body))
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
}

// TestClientHangupDoesNotAbortCharge: a client that gives up during the PSP
// call must not abort the charge half way (an authorization nobody records);
// the run finishes on its own and the client's retry replays its answer.
func TestClientHangupDoesNotAbortCharge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "hangup-1"
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{LatencyMS: 1000}))

	ctx, hangUp := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() {
		_, err := b.send(ctx, http.MethodPost, "/v1/charges", map[string]string{"Idempotency-Key": key}, []byte(visaBody), true)
		gone <- err
	}()
	b.waitAuthorizing(t, 1)
	hangUp()
	require.ErrorIs(t, <-gone, context.Canceled)

	require.Eventually(t, func() bool {
		var state string
		err := b.pool.QueryRow(t.Context(), `SELECT state FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
			b.tenant.ID, key).Scan(&state)
		return err == nil && state == "done"
	}, 15*time.Second, 20*time.Millisecond, "the run must finish without its client")

	r := b.post(t, key, visaBody)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	c := decodeCharge(t, r.body)
	require.Equal(t, "authorized", c.Status)
	require.Len(t, b.psp.Authorizations(), 1)
	require.Equal(t, *c.PSPReference, b.psp.Authorizations()[0].ID)
}

// TestExpiredLeaseIsTakenOver: a worker that died after the PSP answered
// (the lost-response case inside the service) leaves its key started and
// leased. Until the lease runs out a retry gets 409; after, the retry takes
// the key over, resumes at charge_created and repeats the PSP call under the
// same PSP key, which replays the first authorization: one charge, one
// authorization, whichever worker finishes.
func TestExpiredLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	const (
		key   = "crash-1"
		lease = 3 * time.Second
	)
	b := setup(t, func(m *Main) {
		m.Config.Lease = lease
		m.CrashHook = phasestest.CrashOnceAt(phases.CrashAfterCall)
	})

	// The crash surfaces as a 500; the key keeps its lease.
	r := b.post(t, key, visaBody)
	requireProblem(t, r, http.StatusInternalServerError, "internal")
	require.Len(t, b.psp.Authorizations(), 1, "the PSP authorized before the crash")
	st := b.keyState(t, key)
	require.Equal(t, "charge_created", st.RecoveryPoint)
	require.True(t, st.LeaseValid)

	busy := b.post(t, key, visaBody)
	requireProblem(t, busy, http.StatusConflict, "idempotency_key_in_use")
	requireRetryAfter(t, busy)

	require.Eventually(t, func() bool {
		var valid bool
		err := b.pool.QueryRow(t.Context(), `SELECT locked_until > now() FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
			b.tenant.ID, key).Scan(&valid)
		return err == nil && !valid
	}, 3*lease, 50*time.Millisecond, "the dead worker's lease must run out")

	resumed := b.post(t, key, visaBody)
	require.Equal(t, http.StatusCreated, resumed.status, "body: %s", resumed.body)
	c := decodeCharge(t, resumed.body)
	ledger := b.psp.Authorizations()
	require.Len(t, ledger, 1, "never authorized twice")
	require.Equal(t, c.ID, ledger[0].Reference)
	require.Equal(t, ledger[0].ID, *c.PSPReference)
	require.Equal(t, 1, ledger[0].Attempts, "the takeover looked the charge up by reference instead of sending it again")
	require.Equal(t, 1, b.chargeRows(t, key))
	require.Equal(t, keyState{State: "done", RecoveryPoint: "done"}, b.keyState(t, key))
}
