package stripepsp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/stripepsp"
)

// Stripe's own mock is stateless, so what the connector decides on a
// status, an error, a key past its window or a search that lags is tested
// here: recorded Stripe answers (testdata/answers, written from Stripe's
// API reference: the PaymentIntent and Refund objects, the error object and
// its types and codes) replayed in a scripted order by an httptest server,
// which also records every request the connector made.

// step is one scripted answer: to the request that matches (method and
// path prefix), the recorded answer, or the connection dropped after the
// request was read (the answer lost), or held past the client's timeout.
type step struct {
	match  string // "POST /v1/payment_intents"
	answer string // testdata/answers/<answer>.json
	drop   bool
	hang   bool
}

// sent is one request the connector made.
type sent struct {
	Method, Path, Key string
	Form              url.Values
}

type replay struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex
	steps []step
	got   []sent
}

func newReplay(t *testing.T, steps ...step) *replay {
	t.Helper()
	r := &replay{t: t, steps: steps}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *replay) serve(w http.ResponseWriter, req *http.Request) {
	_ = req.ParseForm()
	r.mu.Lock()
	r.got = append(r.got, sent{Method: req.Method, Path: req.URL.Path, Key: req.Header.Get("Idempotency-Key"), Form: req.Form})
	if len(r.steps) == 0 {
		r.mu.Unlock()
		r.t.Errorf("unscripted request %s %s", req.Method, req.URL.Path)
		http.Error(w, "unscripted", http.StatusTeapot)
		return
	}
	s := r.steps[0]
	r.steps = r.steps[1:]
	r.mu.Unlock()
	if got := req.Method + " " + req.URL.Path; !strings.HasPrefix(got, s.match) {
		r.t.Errorf("request %q, scripted %q", got, s.match)
	}
	switch {
	case s.drop:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case s.hang:
		<-req.Context().Done() // the client gives up
		return
	}
	a := loadAnswer(r.t, s.answer)
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

// requests returns what the connector sent, in order.
func (r *replay) requests() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.got...)
}

// done asserts that every scripted answer was asked for.
func (r *replay) done() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(r.t, r.steps, "scripted answers never asked for")
}

type answer struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func loadAnswer(t *testing.T, name string) answer {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "answers", name+".json"))
	require.NoError(t, err)
	var a answer
	require.NoError(t, json.Unmarshal(raw, &a))
	return a
}

// clock is a settable clock for the key window.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// testClient is a connector on r with short pauses, a 24h window and a 1h
// search lag, on clk.
func testClient(t *testing.T, r *replay, clk *clock) *stripepsp.Client {
	t.Helper()
	c, err := stripepsp.New(stripepsp.Config{
		Name: "stripe", URL: "stripe+" + r.srv.URL,
		Settings:       stripepsp.Settings{APIKey: "sk_test_recorded", KeyWindow: 24 * time.Hour, SearchLag: time.Hour},
		AttemptTimeout: 200 * time.Millisecond, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		Now: clk.Now,
	})
	require.NoError(t, err)
	return c
}

// The recorded PaymentIntent's charge and key.
const (
	recCharge = "ch_recorded"
	recKey    = "ch_recorded:authorize:1"
	recPI     = "pi_3Q0recorded0001"
)

func authorizeReq(created time.Time) psp.AuthorizeRequest {
	return psp.AuthorizeRequest{IdempotencyKey: recKey, Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa",
		Reference: recCharge, TenantID: 7, KeyCreatedAt: created}
}
