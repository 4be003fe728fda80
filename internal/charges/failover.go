package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
)

// Routing between PSPs: how an authorization moves from one PSP to the next
// without ever being authorized at two.
//
// It rests on a charge's attempts (attempts.go), one per PSP it is sent to:
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
	// Choose names the PSP a new charge in currency starts at; a pinned
	// charge (see pinned) at its route's first, whatever a breaker says.
	Choose(currency string, pinned bool) string
	// Next names the PSP a refused charge moves to, none of tried; false
	// when there is none left. A pinned charge moves in its route's order,
	// whatever a breaker says.
	Next(currency string, tried []string, pinned bool) (string, bool)
	// LookupAt looks reference up at the PSP name.
	LookupAt(ctx context.Context, name, reference string) ([]psp.Authorization, error)
	// CountFailover counts a charge moved from one PSP to another.
	CountFailover(from, to string)
}

// DefaultPSP names the PSP of a single-PSP configuration (PSP_URL).
const DefaultPSP = "default"

// singleRoute is a plain Authorizer as Routes: one PSP, no failover.
type singleRoute struct{ a Authorizer }

func (singleRoute) Single() bool                               { return true }
func (singleRoute) Choose(string, bool) string                 { return DefaultPSP }
func (singleRoute) Next(string, []string, bool) (string, bool) { return "", false }
func (singleRoute) CountFailover(string, string)               {}
func (s singleRoute) LookupAt(ctx context.Context, _, ref string) ([]psp.Authorization, error) {
	return s.a.Lookup(ctx, ref)
}

// pinned reports whether the PSPs of run's charge must be a function of its
// request alone: its route's first, then the route's order after each
// refusal, whatever a breaker says. So it is for a charge whose id is
// derived (ids.go), which a retry of a claim lost in a failover derives
// again: that claim may have reached a PSP, under this very id and the
// attempt's key, and only the same PSP under the same key answers the
// retry with its first answer. A PSP chosen by this process's breakers
// would be a second PSP, whose authorization no lookup of ours precedes
// (pitfall 85 "A second PSP after a lost claim"). A random id
// (ids.derive's last resort) repeats nothing: its charge is steered by the
// breakers.
func pinned(ids *objectIDs, run *phases.Run[*Charge], id string) bool {
	rec := run.Lease.Record
	return ids.derived(rec.TenantID, rec.Key, run.Request(), id)
}

// lookUpEarlier looks c up at every PSP attempted before the current one,
// for a run that did not itself commit the current attempt: an
// authorization held there is the charge's answer. Those attempts ended in
// a refusal, so none should hold one; this is the rule "after a crash, ask
// every PSP that may hold an authorization before sending anything", kept
// even where the records say it cannot matter. A lookup that fails leaves
// the outcome unknown (the run is released and retried).
func lookUpEarlier(ctx context.Context, routes Routes, c *Charge) (psp.Outcome, bool, error) {
	var out psp.Outcome
	cur := c.current()
	for _, a := range c.attempts[:len(c.attempts)-1] {
		if a.PSP == cur.PSP {
			// A key renewed at the current PSP: its connector looks the
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
// left: the refusal ends its attempt, and a new attempt there is recorded
// before anything is sent, with the charge's psp, in the transaction that
// records the refusal; the run then goes round the PSP call again from
// charge_created (the caller answers phases.Again). False, with nothing
// written, when no PSP is left: the refusal is the charge's answer.
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
	// written with the transaction that records the move.
	run.Lease.Note(idempotency.Entry{Kind: idempotency.KindMoved, PSP: next})
	return true
}

// renewKey records, for a charge whose current key its PSP reported spent
// (psp.Outcome.NewKey: a saved 5xx replayed, or past the key window, and
// nothing found yet), a new attempt at the same PSP under the next derived
// key, in the transaction of the arrow that got the outcome; the old
// attempt ends as replaced. Nothing is sent yet: the PSP's connector sends
// under the new key only once its lookup proves the old one did nothing
// (internal/psp/stripepsp). The charge stays at charge_created, and its
// PSP is unchanged.
func renewKey(tx *phases.Tx, c *Charge) {
	from := c.current()
	endAttempt(tx, c, from, attemptReplaced)
	insertAttempt(tx, c, attempt{N: from.N + 1, PSP: from.PSP, Key: attemptKey(c.ID, from.N+1, false)})
}

// keyCreatedAt is when a's key was recorded: the charge's creation for the
// first attempt of a charge made in this run (recorded in its transaction).
func keyCreatedAt(c *Charge, a *attempt) time.Time {
	if a.CreatedAt.IsZero() {
		return c.CreatedAt
	}
	return a.CreatedAt
}
