package mockpsp

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/phasepay/phasepay/internal/psp"
)

// This file is the mock's books and the rules it keeps them by, all under
// Mock.mu: the request log, the fault rolls, the keys it remembers (until
// KeyTTL) and the ledger of every operation, and the authorizations and
// lookups decided against them. The HTTP side is http.go; captures,
// voids and refunds are operations.go.

// opKey is a key (an idempotency key or a reference) within one kind.
type opKey struct {
	kind opKind
	key  string
}

// record is one operation with the request that created it, which a
// replay must match.
type record struct {
	kind opKind
	key  string
	at   time.Time // when the key was first used; it is forgotten keyTTL later
	// body is the request's parsed body (authorizeBody or operationBody),
	// comparable: a replay must be equal to it, whatever its formatting.
	body      any
	reference string
	amount    int64
	currency  string
	auth      psp.Authorization // the result of an authorization
	op        psp.Operation     // the result of a capture, void or refund
}

// authState is what the PSP's invariants are checked against: per
// authorization, what has been captured, voided and refunded.
type authState struct {
	rec      *record
	captured int64 // amount captured; 0 if not
	voided   bool
	refunded int64 // sum of refunds
}

// exchange is one request to the PSP API being served: its entry in the
// request log, and the faults in force when it arrived.
type exchange struct {
	m      *Mock
	i      int // index in m.requests
	faults Faults
}

// receive logs a request and counts it for its key before anything can
// fail, so that even a malformed or faulted request shows in the request
// log and in Attempts.
func (m *Mock) receive(r *http.Request, key, reference string) *exchange {
	m.mu.Lock()
	defer m.mu.Unlock()
	if key != "" {
		m.attempts[key]++
	}
	m.requests = append(m.requests, RequestEntry{
		Method: r.Method, Path: r.URL.Path, IdempotencyKey: key, Reference: reference, At: m.now(),
	})
	return &exchange{m: m, i: len(m.requests) - 1, faults: m.faults}
}

// setReference records the reference once the body is read.
func (ex *exchange) setReference(ref string) {
	ex.m.mu.Lock()
	defer ex.m.mu.Unlock()
	ex.m.requests[ex.i].Reference = ref
}

// answered records the status sent, 0 for none.
func (ex *exchange) answered(status int) {
	ex.m.mu.Lock()
	defer ex.m.mu.Unlock()
	ex.m.requests[ex.i].Status = status
}

// roll draws one fault; mu must be held. A zero rate draws nothing, so
// seeded tests stay reproducible when only one fault is on.
func (m *Mock) roll(rate float64) bool {
	return rate > 0 && m.rand.Float64() < rate
}

// reject answers the reject_rate refusal of a request that would act. A
// refusal is deterministic, as a real PSP's is (the same request is
// refused again): a key once refused is refused on every later request,
// however late it arrives, and never acts. Without that, a request under
// the key still on its way from a stalled worker (sent before the refusal,
// arriving after it) could act at the PSP after phasepay recorded the
// refusal as final, which no real PSP's refusal allows and phasepay's
// outcome classes assume (charges, failover.go). mu must be held.
func (m *Mock) reject(kind opKind, key string, f Faults) (outcome, bool) {
	k := opKey{kind, key}
	if !m.refused[k] && !m.roll(f.RejectRate) {
		return outcome{}, false
	}
	if !m.refused[k] {
		m.injected.Rejects++
		m.refused[k] = true
	}
	return outcome{status: http.StatusBadRequest, code: "rejected", msg: "injected fault (reject_rate)"}, true
}

// remembered returns the record of a key the mock still remembers,
// forgetting it if its TTL has passed; mu must be held.
func (m *Mock) remembered(kind opKind, key string) (*record, bool) {
	k := opKey{kind, key}
	rec, ok := m.keys[k]
	if ok && !m.now().Before(rec.at.Add(m.keyTTL)) {
		delete(m.keys, k)
		return nil, false
	}
	return rec, ok
}

// store remembers a new operation under its key and in the ledger; mu must
// be held.
func (m *Mock) store(rec *record) {
	m.keys[opKey{rec.kind, rec.key}] = rec
	m.ledger = append(m.ledger, rec)
	ref := opKey{rec.kind, rec.reference}
	m.byRef[ref] = append(m.byRef[ref], rec)
}

// outcome is what an operation's endpoint answers.
type outcome struct {
	status int // http.StatusOK, or the fault's or the refusal's status
	code   string
	msg    string
	result any  // the answer of a 200
	drop   bool // close the connection instead of answering
}

var errKeyReused = errors.New("idempotency key already used with another request")

// authorize applies the faults and the idempotency rules to one valid
// request.
func (m *Mock) authorize(key string, req authorizeBody, f Faults) outcome {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.roll(f.ErrorRate) {
		m.injected.Errors++
		return outcome{status: http.StatusServiceUnavailable, code: "unavailable", msg: "injected fault (error_rate)"}
	}
	rec, ok := m.remembered(opAuthorization, key)
	switch {
	case ok && rec.body != any(req):
		return outcome{status: http.StatusUnprocessableEntity, code: "idempotency_key_mismatch", msg: errKeyReused.Error()}
	case !ok:
		if refusal, ok := m.reject(opAuthorization, key, f); ok {
			return refusal
		}
		rec = &record{
			kind: opAuthorization, key: key, at: m.now(), body: req,
			reference: req.Reference, amount: req.Amount, currency: req.Currency, auth: m.decide(req),
		}
		m.store(rec)
		m.byAuth[rec.auth.ID] = &authState{rec: rec}
	}
	return m.answer(rec.auth, f)
}

// answer is the 200 of an operation made or replayed, unless drop_rate
// drops it; mu must be held.
func (m *Mock) answer(result any, f Faults) outcome {
	drop := m.roll(f.DropRate)
	if drop {
		m.injected.Drops++
	}
	return outcome{status: http.StatusOK, result: result, drop: drop}
}

// lookup answers GET ?reference= for kind: every operation made for the
// reference, whether its key is remembered or not.
func (m *Mock) lookup(kind opKind, reference string, f Faults) (outcome, []any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.roll(f.ErrorRate) {
		m.injected.Errors++
		return outcome{status: http.StatusServiceUnavailable, code: "unavailable", msg: "injected fault (error_rate)"}, nil
	}
	if m.roll(f.LookupErrorRate) {
		m.injected.LookupErrors++
		return outcome{status: http.StatusServiceUnavailable, code: "unavailable", msg: "injected fault (lookup_error_rate)"}, nil
	}
	recs := m.byRef[opKey{kind, reference}]
	out := make([]any, 0, len(recs))
	for _, rec := range recs {
		if kind == opAuthorization {
			out = append(out, authorizationEntry{Authorization: rec.auth, Amount: rec.amount, Currency: rec.currency, CreatedAt: rec.at})
		} else {
			out = append(out, operationEntry{Operation: rec.op, CreatedAt: rec.at})
		}
	}
	return outcome{status: http.StatusOK}, out
}

// authorizationEntry is one authorization as a lookup by reference shows it.
type authorizationEntry struct {
	psp.Authorization
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
}

// operationEntry is one capture, void or refund as a lookup shows it.
type operationEntry struct {
	psp.Operation
	CreatedAt time.Time `json:"created_at"`
}

// decide makes a new authorization; mu must be held for m.rand.
func (m *Mock) decide(req authorizeBody) psp.Authorization {
	auth := psp.Authorization{ID: fmt.Sprintf("auth_%016x", m.rand.Uint64()), Status: psp.StatusAuthorized, Reference: req.Reference}
	if req.PaymentMethod == PaymentMethodDeclined {
		code := psp.DeclineCodeCardDeclined
		auth.Status, auth.DeclineCode = psp.StatusDeclined, &code
	}
	return auth
}
