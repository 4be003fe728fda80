// Package stripestandin is a small stateful stand-in for Stripe, for the
// chaos harness: it speaks Stripe's wire format (form-encoded requests,
// PaymentIntent, Refund and error objects, as stripe-go reads them) with
// Stripe's semantics, which stripe-mock, being stateless, cannot show:
//
//   - Idempotency-Key: the first answer under a key is saved once execution
//     began, a 500 included, and every later request under the key gets it
//     (Idempotent-Replayed: true); other parameters under the key are an
//     idempotency_error. A key is forgotten once KeyWindow old (Stripe:
//     at least 24 hours, shortened here), after which it is a new request.
//   - Search lags: a PaymentIntent shows in GET /v1/payment_intents/search
//     only some time (up to SearchLag) after it was made. Reads by id and
//     lists are consistent.
//   - Faults like the mock PSP's (error_rate, drop_rate, reject_rate,
//     lookup_error_rate, latency_ms), where an error_rate 500 may come
//     before execution (not saved), after it began without acting (saved),
//     or after acting (saved, the PaymentIntent made).
//
// It is no part of the service. It also serves the mock PSP's admin
// surface (GET /_admin/authorizations, captures, voids, refunds, requests,
// and GET/PUT /_admin/faults, in the mock's shapes), so the chaos harness
// injects faults and checks its books unchanged.
package stripestandin

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

// Config configures a stand-in.
type Config struct {
	// KeyWindow is how long a key is remembered. Default 24h, Stripe's.
	KeyWindow time.Duration
	// SearchLag is the longest a new PaymentIntent stays out of search;
	// each one's lag is drawn between 0 and it. Default 0 (consistent).
	SearchLag time.Duration
	// Faults are injected from the start (PUT /_admin/faults changes them).
	Faults mockpsp.Faults
	// Seed draws the faults and lags.
	Seed uint64
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Server is one stand-in; an http.Handler.
type Server struct {
	cfg Config
	mux *http.ServeMux

	mu       sync.Mutex
	rnd      *rand.Rand
	faults   mockpsp.Faults
	injected mockpsp.Injected
	keys     map[string]*saved
	attempts map[string]int
	pis      map[string]*paymentIntent
	piOrder  []string
	refunds  []*refundObj
	ledger   []mockpsp.LedgerEntry
	captures []mockpsp.OperationEntry
	voids    []mockpsp.OperationEntry
	refundsL []mockpsp.OperationEntry
	requests []mockpsp.RequestEntry
	seq      int
	// replayed5xx counts saved 5xx answers replayed (GET /_admin/stripe).
	replayed5xx int
}

// saved is a key's saved answer.
type saved struct {
	at     time.Time
	params string
	status int
	body   []byte
}

// New returns a stand-in.
func New(cfg Config) *Server {
	if cfg.KeyWindow == 0 {
		cfg.KeyWindow = 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x73747269)), faults: cfg.Faults,
		keys: map[string]*saved{}, attempts: map[string]int{}, pis: map[string]*paymentIntent{}}
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/payment_intents", s.createPaymentIntent)
	m.HandleFunc("GET /v1/payment_intents/search", s.searchPaymentIntents)
	m.HandleFunc("GET /v1/payment_intents/{id}", s.retrievePaymentIntent)
	m.HandleFunc("POST /v1/payment_intents/{id}/capture", s.capturePaymentIntent)
	m.HandleFunc("POST /v1/payment_intents/{id}/cancel", s.cancelPaymentIntent)
	m.HandleFunc("POST /v1/refunds", s.createRefund)
	m.HandleFunc("GET /v1/refunds", s.listRefunds)
	m.HandleFunc("GET /_admin/authorizations", func(w http.ResponseWriter, _ *http.Request) { s.admin(w, func() any { return s.ledger }) })
	m.HandleFunc("GET /_admin/captures", func(w http.ResponseWriter, _ *http.Request) { s.admin(w, func() any { return s.captures }) })
	m.HandleFunc("GET /_admin/voids", func(w http.ResponseWriter, _ *http.Request) { s.admin(w, func() any { return s.voids }) })
	m.HandleFunc("GET /_admin/refunds", func(w http.ResponseWriter, _ *http.Request) { s.admin(w, func() any { return s.refundsL }) })
	m.HandleFunc("GET /_admin/requests", func(w http.ResponseWriter, _ *http.Request) { s.admin(w, func() any { return s.requests }) })
	m.HandleFunc("GET /_admin/faults", s.getFaults)
	m.HandleFunc("GET /_admin/stripe", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]int{"replayed_5xx": s.replayed5xx})
	})
	m.HandleFunc("PUT /_admin/faults", s.setFaults)
	s.mux = m
	return s
}

// ServeHTTP serves Stripe's API (the part phasepay calls) and the admin
// surface.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/_admin/") && !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer sk_test_") {
		writeJSON(w, http.StatusUnauthorized, stripeError("invalid_request_error", "", "Invalid API Key provided"))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// answer is what a request gets: a status and body, the connection dropped
// after acting, and whether it is a key's saved answer replayed.
type answer struct {
	status   int
	body     []byte
	drop     bool
	replayed bool
}

// send writes a, after the latency, outside the lock.
func (s *Server) send(w http.ResponseWriter, a answer, latency time.Duration) {
	time.Sleep(latency)
	if a.drop {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", fmt.Sprintf("req_standin%d", time.Now().UnixNano()))
	if a.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// logRequest records a request for GET /_admin/requests; the caller holds
// the lock. It returns the entry's index, for its status.
func (s *Server) logRequest(r *http.Request, ref string) int {
	s.requests = append(s.requests, mockpsp.RequestEntry{Method: r.Method, Path: r.URL.Path,
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Reference: ref, At: s.cfg.Now()})
	return len(s.requests) - 1
}

// executed is what an endpoint did: its answer, and whether it acted.
type executed struct {
	status int
	body   any
}

// idempotent runs a POST under Stripe's idempotency rules: act runs under
// the lock, only for a request that executes. ref names the request's
// object for the request log.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, ref func(url.Values) string, act func(url.Values) executed) {
	_ = r.ParseForm()
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	i := s.logRequest(r, ref(r.PostForm))
	a := s.execute(r, key, act)
	s.requests[i].Status = a.status
	if a.drop {
		s.requests[i].Status = 0
	}
	latency := time.Duration(s.faults.LatencyMS) * time.Millisecond
	s.mu.Unlock()
	s.send(w, a, latency)
}

// execute is idempotent's decision, under the lock.
func (s *Server) execute(r *http.Request, key string, act func(url.Values) executed) answer {
	now := s.cfg.Now()
	params := r.URL.Path + "?" + r.PostForm.Encode()
	s.attempts[key]++
	if k := s.keys[key]; k != nil && now.Sub(k.at) >= s.cfg.KeyWindow {
		delete(s.keys, key) // forgotten: a reuse is a new request
	}
	if k := s.keys[key]; key != "" && k != nil {
		if k.params != params {
			return answer{status: 400, body: mustJSON(stripeError("idempotency_error", "",
				"Keys for idempotent requests can only be used with the same parameters they were first used with."))}
		}
		if k.status >= 500 {
			s.replayed5xx++
		}
		return answer{status: k.status, body: k.body, replayed: true, drop: s.roll(s.faults.DropRate, &s.injected.Drops)}
	}
	save := func(a answer) answer {
		if key != "" {
			s.keys[key] = &saved{at: now, params: params, status: a.status, body: a.body}
		}
		return a
	}
	serverError := answer{status: 500, body: mustJSON(stripeError("api_error", "", "An unknown error occurred"))}
	if s.roll(s.faults.ErrorRate, &s.injected.Errors) {
		switch s.rnd.IntN(3) {
		case 0:
			return serverError // before execution began: not saved
		case 1:
			return save(serverError) // began, did nothing, saved
		default:
			act(r.PostForm) // acted, then failed: saved
			return save(serverError)
		}
	}
	if s.roll(s.faults.RejectRate, &s.injected.Rejects) {
		// A refusal of the request as sent: saved, so that the same request
		// under the key is refused again.
		return save(answer{status: 400, body: mustJSON(stripeError("invalid_request_error", "parameter_invalid_empty",
			"The stand-in refused this request (reject_rate)."))})
	}
	ex := act(r.PostForm)
	a := save(answer{status: ex.status, body: mustJSON(ex.body)})
	a.drop = s.roll(s.faults.DropRate, &s.injected.Drops)
	return a
}

// lookup runs a GET: faults, then read under the lock.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, ref string, read func() executed) {
	s.mu.Lock()
	i := s.logRequest(r, ref)
	var a answer
	if s.roll(s.faults.ErrorRate, &s.injected.Errors) || s.roll(s.faults.LookupErrorRate, &s.injected.LookupErrors) {
		a = answer{status: 500, body: mustJSON(stripeError("api_error", "", "An unknown error occurred"))}
	} else {
		ex := read()
		a = answer{status: ex.status, body: mustJSON(ex.body)}
	}
	s.requests[i].Status = a.status
	latency := time.Duration(s.faults.LatencyMS) * time.Millisecond
	s.mu.Unlock()
	s.send(w, a, latency)
}

// roll draws a fault of probability p, counting it; the caller holds the
// lock.
func (s *Server) roll(p float64, count *int) bool {
	if p > 0 && s.rnd.Float64() < p {
		*count++
		return true
	}
	return false
}

func (s *Server) nextID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s_standin%08d", prefix, s.seq)
}

func (s *Server) admin(w http.ResponseWriter, list func() any) {
	s.mu.Lock()
	body := mustJSON(map[string]any{"data": list()})
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func (s *Server) getFaults(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	writeJSON(w, http.StatusOK, struct {
		Name string `json:"name"`
		mockpsp.Faults
		Injected mockpsp.Injected `json:"injected"`
	}{"stripe-standin", s.faults, s.injected})
}

func (s *Server) setFaults(w http.ResponseWriter, r *http.Request) {
	var f mockpsp.Faults
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": err.Error()}})
		return
	}
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, f)
}

// stripeError is Stripe's error object.
func stripeError(typ, code, msg string) map[string]any {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	return map[string]any{"error": e}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(v))
}

// searchQueryRE reads the one query phasepay searches with.
var searchQueryRE = regexp.MustCompile(`^metadata\['([a-z_]+)'\]:'([A-Za-z0-9_]+)'$`)

func formInt(f url.Values, name string) (int64, bool) {
	n, err := strconv.ParseInt(f.Get(name), 10, 64)
	return n, err == nil
}

// metadata reads metadata[k]=v form fields.
func metadata(f url.Values) map[string]string {
	md := map[string]string{}
	for k, v := range f {
		if strings.HasPrefix(k, "metadata[") && strings.HasSuffix(k, "]") && len(v) > 0 {
			md[k[len("metadata["):len(k)-1]] = v[0]
		}
	}
	return md
}
