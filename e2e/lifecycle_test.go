package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/client"
)

// lifeCluster is a cluster whose api retries unfinished requests on a
// short schedule, with a Go client (and its journal) talking to it.
type lifeCluster struct {
	*cluster
	base    string
	journal *client.MemoryJournal
	cl      *client.Client
}

func newLifeCluster(t *testing.T) *lifeCluster {
	t.Helper()
	c := newCluster(t, 0)
	addr := freeAddr(t)
	start(t, "api", c.env(map[string]string{"API_ADDR": addr, "RETRY_BASE": "100ms", "RETRY_MAX": "500ms"}), "serve")
	lc := &lifeCluster{cluster: c, base: "http://" + addr, journal: client.NewMemoryJournal()}
	waitHealthy(t, lc.base)
	lc.cl = lc.client(t, 30*time.Second)
	return lc
}

// client returns a client of the api sharing lc's journal.
func (lc *lifeCluster) client(t *testing.T, maxElapsed time.Duration) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{BaseURL: lc.base, APIKey: lc.apiKey, Journal: lc.journal,
		MaxElapsed: maxElapsed, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(cl.CloseIdleConnections)
	return cl
}

func (lc *lifeCluster) setFaults(t *testing.T, faults string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, lc.pspURL+"/_admin/faults", bytes.NewReader([]byte(faults)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300)
}

// pspOperation is one capture, void or refund in the mock PSP's books.
type pspOperation struct {
	Reference string `json:"reference"`
	Amount    int64  `json:"amount"`
	Status    string `json:"status"`
}

func (lc *lifeCluster) books(t *testing.T, kind string) []pspOperation {
	t.Helper()
	resp, err := http.Get(lc.pspURL + "/_admin/" + kind)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct{ Data []pspOperation }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Data
}

func amount(v int64) *int64 { return &v }

// TestPaymentLifeThroughTheClient drives one charge through capture,
// partial refunds (one of them across a PSP outage, resumed from the
// client's journal under its first key) and refusals, and a second through
// a void, against the real api and mock PSP; the PSP's books must agree
// with phasepay's.
func TestPaymentLifeThroughTheClient(t *testing.T) {
	t.Parallel()
	lc := newLifeCluster(t)
	ctx := context.Background()
	visaCharge := client.ChargeParams{Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa"}

	a, err := lc.cl.Charge(ctx, visaCharge)
	require.NoError(t, err)
	require.Equal(t, client.StatusAuthorized, a.Status)

	// Capture part of it; the same intent sent again is a replay.
	capture := client.NewCaptureIntent(a.ID, client.CaptureParams{Amount: amount(600)})
	r := lc.cl.Do(ctx, capture)
	require.NoError(t, r.Err)
	require.Equal(t, client.StatusCaptured, r.Charge.Status)
	require.Equal(t, int64(600), r.Charge.AmountCaptured)
	replay := lc.cl.Do(ctx, capture)
	require.NoError(t, replay.Err)
	require.True(t, replay.Charge.Replayed)
	require.Equal(t, r.Charge.RawBody, replay.Charge.RawBody, "the stored answer, byte for byte")
	_, err = lc.cl.Capture(ctx, a.ID, client.CaptureParams{})
	require.ErrorIs(t, err, client.ErrNotAllowed, "one capture per charge")
	_, err = lc.cl.Void(ctx, a.ID)
	require.ErrorIs(t, err, client.ErrNotAllowed, "a captured charge cannot be voided")

	// Partial refunds, never past the capture.
	var refunds []string
	for _, amt := range []int64{100, 200} {
		rf, err := lc.cl.Refund(ctx, client.RefundParams{Charge: a.ID, Amount: amount(amt)})
		require.NoError(t, err)
		require.Equal(t, client.RefundSucceeded, rf.Status)
		require.Equal(t, amt, rf.Amount)
		refunds = append(refunds, rf.ID)
	}
	_, err = lc.cl.Refund(ctx, client.RefundParams{Charge: a.ID, Amount: amount(400)})
	require.ErrorIs(t, err, client.ErrNotAllowed, "300 of 600 are left")
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, client.CodeAmountTooLarge, apiErr.Problem.Code)

	// The rest of it while the PSP is down: the client gives up, the
	// intent stays journaled, and resuming it once the PSP is back refunds
	// once, under the same key.
	lc.setFaults(t, `{"error_rate": 1}`)
	_, err = lc.client(t, 1500*time.Millisecond).Refund(ctx, client.RefundParams{Charge: a.ID})
	require.ErrorIs(t, err, client.ErrGaveUp)
	require.ErrorIs(t, err, client.ErrUnavailable)
	pending, err := lc.journal.List()
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, client.OpRefund, pending[0].Op)
	lc.setFaults(t, `{}`)
	results, err := lc.cl.ResumePending(ctx)
	require.NoError(t, err)
	require.Len(t, results, 1)
	require.NoError(t, results[0].Err)
	require.Equal(t, int64(300), results[0].Refund.Amount, "all that was left")
	refunds = append(refunds, results[0].Refund.ID)
	pending, err = lc.journal.List()
	require.NoError(t, err)
	require.Empty(t, pending)

	_, err = lc.cl.Refund(ctx, client.RefundParams{Charge: a.ID, Amount: amount(1)})
	require.ErrorIs(t, err, client.ErrNotAllowed, "nothing left to refund")
	got, err := lc.cl.Get(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusCaptured, got.Status)
	require.Equal(t, int64(600), got.AmountCaptured)
	require.Equal(t, int64(600), got.AmountRefunded)
	for _, id := range refunds {
		rf, err := lc.cl.GetRefund(ctx, id)
		require.NoError(t, err)
		require.Equal(t, a.ID, rf.Charge)
		require.Equal(t, client.RefundSucceeded, rf.Status)
	}

	// A second charge, voided; then it cannot be captured.
	b, err := lc.cl.Charge(ctx, visaCharge)
	require.NoError(t, err)
	voided, err := lc.cl.Void(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusVoided, voided.Status)
	_, err = lc.cl.Capture(ctx, b.ID, client.CaptureParams{})
	require.ErrorIs(t, err, client.ErrNotAllowed)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, client.CodeChargeNotCapturable, apiErr.Problem.Code)

	// The PSP's books agree: one capture of 600, one void, and exactly the
	// three refunds phasepay made, summing to the capture.
	captures := lc.books(t, "captures")
	require.Len(t, captures, 1)
	require.Equal(t, a.ID, captures[0].Reference)
	require.Equal(t, int64(600), captures[0].Amount)
	voids := lc.books(t, "voids")
	require.Len(t, voids, 1)
	require.Equal(t, b.ID, voids[0].Reference)
	var refs []string
	var sum int64
	for _, op := range lc.books(t, "refunds") {
		refs = append(refs, op.Reference)
		sum += op.Amount
	}
	require.ElementsMatch(t, refunds, refs, "one PSP refund per refund, none twice")
	require.Equal(t, int64(600), sum)
}

// TestListsPageThroughPaymentLives lists charges and one charge's refunds
// through the client's iterators, a page of one or two at a time, against
// the real api: newest first, every object once.
func TestListsPageThroughPaymentLives(t *testing.T) {
	t.Parallel()
	lc := newLifeCluster(t)
	ctx := context.Background()

	var charges []string // oldest first
	for i := range 5 {
		ch, err := lc.cl.Charge(ctx, client.ChargeParams{Amount: int64(1000 + i), Currency: "usd", PaymentMethod: "pm_card_visa"})
		require.NoError(t, err)
		charges = append(charges, ch.ID)
	}
	a := charges[0]
	_, err := lc.cl.Capture(ctx, a, client.CaptureParams{})
	require.NoError(t, err)
	var refunds []string // oldest first
	for range 3 {
		rf, err := lc.cl.Refund(ctx, client.RefundParams{Charge: a, Amount: amount(100)})
		require.NoError(t, err)
		refunds = append(refunds, rf.ID)
	}

	var listed []string
	for ch, err := range lc.cl.ListCharges(ctx, client.ListParams{Limit: 2}) {
		require.NoError(t, err)
		listed = append(listed, ch.ID)
		if ch.ID == a {
			require.Equal(t, client.StatusCaptured, ch.Status)
			require.Equal(t, int64(300), ch.AmountRefunded)
		}
	}
	slices.Reverse(charges)
	require.Equal(t, charges, listed, "newest first, every charge once across pages")

	listed = nil
	for rf, err := range lc.cl.ListRefunds(ctx, a, client.ListParams{Limit: 1}) {
		require.NoError(t, err)
		require.Equal(t, a, rf.Charge)
		listed = append(listed, rf.ID)
	}
	slices.Reverse(refunds)
	require.Equal(t, refunds, listed)

	page, err := lc.cl.ListRefundsPage(ctx, a, client.ListParams{Limit: 2, StartingAfter: refunds[0]})
	require.NoError(t, err)
	require.False(t, page.HasMore)
	require.Len(t, page.Data, 2)
	require.Equal(t, refunds[1], page.Data[0].ID)

	// Another charge's refunds: none.
	n := 0
	for _, err := range lc.cl.ListRefunds(ctx, charges[0], client.ListParams{}) {
		require.NoError(t, err)
		n++
	}
	require.Zero(t, n, "the newest charge has no refunds")

	_, err = lc.cl.ListRefundsPage(ctx, "ch_unknown", client.ListParams{})
	require.ErrorIs(t, err, client.ErrNotFound)
}
