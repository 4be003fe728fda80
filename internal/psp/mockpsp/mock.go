package mockpsp

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// PaymentMethodDeclined is the mock's one declining payment method; every
// other pm_... is authorized.
const PaymentMethodDeclined = "pm_card_chargeDeclined"

// Defaults for the zero fields of Config (the contract's MOCKPSP_NAME
// and MOCKPSP_KEY_TTL).
const (
	NameDefault   = "mockpsp"
	KeyTTLDefault = 24 * time.Hour
)

// Faults are the failures the mock injects into the PSP API (/v1/...). The
// zero value injects none.
type Faults struct {
	// ErrorRate is the probability, 0..1, of answering 503 without acting:
	// an outage. It applies to lookups too.
	ErrorRate float64 `json:"error_rate"`
	// DropRate is the probability, 0..1, of acting (or replaying) and then
	// closing the connection without answering: the lost-answer case. Never
	// applied to lookups.
	DropRate float64 `json:"drop_rate"`
	// RejectRate is the probability, 0..1, of answering 400 without acting:
	// a final failure. It applies only to a request that would act, not to
	// a replay of a key the mock remembers (a real PSP replays its first
	// answer), and never to lookups.
	RejectRate float64 `json:"reject_rate"`
	// LookupErrorRate is the probability, 0..1, of answering a lookup
	// (GET /v1/authorizations?reference=) 503: the lookup that fails.
	LookupErrorRate float64 `json:"lookup_error_rate"`
	// LatencyMS delays every answer of the PSP API by this many
	// milliseconds, after acting, so a client that times out has still
	// acted. The admin endpoints are never delayed: they are how a test
	// turns the faults off.
	LatencyMS int `json:"latency_ms"`
}

func (f Faults) validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"error_rate", f.ErrorRate}, {"drop_rate", f.DropRate}, {"reject_rate", f.RejectRate}, {"lookup_error_rate", f.LookupErrorRate}} {
		// Written as !(in range) so that NaN fails too.
		if !(r.v >= 0 && r.v <= 1) {
			return fmt.Errorf("%s %v: must be between 0 and 1", r.name, r.v)
		}
	}
	if f.LatencyMS < 0 {
		return fmt.Errorf("latency_ms %d: must not be negative", f.LatencyMS)
	}
	return nil
}

func (f Faults) latency() time.Duration { return time.Duration(f.LatencyMS) * time.Millisecond }

// Config configures a Mock. Zero fields take the defaults.
type Config struct {
	// Name identifies this mock among several (routing between PSPs): it is
	// in GET /_admin/faults and bin/mockpsp's logs. Default "mockpsp".
	Name string
	// KeyTTL is how long the mock remembers an idempotency key, counted from
	// the request that first used it; after it, the same key is a new
	// request, as at real PSPs (about 24 h). What was done stays findable
	// by lookup for ever. Default 24h.
	KeyTTL time.Duration
	// Faults are injected from the start.
	Faults Faults
	// Now is the clock that decides when a key is forgotten, and the time
	// of the request log; tests move it. Default time.Now.
	Now func() time.Time
	// Source draws the fault rolls and the ids; tests fix it so that every
	// run rolls the same. Default a source seeded at random.
	Source rand.Source
}

// LedgerEntry is one authorization the mock made, as GET
// /_admin/authorizations lists it.
type LedgerEntry struct {
	// ID is the authorization's id, auth_...
	ID string `json:"id"`
	// IdempotencyKey is the key of the request that created it. Two entries
	// share one only if the mock had forgotten the key (KeyTTL).
	IdempotencyKey string `json:"idempotency_key"`
	// Reference is the charge id the client sent.
	Reference string `json:"reference"`
	// Amount is in the currency's minor unit.
	Amount int64 `json:"amount"`
	// Currency is the lower-case ISO 4217 code.
	Currency string `json:"currency"`
	// Status is StatusAuthorized or StatusDeclined.
	Status string `json:"status"`
	// Attempts counts every request received with the key, ever, including
	// those answered 503, dropped, rejected or sent before the
	// authorization existed: a test reads it to prove that a retry
	// happened (or did not).
	Attempts int `json:"attempts"`
}

// RequestEntry is one request the PSP API (/v1/...) received, as GET
// /_admin/requests lists it.
type RequestEntry struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	// IdempotencyKey is the request's header, empty for lookups.
	IdempotencyKey string `json:"idempotency_key"`
	// Reference is the body's reference (POST) or the ?reference= of a
	// lookup; empty when the request had none that could be read.
	Reference string `json:"reference"`
	// Status is the answer's HTTP status; 0 when none was sent (drop_rate,
	// or the client left first).
	Status int `json:"status"`
	// At is when the request was received.
	At time.Time `json:"at"`
}

// Injected counts the faults the mock has injected, for a chaos run's
// summary.
type Injected struct {
	Errors       int `json:"errors"`        // 503s answered instead of acting (error_rate)
	Drops        int `json:"drops"`         // answers dropped after acting (drop_rate)
	Rejects      int `json:"rejects"`       // 400s answered instead of acting (reject_rate)
	LookupErrors int `json:"lookup_errors"` // lookups answered 503 (lookup_error_rate)
}

// opKind names one kind of operation the mock performs. Keys, the ledger
// and lookups are kept per kind, so that captures, voids and refunds are
// each a kind plus a handler.
type opKind string

// The kinds, named as their endpoints are (/v1/<kind>, /_admin/<kind>).
const (
	opAuthorization opKind = "authorizations"
	opCapture       opKind = "captures"
	opVoid          opKind = "voids"
	opRefund        opKind = "refunds"
)

// Mock is an in-memory PSP serving the endpoints of docs/api.md ("The mock
// PSP"). It is an http.Handler and safe for concurrent use.
type Mock struct {
	mux    *http.ServeMux
	name   string
	keyTTL time.Duration
	now    func() time.Time

	// mu guards everything below. One mutex for the whole state is what makes
	// two concurrent requests with the same new key act once: the lookup of
	// the key and the insert happen in one critical section.
	mu       sync.Mutex
	faults   Faults
	rand     *rand.Rand // not safe for concurrent use on its own
	attempts map[string]int
	keys     map[opKey]*record   // keys remembered, possibly past keyTTL (see remembered)
	ledger   []*record           // every operation, in creation order, for ever
	byRef    map[opKey][]*record // ledger by kind and reference, for lookups
	refused  map[opKey]bool      // keys answered with a reject_rate refusal, forever (see reject)
	byAuth   map[string]*authState
	requests []RequestEntry
	injected Injected
}

// New returns a mock PSP injecting f, with the default name and key
// TTL. It fails if f is out of range.
func New(f Faults) (*Mock, error) {
	return NewFromConfig(Config{Faults: f})
}

// NewFromConfig returns a mock PSP configured by cfg.
func NewFromConfig(cfg Config) (*Mock, error) {
	src := cfg.Source
	if src == nil {
		src = rand.NewPCG(rand.Uint64(), rand.Uint64())
	}
	if err := cfg.Faults.validate(); err != nil {
		return nil, fmt.Errorf("mock psp: %w", err)
	}
	if cfg.KeyTTL < 0 {
		return nil, fmt.Errorf("mock psp: key TTL %s: must not be negative", cfg.KeyTTL)
	}
	m := &Mock{
		name:     cmp.Or(cfg.Name, NameDefault),
		keyTTL:   cmp.Or(cfg.KeyTTL, KeyTTLDefault),
		now:      cfg.Now,
		faults:   cfg.Faults,
		rand:     rand.New(src),
		attempts: make(map[string]int),
		keys:     make(map[opKey]*record),
		byRef:    make(map[opKey][]*record),
		refused:  make(map[opKey]bool),
		byAuth:   make(map[string]*authState),
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.mux = m.routes()
	return m, nil
}

// ServeHTTP serves the PSP API and the admin endpoints.
func (m *Mock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mux.ServeHTTP(w, r)
}

// Name returns the mock's name.
func (m *Mock) Name() string { return m.name }

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
		if rec.kind != opAuthorization {
			continue
		}
		out = append(out, LedgerEntry{
			ID:             rec.auth.ID,
			IdempotencyKey: rec.key,
			Reference:      rec.reference,
			Amount:         rec.amount,
			Currency:       rec.currency,
			Status:         rec.auth.Status,
			Attempts:       m.attempts[rec.key],
		})
	}
	return out
}

// Requests returns every request the PSP API received, in order.
func (m *Mock) Requests() []RequestEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(make([]RequestEntry, 0, len(m.requests)), m.requests...)
}
