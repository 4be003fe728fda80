package psp

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// PaymentMethodDeclined is the mock's one declining payment method; every
// other pm_... is authorized.
const PaymentMethodDeclined = "pm_card_chargeDeclined"

// Faults are the failures the mock injects into POST /v1/authorizations.
// The zero value injects none.
type Faults struct {
	// ErrorRate is the probability, 0..1, of answering 503 without
	// authorizing.
	ErrorRate float64 `json:"error_rate"`
	// DropRate is the probability, 0..1, of authorizing (or replaying) and
	// then closing the connection without answering: the lost-response case
	// that only an idempotent retry can recover from.
	DropRate float64 `json:"drop_rate"`
	// LatencyMS delays every answer of POST /v1/authorizations by this many
	// milliseconds, after the authorization is made, so a client that times
	// out has still authorized. The admin endpoints are never delayed: they
	// are how a test turns the faults off.
	LatencyMS int `json:"latency_ms"`
}

func (f Faults) validate() error {
	// Written as !(in range) so that NaN fails too.
	if !(f.ErrorRate >= 0 && f.ErrorRate <= 1) {
		return fmt.Errorf("error_rate %v: must be between 0 and 1", f.ErrorRate)
	}
	if !(f.DropRate >= 0 && f.DropRate <= 1) {
		return fmt.Errorf("drop_rate %v: must be between 0 and 1", f.DropRate)
	}
	if f.LatencyMS < 0 {
		return fmt.Errorf("latency_ms %d: must not be negative", f.LatencyMS)
	}
	return nil
}

func (f Faults) latency() time.Duration { return time.Duration(f.LatencyMS) * time.Millisecond }

// LedgerEntry is one authorization the mock made, as GET
// /_admin/authorizations lists it.
type LedgerEntry struct {
	// ID is the authorization's id, auth_...
	ID string `json:"id"`
	// IdempotencyKey is the key of the request that created it.
	IdempotencyKey string `json:"idempotency_key"`
	// Reference is the charge id the client sent.
	Reference string `json:"reference"`
	// Amount is in the currency's minor unit.
	Amount int64 `json:"amount"`
	// Currency is the lower-case ISO 4217 code.
	Currency string `json:"currency"`
	// Status is StatusAuthorized or StatusDeclined.
	Status string `json:"status"`
	// Attempts counts every request received with the key, including those
	// answered 503, dropped, rejected or sent before the authorization
	// existed: a test reads it to prove that a retry happened.
	Attempts int `json:"attempts"`
}

// Mock is an in-memory PSP serving the endpoints of CONTRACT.md ("The mock
// PSP"). It is an http.Handler and safe for concurrent use.
type Mock struct {
	mux *http.ServeMux

	// mu guards everything below. One mutex for the whole state is what makes
	// two concurrent requests with the same new key create one authorization:
	// the lookup and the insert happen in one critical section.
	mu       sync.Mutex
	faults   Faults
	rand     *rand.Rand // not safe for concurrent use on its own
	attempts map[string]int
	byKey    map[string]*record
	ledger   []*record // creation order
	injected Injected
}

// Injected counts the faults the mock has injected, for a chaos run's
// summary.
type Injected struct {
	Errors int `json:"errors"` // 503s answered instead of authorizing
	Drops  int `json:"drops"`  // answers dropped after authorizing
}

// record is one authorization with the request that created it, which a
// replay must match.
type record struct {
	key  string
	req  authorizeBody
	auth Authorization
}

// NewMock returns a mock PSP injecting f. It fails if f is out of range.
func NewMock(f Faults) (*Mock, error) {
	return newMock(f, rand.NewPCG(rand.Uint64(), rand.Uint64()))
}

// newMock takes the random source so that tests can make fault rolls and ids
// reproducible.
func newMock(f Faults, src rand.Source) (*Mock, error) {
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("mock psp: %w", err)
	}
	m := &Mock{
		faults:   f,
		rand:     rand.New(src),
		attempts: make(map[string]int),
		byKey:    make(map[string]*record),
	}
	m.mux = m.routes()
	return m, nil
}

// ServeHTTP serves POST /v1/authorizations, GET /_admin/authorizations and
// PUT /_admin/faults.
func (m *Mock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mux.ServeHTTP(w, r)
}

// SetFaults replaces the injected faults; Faults{} turns them all off. It
// fails, changing nothing, if f is out of range.
func (m *Mock) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return fmt.Errorf("set faults: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = f
	return nil
}

// Faults returns the faults in force.
func (m *Mock) Faults() Faults {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.faults
}

// Injected returns how many faults were injected so far.
func (m *Mock) Injected() Injected {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.injected
}

// Authorizations returns every authorization made, in creation order.
func (m *Mock) Authorizations() []LedgerEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]LedgerEntry, 0, len(m.ledger))
	for _, rec := range m.ledger {
		out = append(out, LedgerEntry{
			ID:             rec.auth.ID,
			IdempotencyKey: rec.key,
			Reference:      rec.req.Reference,
			Amount:         rec.req.Amount,
			Currency:       rec.req.Currency,
			Status:         rec.auth.Status,
			Attempts:       m.attempts[rec.key],
		})
	}
	return out
}

// receive counts a request for key before anything can fail, so that even
// a malformed or faulted request shows in Attempts, and returns the faults
// that apply to it.
func (m *Mock) receive(key string) Faults {
	m.mu.Lock()
	defer m.mu.Unlock()
	if key != "" {
		m.attempts[key]++
	}
	return m.faults
}

// outcome is what POST /v1/authorizations answers.
type outcome struct {
	status int // http.StatusOK, StatusUnprocessableEntity or StatusServiceUnavailable
	auth   Authorization
	drop   bool // close the connection instead of answering
}

var errKeyReused = errors.New("idempotency key already used with another request")

// authorize applies f and the idempotency rules to one valid request.
func (m *Mock) authorize(key string, req authorizeBody, f Faults) outcome {
	m.mu.Lock()
	defer m.mu.Unlock()

	// A zero rate draws nothing, so seeded tests stay reproducible when
	// only one fault is on.
	if f.ErrorRate > 0 && m.rand.Float64() < f.ErrorRate {
		m.injected.Errors++
		return outcome{status: http.StatusServiceUnavailable}
	}
	rec, ok := m.byKey[key]
	switch {
	case ok && rec.req != req:
		return outcome{status: http.StatusUnprocessableEntity}
	case !ok:
		rec = &record{key: key, req: req, auth: m.decide(req)}
		m.byKey[key] = rec
		m.ledger = append(m.ledger, rec)
	}
	drop := f.DropRate > 0 && m.rand.Float64() < f.DropRate
	if drop {
		m.injected.Drops++
	}
	return outcome{status: http.StatusOK, auth: rec.auth, drop: drop}
}

// decide makes a new authorization; mu must be held for m.rand.
func (m *Mock) decide(req authorizeBody) Authorization {
	auth := Authorization{ID: fmt.Sprintf("auth_%016x", m.rand.Uint64()), Status: StatusAuthorized}
	if req.PaymentMethod == PaymentMethodDeclined {
		code := DeclineCodeCardDeclined
		auth.Status, auth.DeclineCode = StatusDeclined, &code
	}
	return auth
}
