package client

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testAPIKey = "sk_test_123"

// seenRequest is what the fake server recorded of one request.
type seenRequest struct {
	Method string
	Path   string
	Query  string
	Key    string
	Auth   string
	Body   []byte
	At     time.Time
	// Journaled is whether the request's key was in the test's journal
	// when the request arrived.
	Journaled bool
}

// fakeAPI mimics the charges API of the contract closely enough for the
// client: respond decides each answer, given the request's number (from 1).
type fakeAPI struct {
	srv     *httptest.Server
	journal *MemoryJournal // checked on every request, if set
	respond func(w http.ResponseWriter, r *http.Request, n int)

	mu   sync.Mutex
	seen []seenRequest
}

func newFakeAPI(t *testing.T, journal *MemoryJournal, respond func(w http.ResponseWriter, r *http.Request, n int)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{journal: journal, respond: respond}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		sr := seenRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Key: key, Auth: r.Header.Get("Authorization"), Body: body, At: time.Now()}
		if f.journal != nil && key != "" {
			sr.Journaled = f.journal.Has(key)
		}
		f.mu.Lock()
		f.seen = append(f.seen, sr)
		n := len(f.seen)
		f.mu.Unlock()
		f.respond(w, r, n)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) requests() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.seen...)
}

func (f *fakeAPI) keys() []string {
	var keys []string
	for _, r := range f.requests() {
		keys = append(keys, r.Key)
	}
	return keys
}

// newTestClient returns a client of url with fast, seeded backoff; mod may
// change the config first.
func newTestClient(t *testing.T, url string, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{
		BaseURL:        url,
		APIKey:         testAPIKey,
		MaxElapsed:     5 * time.Second,
		InitialBackoff: time.Millisecond,
		MaxBackoff:     5 * time.Millisecond,
		Rand:           rand.NewPCG(1, 2),
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// chargeBody is a charge object as the server renders it.
func chargeBody(id string, p ChargeParams) []byte {
	md := p.Metadata
	if md == nil {
		md = map[string]string{}
	}
	ref := "auth_" + id
	b, err := json.Marshal(map[string]any{
		"id": id, "object": "charge", "amount": p.Amount, "currency": p.Currency,
		"payment_method": p.PaymentMethod, "status": "authorized", "psp_reference": ref,
		"description": p.Description, "metadata": md, "created_at": "2025-01-31T12:00:00Z",
	})
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

func writeCharge(w http.ResponseWriter, status int, body []byte, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeProblem(w http.ResponseWriter, status int, code, detail string, retryAfter int, extra map[string]any) {
	p := map[string]any{"type": "/problems/" + code, "title": http.StatusText(status), "status": status, "detail": detail, "code": code}
	for k, v := range extra {
		p[k] = v
	}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

var visa = ChargeParams{Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa"}
