package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// LifeStats is what the payment lives did, and the PSP's books.
type LifeStats struct {
	// Lives is how many authorized intents went on living.
	Lives    int `json:"lives"`
	Races    int `json:"capture_void_races"`
	Captures int `json:"captured"` // 200 to a capture
	Partial  int `json:"captured_partially"`
	Voids    int `json:"voided"` // 200 to a void
	Refunds  int `json:"refunds_succeeded"`
	// RefundsFailed and SettleFailed: refused by the PSP (402).
	RefundsFailed int `json:"refunds_failed"`
	SettleFailed  int `json:"captures_voids_failed"`
	// Refused: answered 400 (a race lost, an amount past what is left).
	Refused        int   `json:"refused"`
	NeedsAttention int   `json:"needs_attention"`
	Attempts       int64 `json:"attempts"`
	Replays        int   `json:"replays_checked"`
	// The PSP's books: captures, voids and refunds it made.
	PSPCaptures int `json:"psp_captures"`
	PSPVoids    int `json:"psp_voids"`
	PSPRefunds  int `json:"psp_refunds"`
}

// pspOp is one entry of the mock's books (GET /_admin/captures, voids,
// refunds, authorizations).
type pspOp struct {
	ID            string `json:"id"`
	Reference     string `json:"reference"`
	Amount        int64  `json:"amount"`
	Status        string `json:"status"`
	Authorization string `json:"authorization"`
}

// dbRefund is a refund as the database holds it.
type dbRefund struct {
	charge, status string
	amount         int64
}

// dbCharge is a charge's money as the database holds it.
type dbCharge struct {
	status                      string
	pspRef                      string
	captured, refunded, pending int64
}

// booksSQL reads every charge's money; refundsSQL every refund.
const (
	booksSQL   = `SELECT id, status, coalesce(psp_reference, ''), amount_captured, amount_refunded, amount_refunding FROM charges`
	refundsSQL = `SELECT id, charge_id, amount, status FROM refunds`
	// unresolvedSQL lists the requests still without an end (given up to
	// an operator): what they had done at the PSP is not in phasepay's
	// books until an operator resolves them.
	unresolvedSQL = `SELECT request_path, request_body FROM idempotency_keys WHERE state <> 'done'`
)

// checkBooks holds every charge's money in phasepay against the mock PSP's
// books: at most one capture per charge and never both a capture and a
// void; the PSP's captured total equals amount_captured and its refunded
// total amount_refunded; never a refund beyond the capture; every
// succeeded refund refunded once at the PSP, every failed one not at all.
// A charge with a capture, void or refund given up to an operator
// (needs_attention) may have more done at the PSP than phasepay recorded,
// by what that request asked at most: its totals are checked as bounds.
func checkBooks(ctx context.Context, pool *pgxpool.Pool, pspURL string, st *LifeStats, violate func(string, ...any)) error {
	books := map[string][]pspOp{}
	for _, kind := range []string{"authorizations", "captures", "voids", "refunds"} {
		var l struct{ Data []pspOp }
		if err := getJSON(ctx, pspURL+"/_admin/"+kind, &l); err != nil {
			return fmt.Errorf("books: %w", err)
		}
		books[kind] = l.Data
	}
	st.PSPCaptures, st.PSPVoids, st.PSPRefunds = len(books["captures"]), len(books["voids"]), len(books["refunds"])

	charges := map[string]*dbCharge{}
	rows, err := pool.Query(ctx, booksSQL)
	if err != nil {
		return fmt.Errorf("books: %w", err)
	}
	for rows.Next() {
		var (
			id string
			c  dbCharge
		)
		if err := rows.Scan(&id, &c.status, &c.pspRef, &c.captured, &c.refunded, &c.pending); err != nil {
			rows.Close()
			return fmt.Errorf("books: %w", err)
		}
		charges[id] = &c
	}
	rows.Close()
	refunds := map[string]dbRefund{}
	rows, err = pool.Query(ctx, refundsSQL)
	if err != nil {
		return fmt.Errorf("books: %w", err)
	}
	for rows.Next() {
		var id, charge, status string
		var amount int64
		if err := rows.Scan(&id, &charge, &amount, &status); err != nil {
			rows.Close()
			return fmt.Errorf("books: %w", err)
		}
		refunds[id] = dbRefund{charge, status, amount}
	}
	rows.Close()
	unresolved, err := unresolvedCharges(ctx, pool)
	if err != nil {
		return err
	}
	compareBooks(books, charges, refunds, unresolved, violate)
	return nil
}

// compareBooks is checkBooks on what it read: the mock's books by kind
// (authorizations, captures, voids, refunds), phasepay's charges and
// refunds by id, and the charges' operations without an end.
func compareBooks(books map[string][]pspOp, charges map[string]*dbCharge, refunds map[string]dbRefund,
	unresolved map[string]openOps, violate func(string, ...any)) {
	chargeOfAuth := map[string]string{}
	for _, a := range books["authorizations"] {
		chargeOfAuth[a.ID] = a.Reference
	}
	type totals struct{ captures, voids, captured, refunded int64 }
	psp := map[string]*totals{}
	at := func(charge string) *totals {
		if psp[charge] == nil {
			psp[charge] = &totals{}
		}
		return psp[charge]
	}
	for _, c := range books["captures"] {
		if c.Reference != chargeOfAuth[c.Authorization] || charges[c.Reference] == nil {
			violate("books: PSP capture %s of %s references charge %q", c.ID, c.Authorization, c.Reference)
		}
		t := at(c.Reference)
		t.captures++
		t.captured += c.Amount
	}
	for _, v := range books["voids"] {
		if v.Reference != chargeOfAuth[v.Authorization] || charges[v.Reference] == nil {
			violate("books: PSP void %s of %s references charge %q", v.ID, v.Authorization, v.Reference)
		}
		at(v.Reference).voids++
	}
	pspRefunds := map[string]int{} // refund id → PSP refunds made for it
	for _, r := range books["refunds"] {
		charge := chargeOfAuth[r.Authorization]
		if ours, ok := refunds[r.Reference]; !ok || ours.charge != charge {
			violate("books: PSP refund %s (reference %q) of authorization %s: no such refund of charge %q in phasepay", r.ID, r.Reference, r.Authorization, charge)
		} else if ours.amount != r.Amount {
			violate("books: PSP refund %s of %s is %d, phasepay's refund is %d", r.ID, r.Reference, r.Amount, ours.amount)
		}
		pspRefunds[r.Reference]++
		at(charge).refunded += r.Amount
	}
	for id, r := range refunds {
		n := pspRefunds[id]
		switch {
		case n > 1:
			violate("books: refund %s refunded %d times at the PSP", id, n)
		case r.status == "succeeded" && n != 1:
			violate("books: refund %s succeeded in phasepay, not refunded at the PSP", id)
		case r.status == "failed" && n != 0:
			violate("books: refund %s failed in phasepay, but refunded at the PSP", id)
		}
	}
	for id, c := range charges {
		t := at(id)
		open := unresolved[id]
		switch {
		case t.captures > 1:
			violate("books: charge %s captured %d times at the PSP", id, t.captures)
		case t.captures > 0 && t.voids > 0:
			violate("books: charge %s both captured and voided at the PSP", id)
		case t.voids > 1:
			violate("books: charge %s voided %d times at the PSP", id, t.voids)
		}
		if t.refunded > t.captured {
			violate("books: charge %s refunded %d at the PSP, beyond its capture of %d", id, t.refunded, t.captured)
		}
		if c.refunded > c.captured {
			violate("books: charge %s refunded %d in phasepay, beyond its capture of %d", id, c.refunded, c.captured)
		}
		settling := open.capture || open.void
		switch {
		case t.captured != c.captured && !(settling && c.captured == 0):
			violate("books: charge %s: PSP captured %d, phasepay amount_captured %d", id, t.captured, c.captured)
		case (c.status == "voided") != (t.voids > 0) && !(settling && c.status == "authorized"):
			violate("books: charge %s is %s in phasepay, %d voids at the PSP", id, c.status, t.voids)
		case c.status == "captured" && t.captures != 1:
			violate("books: charge %s is captured in phasepay, %d captures at the PSP", id, t.captures)
		}
		// Pending refunds reserve amount_refunding: only an unresolved
		// one may have been made at the PSP without phasepay knowing.
		if t.refunded != c.refunded && !(open.refund && t.refunded > c.refunded && t.refunded <= c.refunded+c.pending) {
			violate("books: charge %s: PSP refunded %d, phasepay amount_refunded %d (%d pending)", id, t.refunded, c.refunded, c.pending)
		}
	}
	for id := range psp {
		if charges[id] == nil {
			violate("books: the PSP operated on %q, which is no charge of phasepay's", id)
		}
	}
}

// openOps says which operations of a charge have no end yet.
type openOps struct{ capture, void, refund bool }

// unresolvedCharges maps each charge to its operations still without an
// end, from the requests' paths and bodies.
func unresolvedCharges(ctx context.Context, pool *pgxpool.Pool) (map[string]openOps, error) {
	rows, err := pool.Query(ctx, unresolvedSQL)
	if err != nil {
		return nil, fmt.Errorf("books: %w", err)
	}
	defer rows.Close()
	out := map[string]openOps{}
	for rows.Next() {
		var (
			path string
			body []byte
		)
		if err := rows.Scan(&path, &body); err != nil {
			return nil, fmt.Errorf("books: %w", err)
		}
		switch {
		case path == "/v1/refunds":
			var r struct{ Charge string }
			_ = json.Unmarshal(body, &r)
			o := out[r.Charge]
			o.refund = true
			out[r.Charge] = o
		case strings.HasPrefix(path, "/v1/charges/"):
			id, op, _ := strings.Cut(strings.TrimPrefix(path, "/v1/charges/"), "/")
			o := out[id]
			o.capture = o.capture || op == "capture"
			o.void = o.void || op == "void"
			out[id] = o
		}
	}
	return out, rows.Err()
}
