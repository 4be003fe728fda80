package mockpsp

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/phasepay/phasepay/internal/psp"
)

// The mock's books outlive its process when it is given a file to keep
// them in (bin/mockpsp's MOCKPSP_STATE, which `make run` sets): every
// operation with its key, request and result, what each authorization has
// been captured, voided and refunded, the keys refused for ever, and how
// many requests each key received. A real PSP keeps its books whatever
// happens to phasepay's processes; a dev mock that forgot them at every
// `make run` answered a void of an earlier run's charge with a final 402
// authorization_not_found, stored for good, while the database still held
// the charge (pitfall T2 "A mock PSP that forgets its books between runs").
//
// The request log (GET /_admin/requests) and the faults are the running
// process's own and are not kept.

// mockStateVersion is the file's format; a file of another version is
// refused rather than read wrongly.
const mockStateVersion = 1

type mockState struct {
	Version  int            `json:"version"`
	Name     string         `json:"name"`
	Ledger   []stateRecord  `json:"ledger"`
	Refused  []opKey        `json:"refused"`
	Attempts map[string]int `json:"attempts"`
	Injected Injected       `json:"injected"`
}

// stateRecord is one operation of the ledger, and for an authorization
// what has been done to it since.
type stateRecord struct {
	Kind      opKind             `json:"kind"`
	Key       string             `json:"key"`
	At        time.Time          `json:"at"`
	Reference string             `json:"reference"`
	Amount    int64              `json:"amount"`
	Currency  string             `json:"currency"`
	Auth      *psp.Authorization `json:"auth,omitempty"`
	AuthBody  *authorizeBody     `json:"auth_body,omitempty"`
	Op        *psp.Operation     `json:"op,omitempty"`
	OpBody    *operationBody     `json:"op_body,omitempty"`
	Captured  int64              `json:"captured,omitempty"`
	Voided    bool               `json:"voided,omitempty"`
	Refunded  int64              `json:"refunded,omitempty"`
}

// MarshalJSON makes opKey a JSON object (it is a map key in memory).
func (k opKey) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Kind opKind `json:"kind"`
		Key  string `json:"key"`
	}{k.kind, k.key})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (k *opKey) UnmarshalJSON(b []byte) error {
	var v struct {
		Kind opKind `json:"kind"`
		Key  string `json:"key"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	k.kind, k.key = v.Kind, v.Key
	return nil
}

// Changes counts the requests the mock has received: a saver compares it
// with the count at its last save to know whether the books may have
// changed.
func (m *Mock) Changes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.requests)
}

// SaveState writes the mock's books to path, atomically (a new file
// renamed over the old), so that a crash mid-write leaves the previous
// books whole.
func (m *Mock) SaveState(path string) error {
	m.mu.Lock()
	st := mockState{Version: mockStateVersion, Name: m.name, Attempts: make(map[string]int, len(m.attempts)), Injected: m.injected}
	for k, n := range m.attempts {
		st.Attempts[k] = n
	}
	for k := range m.refused {
		st.Refused = append(st.Refused, k)
	}
	for _, rec := range m.ledger {
		sr := stateRecord{Kind: rec.kind, Key: rec.key, At: rec.at, Reference: rec.reference, Amount: rec.amount, Currency: rec.currency}
		switch body := rec.body.(type) {
		case authorizeBody:
			auth := rec.auth
			sr.Auth, sr.AuthBody = &auth, &body
			if as := m.byAuth[rec.auth.ID]; as != nil {
				sr.Captured, sr.Voided, sr.Refunded = as.captured, as.voided, as.refunded
			}
		case operationBody:
			op := rec.op
			sr.Op, sr.OpBody = &op, &body
		}
		st.Ledger = append(st.Ledger, sr)
	}
	m.mu.Unlock()

	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("mock state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("mock state: %w", err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("mock state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("mock state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("mock state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("mock state: %w", err)
	}
	return nil
}

// ErrNoState: the state file does not exist yet (a first run).
var ErrNoState = errors.New("no mock state saved yet")

// LoadState reads books SaveState wrote into a mock that has made nothing
// yet, and returns how many operations they hold. It returns ErrNoState
// when path does not exist, and refuses a file it cannot read whole.
func (m *Mock) LoadState(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, ErrNoState
	}
	if err != nil {
		return 0, fmt.Errorf("mock state: %w", err)
	}
	var st mockState
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, fmt.Errorf("mock state %s: %w", path, err)
	}
	if st.Version != mockStateVersion {
		return 0, fmt.Errorf("mock state %s: version %d, this mock reads %d", path, st.Version, mockStateVersion)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ledger) > 0 {
		return 0, errors.New("mock state: the mock already has books of its own")
	}
	for _, sr := range st.Ledger {
		rec := &record{kind: sr.Kind, key: sr.Key, at: sr.At, reference: sr.Reference, amount: sr.Amount, currency: sr.Currency}
		switch {
		case sr.Auth != nil && sr.AuthBody != nil:
			rec.auth, rec.body = *sr.Auth, *sr.AuthBody
		case sr.Op != nil && sr.OpBody != nil:
			rec.op, rec.body = *sr.Op, *sr.OpBody
		default:
			return 0, fmt.Errorf("mock state %s: operation %s %q has no result", path, sr.Kind, sr.Key)
		}
		m.store(rec)
		if rec.kind == opAuthorization {
			m.byAuth[rec.auth.ID] = &authState{rec: rec, captured: sr.Captured, voided: sr.Voided, refunded: sr.Refunded}
		}
	}
	for _, k := range st.Refused {
		m.refused[k] = true
	}
	for k, n := range st.Attempts {
		m.attempts[k] = n
	}
	m.injected = st.Injected
	return len(st.Ledger), nil
}
