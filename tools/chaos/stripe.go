package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/tools/procs"
	"github.com/phasepay/phasepay/tools/stripestandin"
)

// StripeDialect runs the chaos workload against Stripe's dialect: the
// processes reach their PSP through the Stripe connector
// (internal/psp/stripepsp, PSP_URL=stripe+http://…), and the PSP is a
// stand-in that keeps Stripe's semantics (tools/stripestandin): a saved
// answer per key, 500s included, keys forgotten after KeyWindow, a search
// that lags up to SearchLag. It also serves the mock's admin surface, so
// faults, outages and the checks are the run's usual ones.
//
// The connector is told a window and a lag bound with margins, as in
// production (23 h of Stripe's 24, an hour of search lag): a worker frozen
// past its lease (LEASE + 0.5 s) between deciding to send and sending must
// still send within the stand-in's window, and a renewed key's proof
// search must come after whatever such a worker made shows in search.
type StripeDialect struct {
	// KeyWindow is how long the stand-in remembers a key. Default 10s.
	KeyWindow time.Duration
	// SearchLag is the stand-in's longest search lag. Default 1s.
	SearchLag time.Duration

	url string // the stand-in's stripe+http URL, once started
}

// margin is what the connector's window and lag bound leave for a frozen
// worker: longer than the harness's freezes (LEASE + 0.5 s).
func (d *StripeDialect) margin(lease time.Duration) time.Duration { return lease + time.Second }

// wire points every process at the stand-in through the Stripe connector.
func (d *StripeDialect) wire(common map[string]string) {
	if d == nil {
		return
	}
	lease, _ := time.ParseDuration(common["LEASE"])
	common["PSP_URL"] = d.url
	common["PSP_DEFAULT_API_KEY"] = "sk_test_chaos"
	common["PSP_DEFAULT_KEY_WINDOW"] = (d.KeyWindow - d.margin(lease)).String()
	common["PSP_DEFAULT_SEARCH_LAG"] = (d.SearchLag + d.margin(lease)).String()
}

// startStripe starts the stand-in, in this process, with the run's faults.
func (s *stack) startStripe(ctx context.Context) error {
	d := s.cfg.Stripe
	if d.KeyWindow == 0 {
		d.KeyWindow = 10 * time.Second
	}
	if d.SearchLag == 0 {
		d.SearchLag = time.Second
	}
	if d.KeyWindow <= 2*d.margin(s.cfg.Lease) {
		return fmt.Errorf("stripe key window %s: must be above twice LEASE + 1s", d.KeyWindow)
	}
	addr, err := procs.FreeAddr()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: stripestandin.New(stripestandin.Config{
		KeyWindow: d.KeyWindow, SearchLag: d.SearchLag, Seed: s.cfg.Seed,
		Faults: mockpsp.Faults{ErrorRate: s.cfg.ErrorRate, DropRate: s.cfg.DropRate, RejectRate: s.cfg.RejectRate,
			LookupErrorRate: s.cfg.LookupErrorRate, LatencyMS: s.cfg.LatencyMS},
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Printf("stripe stand-in: %v\n", err)
		}
	}()
	s.onClose(func() { _ = srv.Close() })
	s.pspURL, d.url = "http://"+addr, "stripe+http://"+addr
	return procs.WaitUp(ctx, s.pspURL+"/_admin/authorizations")
}

// StripeStats is what a run in Stripe's dialect did: the keys Stripe's
// semantics made phasepay renew, and the answers that tested them.
type StripeStats struct {
	// KeyWindow and SearchLag are the stand-in's; ConnectorWindow and
	// ConnectorLag what the processes were told.
	KeyWindow       string `json:"key_window"`
	SearchLag       string `json:"search_lag"`
	ConnectorWindow string `json:"connector_key_window"`
	ConnectorLag    string `json:"connector_search_lag"`
	// Renewed counts attempts ended because their key was spent (a saved
	// 5xx replayed, or past the window): each followed by a new key.
	Renewed int `json:"keys_renewed"`
	// RenewedAuthorized counts the charges authorized under a renewed key.
	RenewedAuthorized int `json:"authorized_under_renewed_key"`
	// Replayed5xx counts the saved 5xx answers the stand-in replayed.
	Replayed5xx int `json:"saved_5xx_replayed"`
	// Searches counts the PaymentIntent searches (lookups by the charge).
	Searches int `json:"searches"`
}

// stripeStats fills the summary's Stripe counts, for a run in Stripe's
// dialect.
func (s *stack) stripeStats(ctx context.Context, sum *Summary) error {
	d := s.cfg.Stripe
	if d == nil {
		return nil
	}
	common := map[string]string{"LEASE": s.cfg.Lease.String()}
	d.wire(common)
	st := &StripeStats{KeyWindow: d.KeyWindow.String(), SearchLag: d.SearchLag.String(),
		ConnectorWindow: common["PSP_DEFAULT_KEY_WINDOW"], ConnectorLag: common["PSP_DEFAULT_SEARCH_LAG"]}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE outcome = 'replaced'),
		count(*) FILTER (WHERE outcome = 'authorized' AND n > 1) FROM charge_attempts`).Scan(&st.Renewed, &st.RenewedAuthorized); err != nil {
		return fmt.Errorf("stripe stats: %w", err)
	}
	var log struct{ Data []pspRequest }
	if err := getJSON(ctx, s.pspURL+"/_admin/requests", &log); err != nil {
		return fmt.Errorf("stripe stats: %w", err)
	}
	for _, r := range log.Data {
		if r.Path == "/v1/payment_intents/search" {
			st.Searches++
		}
	}
	var f struct {
		Replayed int `json:"replayed_5xx"`
	}
	if err := getJSON(ctx, s.pspURL+"/_admin/stripe", &f); err != nil {
		return fmt.Errorf("stripe stats: %w", err)
	}
	st.Replayed5xx = f.Replayed
	sum.Stripe = st
	return nil
}
