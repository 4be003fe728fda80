package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
)

// Routing between PSPs moves an authorization from one PSP to the next
// without it ever being authorized at two. It rests on the charge's
// attempts (attempts.go), one per PSP it is sent to:
//
//   - Each attempt commits BEFORE its call, naming its PSP and its key.
//     createCharge records the first. The refusal of one PSP and the next
//     attempt commit together. So after any crash the attempts list every
//     PSP that may hold an authorization for the charge.
//   - A run that did not commit the current attempt itself looks the
//     charge up at every PSP attempted before, then at the current one,
//     before it sends anything. An authorization found anywhere is the
//     answer.
//   - The charge moves on only on a refusal (400, 404, 422), where the PSP
//     did nothing and never will. An unknown outcome keeps it where it is,
//     since the request may still be in flight there. A decline is final.
//
// What a refusal proves rests on the PSP's idempotency. A 400, 404 or 422
// under a key says nothing was done, or will be, under that key. A PSP
// still working on an earlier request under the key answers 409 (busy),
// never 400. And a refusal is deterministic: an earlier request under the
// key that arrives after it is refused too. The mock keeps both promises
// (psp, TestRefusedKeyIsRefusedWhenItsLateRequestArrives). The chaos run
// once caught a mock that rolled its refusals per request.

// Routes is the PSPs as a charge's authorization sees them
// (*routing.Router). A plain Authorizer is one PSP, named "default".
type Routes interface {
	// Single reports the single-PSP mode, where the authorization's key
	// stays <charge>:authorize.
	Single() bool
	// Choose names the PSP a new charge in currency starts at. A pinned
	// charge starts at its route's first, whatever a breaker says.
	Choose(currency string, pinned bool) string
	// Next names the PSP a refused charge moves to, none of tried, or false
	// when none is left. A pinned charge moves in its route's order,
	// whatever a breaker says.
	Next(currency string, tried []string, pinned bool) (string, bool)
	// LookupAt looks reference up at the PSP name.
	LookupAt(ctx context.Context, name, reference string) ([]psp.Authorization, error)
	// CountFailover counts a charge moved from one PSP to another.
	CountFailover(from, to string)
	// HoldBack reports whether a pinned charge's first send to the PSP
	// name is to be held back, its breaker open, and for how long.
	HoldBack(name string) (time.Duration, bool)
}

// DefaultPSP names the PSP of a single-PSP configuration (PSP_URL).
const DefaultPSP = "default"

// singleRoute is a plain Authorizer as Routes: one PSP, no failover.
type singleRoute struct{ a Authorizer }

func (singleRoute) Single() bool                               { return true }
func (singleRoute) Choose(string, bool) string                 { return DefaultPSP }
func (singleRoute) Next(string, []string, bool) (string, bool) { return "", false }
func (singleRoute) CountFailover(string, string)               {}
func (singleRoute) HoldBack(string) (time.Duration, bool)      { return 0, false }
func (s singleRoute) LookupAt(ctx context.Context, _, ref string) ([]psp.Authorization, error) {
	return s.a.Lookup(ctx, ref)
}

// pinned reports whether the PSPs of run's charge must follow from its
// request alone, in its route's order whatever a breaker says.
//
// So it is for a charge whose id is derived (ids.go). A retry of a claim
// lost in a failover derives the id again, and that claim may have reached
// a PSP under it. Only the same PSP under the same key answers the retry
// with its first answer. A PSP chosen by this process's breakers would be
// a second PSP (pitfall F3 "A second PSP after a lost claim"). A random id
// repeats nothing, so its charge is steered by the breakers.
func pinned(ids *objectIDs, run *phases.Run[*Charge], id string) bool {
	rec := run.Lease.Record
	return ids.derived(rec.TenantID, rec.Key, run.Request(), id)
}

// lookUpEarlier looks c up at every PSP attempted before the current one,
// for a run that did not commit the current attempt itself. An
// authorization held there is the charge's answer.
//
// Those attempts ended in a refusal, so none should hold one. The rule
// "after a crash, ask every PSP that may hold an authorization" is kept
// even where the records say it cannot matter. A lookup that fails leaves
// the outcome unknown, and the run is released.
func lookUpEarlier(ctx context.Context, routes Routes, c *Charge) (psp.Outcome, bool, error) {
	var out psp.Outcome
	cur := c.current()
	for _, a := range c.attempts[:len(c.attempts)-1] {
		if a.PSP == cur.PSP {
			// A key renewed at the current PSP. Its connector looks the
			// charge up there itself, by the charge, whatever the key.
			continue
		}
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

// failedOver moves a refused charge to the next PSP on its route, if one is
// left. It reports false, writing nothing, when none is: the refusal is
// then the charge's answer.
//
// The refusal ends the attempt, and the next attempt is recorded in the
// same transaction, before anything is sent. The run then goes round the
// call again from charge_created (the caller returns phases.Again).
func failedOver(tx *phases.Tx, run *phases.Run[*Charge], routes Routes, ids *objectIDs) bool {
	c := run.Object
	next, ok := routes.Next(c.Currency, c.tried(), pinned(ids, run, c.ID))
	if !ok {
		return false
	}
	from := c.current()
	endAttempt(tx, c, from, attemptRefused)
	a := attempt{N: from.N + 1, PSP: next, Key: attemptKey(c.ID, from.N+1, false)}
	fromPSP := from.PSP
	insertAttempt(tx, c, a)
	c.PSP = next
	updateChargePSP(tx, c)
	routes.CountFailover(fromPSP, next)
	// The request's timeline says where it went ("moved to secondary"),
	// with the transaction that records the move.
	run.Lease.Note(idempotency.Entry{Kind: idempotency.KindMoved, PSP: next})
	return true
}

// renewKey records a new attempt at the same PSP under the next derived
// key, for a charge whose PSP reported its key spent (phases.CallOutcome's
// Renew). The old attempt ends as replaced.
//
// A key is spent when the PSP saved a 5xx under it, or it is past the key
// window, and a lookup found nothing yet. Nothing is sent here. The PSP's
// connector sends under the new key only once its lookup proves the old
// one did nothing (internal/psp/stripepsp).
func renewKey(tx *phases.Tx, c *Charge) {
	from := c.current()
	endAttempt(tx, c, from, attemptReplaced)
	insertAttempt(tx, c, attempt{N: from.N + 1, PSP: from.PSP, Key: attemptKey(c.ID, from.N+1, false)})
}

// keyCreatedAt is when a's key was recorded. For the first attempt of a
// charge made in this run, that is the charge's creation.
func keyCreatedAt(c *Charge, a *attempt) time.Time {
	if a.CreatedAt.IsZero() {
		return c.CreatedAt
	}
	return a.CreatedAt
}
