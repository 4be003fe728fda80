package charges

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
)

// A charge's authorization attempts, one per PSP it is sent to: the rule
// that routing between PSPs can never charge twice rests on them.
//
//   - Each attempt is committed BEFORE its call, naming its PSP and its key
//     (createCharge for the first; the refusal of the previous PSP for the
//     next, in one transaction). So after any crash the attempts list every
//     PSP that may hold an authorization for the charge.
//   - A run that did not itself commit the current attempt (a retry, a
//     takeover, the reaper) looks the charge up by reference at every PSP
//     attempted before, then at the current one (psp's lookup before any
//     resend), before it sends anything. An authorization found anywhere is
//     the answer.
//   - The charge moves to its next PSP only on a refusal (400, 404, 422:
//     the PSP did nothing and never will). An unknown outcome (a timeout, a
//     lost answer, a lookup that found nothing YET: the request may still be
//     in flight there) keeps it where it is, resent under the same key after
//     a lookup, until known or needs_attention. A decline is final.
//
// What a refusal proves rests on the PSP's idempotency: a 400, 404 or 422
// under a key says that nothing was done, and will be, under that key. A
// PSP still working on an earlier request under the same key answers 409
// (busy: the charge stays and is sent again later), never 400; and a
// refusal is deterministic: an earlier request under the key that reaches
// the PSP only after the refusal (sent by a worker that stalled, then lost
// its lease) is refused too. The mock keeps both promises (psp,
// TestRefusedKeyIsRefusedWhenItsLateRequestArrives); the chaos run once
// caught a refusal recorded as final while a stalled duplicate then
// authorized at a mock that rolled its refusals per request.

// Routes is the PSPs as a charge's authorization sees them
// (*routing.Router); a plain Authorizer is one PSP, named "default".
type Routes interface {
	// Single reports the single-PSP mode, where the authorization's key
	// stays <charge>:authorize.
	Single() bool
	// Choose names the PSP a new charge in currency starts at.
	Choose(currency string) string
	// Next names the PSP a refused charge moves to, none of tried; false
	// when there is none left.
	Next(currency string, tried []string) (string, bool)
	// LookupAt looks reference up at the PSP name.
	LookupAt(ctx context.Context, name, reference string) ([]psp.Authorization, error)
	// CountFailover counts a charge moved from one PSP to another.
	CountFailover(from, to string)
}

// DefaultPSP names the PSP of a single-PSP configuration (PSP_URL).
const DefaultPSP = "default"

// singleRoute is a plain Authorizer as Routes: one PSP, no failover.
type singleRoute struct{ a Authorizer }

func (singleRoute) Single() bool                         { return true }
func (singleRoute) Choose(string) string                 { return DefaultPSP }
func (singleRoute) Next(string, []string) (string, bool) { return "", false }
func (singleRoute) CountFailover(string, string)         {}
func (s singleRoute) LookupAt(ctx context.Context, _, ref string) ([]psp.Authorization, error) {
	return s.a.Lookup(ctx, ref)
}

// attempt is one authorization attempt of a charge (charge_attempts).
type attempt struct {
	N   int
	PSP string
	Key string
	// Outcome is authorized, declined or refused once answered.
	Outcome *string
}

// The outcomes an attempt records.
const (
	attemptAuthorized = "authorized"
	attemptDeclined   = "declined"
	attemptRefused    = "refused"
)

// attemptKey is the PSP key of attempt n: PSPKey (<charge>:authorize) in
// single-PSP mode, <charge>:authorize:<n> with several PSPs, so that each
// PSP sees a key of its own and a resend reuses it.
func attemptKey(chargeID string, n int, single bool) string {
	if single {
		return PSPKey(chargeID)
	}
	return fmt.Sprintf("%s:authorize:%d", chargeID, n)
}

// insertAttemptSQL records an attempt before its call, in the fenced
// transaction of the arrow before it. The UNIQUE (tenant_id, charge_id,
// psp) constraint is the database's word that a charge is never sent to
// one PSP under two attempts.
const insertAttemptSQL = `INSERT INTO charge_attempts (tenant_id, charge_id, n, psp, psp_key) VALUES ($1, $2, $3, $4, $5)`

func insertAttempt(tx *phases.Tx, c *Charge, a attempt) {
	tx.Queue(insertAttemptSQL, c.TenantID, c.ID, a.N, a.PSP, a.Key)
	c.attempts = append(c.attempts, a)
}

// endAttemptSQL writes an attempt's answer, with the charge's update.
const endAttemptSQL = `UPDATE charge_attempts SET outcome = $4, ended_at = phasepay_now()
 WHERE tenant_id = $1 AND charge_id = $2 AND n = $3`

func endAttempt(tx *phases.Tx, c *Charge, a *attempt, outcome string) {
	tx.Queue(endAttemptSQL, c.TenantID, c.ID, a.N, outcome)
	a.Outcome = &outcome
}

// attemptsSQL lists a charge's attempts in order (its primary key).
const attemptsSQL = `SELECT n, psp, psp_key, outcome FROM charge_attempts
 WHERE tenant_id = $1 AND charge_id = $2 ORDER BY n`

// loadAttempts reads c's attempts. A charge created before attempts were
// recorded has none: its one attempt is at its PSP under PSPKey.
func loadAttempts(ctx context.Context, q idempotency.DBTX, c *Charge) error {
	rows, err := q.Query(ctx, attemptsSQL, c.TenantID, c.ID)
	if err != nil {
		return fmt.Errorf("attempts of %s: %w", c.ID, err)
	}
	c.attempts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (attempt, error) {
		var a attempt
		return a, row.Scan(&a.N, &a.PSP, &a.Key, &a.Outcome)
	})
	if err != nil {
		return fmt.Errorf("attempts of %s: %w", c.ID, err)
	}
	if len(c.attempts) == 0 {
		c.attempts = []attempt{{N: 1, PSP: c.PSP, Key: PSPKey(c.ID)}}
	}
	return nil
}

// tried names every PSP c was sent to (or is about to be).
func (c *Charge) tried() []string {
	out := make([]string, len(c.attempts))
	for i, a := range c.attempts {
		out[i] = a.PSP
	}
	return out
}

// current is the attempt under way: the last.
func (c *Charge) current() *attempt { return &c.attempts[len(c.attempts)-1] }

// lookUpEarlier looks c up at every PSP attempted before the current one,
// for a run that did not itself commit the current attempt: an
// authorization held there is the charge's answer. Those attempts ended in
// a refusal, so none should hold one; this is the rule "after a crash, ask
// every PSP that may hold an authorization before sending anything", kept
// even where the records say it cannot matter. A lookup that fails leaves
// the outcome unknown (the run is released and retried).
func lookUpEarlier(ctx context.Context, routes Routes, c *Charge) (psp.Outcome, bool, error) {
	var out psp.Outcome
	for _, a := range c.attempts[:len(c.attempts)-1] {
		list, err := routes.LookupAt(ctx, a.PSP, c.ID)
		out.Lookups++
		if err != nil {
			out.Class, out.Reason = psp.ClassUnknown, err.Error()
			return out, false, fmt.Errorf("look up %s at %s (attempt %d): %w", c.ID, a.PSP, a.N, err)
		}
		for _, auth := range list {
			if auth.Status == psp.StatusAuthorized {
				return psp.Outcome{Class: psp.ClassSuccess, Authorization: auth, StatusCode: 200,
					FoundByLookup: true, Lookups: out.Lookups, PSP: a.PSP, Call: psp.CallAuthorize, Key: a.Key}, true, nil
			}
		}
	}
	return out, false, nil
}
