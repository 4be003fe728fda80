package mockpsp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/phasepay/phasepay/internal/psp"
)

// This file is the mock's captures, voids and refunds (POST /v1/captures,
// /v1/voids, /v1/refunds): the same idempotency, fault and lookup rules as
// authorizations, plus the PSP's own invariants, which it answers with 400
// (404 for an authorization it never made), doing nothing.

// OperationEntry is one capture, void or refund the mock made, as GET
// /_admin/captures (voids, refunds) lists it.
type OperationEntry struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	Reference      string `json:"reference"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
	// Attempts counts every request received with the key, ever.
	Attempts int `json:"attempts"`
	// Authorization is the id of the authorization operated on.
	Authorization string `json:"authorization"`
}

// Captures returns every capture made, in creation order.
func (m *Mock) Captures() []OperationEntry { return m.operations(opCapture) }

// Voids returns every void made, in creation order.
func (m *Mock) Voids() []OperationEntry { return m.operations(opVoid) }

// Refunds returns every refund made, in creation order.
func (m *Mock) Refunds() []OperationEntry { return m.operations(opRefund) }

func (m *Mock) operations(kind opKind) []OperationEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]OperationEntry, 0)
	for _, rec := range m.ledger {
		if rec.kind != kind {
			continue
		}
		out = append(out, OperationEntry{
			ID: rec.op.ID, IdempotencyKey: rec.key, Reference: rec.reference,
			Amount: rec.amount, Currency: rec.currency, Status: rec.op.Status,
			Attempts: m.attempts[rec.key], Authorization: rec.op.Authorization,
		})
	}
	return out
}

// operationBody is the body of a capture, void or refund, comparable for
// replays like authorizeBody. Amount is 0 for a void, which takes none.
type operationBody struct {
	Authorization string
	Amount        int64
	Reference     string
}

// parseOperation reads and checks the body of kind; on failure it also
// returns the error code of the 400 answer.
func parseOperation(w http.ResponseWriter, r *http.Request, key string, kind opKind) (operationBody, string, error) {
	if code, err := checkKey(key); err != nil {
		return operationBody{}, code, err
	}
	var raw struct {
		Authorization string `json:"authorization"`
		Amount        *int64 `json:"amount"`
		Reference     string `json:"reference"`
	}
	if err := decodeJSON(w, r, &raw); err != nil {
		return operationBody{}, "invalid_request", err
	}
	body := operationBody{Authorization: raw.Authorization, Reference: raw.Reference}
	refPrefix := "ch_"
	if kind == opRefund {
		refPrefix = "re_"
	}
	switch {
	case kind == opVoid && raw.Amount != nil:
		return operationBody{}, "invalid_request", errors.New("amount: a void takes none")
	case kind != opVoid && raw.Amount == nil:
		return operationBody{}, "invalid_request", errors.New("amount: required")
	case kind != opVoid && *raw.Amount <= 0:
		return operationBody{}, "invalid_request", fmt.Errorf("amount %d: must be a positive integer", *raw.Amount)
	case !strings.HasPrefix(body.Authorization, "auth_") || len(body.Authorization) == len("auth_"):
		return operationBody{}, "invalid_request", fmt.Errorf("authorization %q: must be an authorization id, starting with auth_", body.Authorization)
	case !strings.HasPrefix(body.Reference, refPrefix) || len(body.Reference) == len(refPrefix):
		return operationBody{}, "invalid_request", fmt.Errorf("reference %q: must start with %s", body.Reference, refPrefix)
	}
	if raw.Amount != nil {
		body.Amount = *raw.Amount
	}
	return body, "", nil
}

func (m *Mock) handleOperation(kind opKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		ex := m.receive(r, key, "")
		body, code, err := parseOperation(w, r, key, kind)
		if err != nil {
			ex.finish(w, r, outcome{status: http.StatusBadRequest, code: code, msg: err.Error()}, nil)
			return
		}
		ex.setReference(body.Reference)
		out := m.operate(kind, key, body, ex.faults)
		ex.finish(w, r, out, out.result)
	}
}

func (m *Mock) handleListOperations(kind opKind) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, struct {
			Data []OperationEntry `json:"data"`
		}{Data: m.operations(kind)})
	}
}

// operate applies the faults, the idempotency rules and the invariants to
// one valid capture, void or refund.
func (m *Mock) operate(kind opKind, key string, body operationBody, f Faults) outcome {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.roll(f.ErrorRate) {
		m.injected.Errors++
		return outcome{status: http.StatusServiceUnavailable, code: "unavailable", msg: "injected fault (error_rate)"}
	}
	if rec, ok := m.remembered(kind, key); ok {
		if rec.body != any(body) {
			return outcome{status: http.StatusUnprocessableEntity, code: "idempotency_key_mismatch", msg: errKeyReused.Error()}
		}
		return m.answer(rec.op, f)
	}
	if refusal, ok := m.reject(kind, key, f); ok {
		return refusal
	}
	st := m.byAuth[body.Authorization]
	if st == nil {
		return outcome{status: http.StatusNotFound, code: "authorization_not_found", msg: fmt.Sprintf("no authorization %s", body.Authorization)}
	}
	if refusal, ok := st.refuse(kind, body); ok {
		return refusal
	}

	op := psp.Operation{Authorization: body.Authorization, Amount: body.Amount, Currency: st.rec.currency, Reference: body.Reference}
	switch kind {
	case opCapture:
		st.captured = body.Amount
		op.ID, op.Status = m.newID("cap_"), psp.StatusCaptured
	case opVoid:
		st.voided = true
		op.ID, op.Status, op.Amount = m.newID("void_"), psp.StatusVoided, st.rec.amount
	case opRefund:
		st.refunded += body.Amount
		op.ID, op.Status = m.newID("ref_"), psp.StatusRefunded
	}
	rec := &record{kind: kind, key: key, at: m.now(), body: body, reference: body.Reference, amount: op.Amount, currency: op.Currency, op: op}
	m.store(rec)
	return m.answer(op, f)
}

// refuse checks the PSP's invariants for kind on this authorization: a 400,
// and true, if body breaks one.
func (st *authState) refuse(kind opKind, body operationBody) (outcome, bool) {
	refused := func(code, format string, args ...any) (outcome, bool) {
		return outcome{status: http.StatusBadRequest, code: code, msg: fmt.Sprintf(format, args...)}, true
	}
	auth := st.rec
	if kind != opRefund && body.Reference != auth.reference {
		return refused("reference_mismatch", "authorization %s was made for %s, not %s", auth.auth.ID, auth.reference, body.Reference)
	}
	if auth.auth.Status != psp.StatusAuthorized {
		return refused("authorization_declined", "authorization %s was declined", auth.auth.ID)
	}
	switch kind {
	case opCapture, opVoid:
		switch {
		case st.captured > 0:
			return refused("already_captured", "authorization %s is already captured", auth.auth.ID)
		case st.voided:
			return refused("already_voided", "authorization %s is voided", auth.auth.ID)
		case body.Amount > auth.amount:
			return refused("amount_too_large", "amount %d exceeds the authorized %d", body.Amount, auth.amount)
		}
	case opRefund:
		switch {
		case st.captured == 0:
			return refused("not_captured", "authorization %s is not captured", auth.auth.ID)
		case body.Amount > st.captured-st.refunded:
			return refused("amount_too_large", "amount %d exceeds the %d captured and not yet refunded", body.Amount, st.captured-st.refunded)
		}
	}
	return outcome{}, false
}

// newID makes an id with prefix; mu must be held for m.rand.
func (m *Mock) newID(prefix string) string {
	return fmt.Sprintf("%s%016x", prefix, m.rand.Uint64())
}
