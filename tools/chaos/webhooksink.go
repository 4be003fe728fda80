package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/phasepay/phasepay/client"
)

// webhookSink is a real HTTP server in the chaos process, registered as a
// webhook endpoint for every event type ("*"). It verifies the
// Phasepay-Signature of every delivery, records every delivery, and has
// faults of its own, drawn per delivery from the run's seed:
//
//   - error: answers 500 or 503 (the deliverer retries on its schedule);
//   - drop: reads the delivery and closes the connection without an
//     answer (the receiver saw it, phasepay does not know: a redelivery);
//   - hang: answers 200 after a pause shorter than the 10 s delivery
//     timeout (a slow receiver, still a success);
//   - timeout: answers 200 only after the delivery timeout (11–12 s): the
//     deliverer has given the attempt up as failed, so the late answer is
//     not a success and the event must come again.
//
// A delivery counts as observed (accepted) only when the sink answered 2xx
// in time; the run's webhook invariants are checked on what was accepted
// (see verifyWebhooks).
//
// It also serves the hanging tenant's endpoints (/hang/{n}, see
// webhookfair.go): every delivery there hangs until the deliverer gives
// up, or the sink closes.
type webhookSink struct {
	cfg  *Config
	srv  *http.Server
	url  string // the chaos tenant's endpoint
	base string // scheme and host of every endpoint it serves
	// closing ends the pauses of hangs and timeouts at shutdown.
	closing chan struct{}

	mu         sync.Mutex
	rnd        *rand.Rand
	secret     string
	events     map[string]*sinkEvent // by event id
	received   int                   // deliveries received, whatever the answer
	accepted   int                   // answered 2xx within the timeout
	injected   map[string]int        // faults by kind
	badSigs    int
	violations []string
	hung       int   // deliveries received on /hang/
	tenantID   int64 // the chaos tenant's id, whose events the sink receives on /hook
	// committed is, for each of the chaos tenant's events, the earliest
	// it can have committed (webhookfair.go's watchCommits).
	committed map[string]time.Time
}

// sinkEvent is what the sink saw of one event.
type sinkEvent struct {
	typ           string
	object        json.RawMessage
	body          []byte // the first delivery's body, every later one compared to it
	received      int
	accepted      int
	firstReceived time.Time // its first attempt, whatever the answer
	firstAccepted time.Time
}

// The sink's fault kinds, as counted in WebhookStats.Faults.
const (
	sinkError   = "error 5xx"
	sinkDrop    = "connection dropped"
	sinkHang    = "slow answer (< timeout)"
	sinkTimeout = "answer after the timeout"
)

// deliveryTimeout is the deliverer's timeout for one attempt (the
// contract's 10 s); a timeout fault answers after it.
const deliveryTimeout = 10 * time.Second

// startSink listens on a free loopback port and serves deliveries on /hook.
func startSink(cfg *Config) (*webhookSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &webhookSink{
		cfg: cfg, closing: make(chan struct{}), url: "http://" + ln.Addr().String() + "/hook", base: "http://" + ln.Addr().String(),
		rnd:    rand.New(rand.NewPCG(cfg.Seed, 0x7765626b)),
		events: map[string]*sinkEvent{}, injected: map[string]int{}, committed: map[string]time.Time{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook", s.serve)
	mux.HandleFunc("POST /hang/{n}", s.hang)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at close
	return s, nil
}

// close stops the server at once, ending every pause.
func (s *webhookSink) close() {
	close(s.closing)
	s.srv.Close() //nolint:errcheck
}

func (s *webhookSink) setSecret(secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secret = secret
}

// fault draws the fault of one delivery, "" for none.
func (s *webhookSink) fault() string {
	f := s.cfg.WebhookFaults
	x := s.rnd.Float64()
	for _, k := range []struct {
		kind string
		rate float64
	}{{sinkError, f.ErrorRate}, {sinkDrop, f.DropRate}, {sinkHang, f.HangRate}, {sinkTimeout, f.TimeoutRate}} {
		if x < k.rate {
			return k.kind
		}
		x -= k.rate
	}
	return ""
}

func (s *webhookSink) serve(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	body, err := io.ReadAll(io.LimitReader(r.Body, 2<<20))
	if err != nil {
		return // the deliverer went away mid-body: nothing delivered
	}
	s.mu.Lock()
	secret := s.secret
	s.received++
	ev, verr := client.VerifyWebhook(body, r.Header.Get(client.WebhookSignatureHeader), secret, nil)
	if verr != nil {
		s.badSigs++
		s.violations = append(s.violations, fmt.Sprintf("webhook delivery with a bad signature (%v): %.200s", verr, body))
		s.mu.Unlock()
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	e := s.events[ev.ID]
	if e == nil {
		e = &sinkEvent{typ: ev.Type, object: ev.Data.Object, body: body, firstReceived: received}
		s.events[ev.ID] = e
	} else if !bytes.Equal(e.body, body) {
		s.violations = append(s.violations, fmt.Sprintf("event %s delivered with different payloads: %q, later %q", ev.ID, e.body, body))
	}
	e.received++
	kind := s.fault()
	var pause time.Duration
	switch kind {
	case sinkHang:
		pause = 500*time.Millisecond + time.Duration(s.rnd.Int64N(int64(2500*time.Millisecond)))
	case sinkTimeout:
		pause = deliveryTimeout + time.Second + time.Duration(s.rnd.Int64N(int64(time.Second)))
	}
	if kind != "" {
		s.injected[kind]++
	}
	status := http.StatusInternalServerError
	if s.rnd.IntN(2) == 0 {
		status = http.StatusServiceUnavailable
	}
	s.mu.Unlock()

	switch kind {
	case sinkError:
		http.Error(w, "chaos: injected error", status)
		return
	case sinkDrop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection without an answer
	case sinkHang, sinkTimeout:
		select {
		case <-time.After(pause):
		case <-s.closing:
			return
		}
	}
	start := time.Now()
	w.WriteHeader(http.StatusOK)
	if kind == sinkTimeout {
		return // too late: the attempt failed at the deliverer
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accepted++
	e.accepted++
	if e.firstAccepted.IsZero() {
		e.firstAccepted = start
	}
}

// hang serves the hanging tenant's endpoints: it answers nothing, until
// the deliverer gives up on the attempt (its timeout) or the sink closes.
func (s *webhookSink) hang(_ http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hung++
	s.mu.Unlock()
	select {
	case <-r.Context().Done():
	case <-s.closing:
	}
}

// register creates the sink's webhook endpoint (all events) through the
// workers, retrying while a worker is unreachable, and keeps its secret.
func (s *webhookSink) register(ctx context.Context, rt http.RoundTripper, apiKey string) (string, error) {
	body, _ := json.Marshal(map[string]any{"url": s.url, "events": []string{"*"}})
	hc := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	var last error
	for range 20 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://workers/v1/webhook_endpoints", bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				var ep struct{ ID, Secret string }
				if err := json.Unmarshal(b, &ep); err != nil || ep.Secret == "" {
					return "", fmt.Errorf("webhook endpoint: %q: %v", b, err)
				}
				s.setSecret(ep.Secret)
				return ep.ID, nil
			}
			last = fmt.Errorf("webhook endpoint: %d %s", resp.StatusCode, b)
			if resp.StatusCode < 500 {
				return "", last
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return "", errors.Join(errors.New("webhook endpoint: not created"), last)
}
