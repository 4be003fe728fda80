package soak

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

// endpoints are the webhook endpoints the receiver serves, each registered
// for every event ("*"), and the share of deliveries each answers 503: the
// deliverers retry those on their schedule, so the backlog always holds a
// few retries, as it does with real receivers.
var endpoints = []struct {
	path     string
	failRate float64
}{
	{"/hooks/steady", 0.01},
	{"/hooks/flaky", 0.05},
}

// WebhookStats is what the receiver saw.
type WebhookStats struct {
	// Received counts every delivery, Accepted those answered 2xx,
	// Failed those answered 503 on purpose.
	Received int `json:"received"`
	Accepted int `json:"accepted"`
	Failed   int `json:"failed_on_purpose"`
	// BadSignatures counts deliveries whose Phasepay-Signature did not
	// verify: a failure of the run.
	BadSignatures int `json:"bad_signatures"`
}

// receiver is the webhook receiver: an HTTP server of the harness's own
// that verifies each delivery's signature and answers 2xx, but for a few
// failures, and times each accepted delivery from its event's created_at.
// Unlike the chaos harness's sink it keeps no event: an hour of them would
// be the harness's own leak.
type receiver struct {
	srv *http.Server
	url string

	mu      sync.Mutex
	rnd     *rand.Rand
	secrets map[string]string // by path
	lat     []time.Duration
	stats   WebhookStats
}

func startReceiver(seed uint64) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{url: "http://" + ln.Addr().String(), rnd: rand.New(rand.NewPCG(seed, 0x686f6f6b)), secrets: map[string]string{}}
	mux := http.NewServeMux()
	for _, e := range endpoints {
		mux.HandleFunc("POST "+e.path, func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, e.path, e.failRate) })
	}
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at close
	return r, nil
}

func (r *receiver) close() { _ = r.srv.Close() }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request, path string, failRate float64) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 2<<20))
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Received++
	ev, err := client.VerifyWebhook(body, req.Header.Get(client.WebhookSignatureHeader), r.secrets[path], nil)
	if err != nil {
		r.stats.BadSignatures++
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	if r.rnd.Float64() < failRate {
		r.stats.Failed++
		http.Error(w, "soak: failing on purpose", http.StatusServiceUnavailable)
		return
	}
	r.stats.Accepted++
	r.lat = append(r.lat, time.Since(ev.CreatedAt))
	w.WriteHeader(http.StatusNoContent)
}

// latencies returns the accepted deliveries' latencies since the last call.
func (r *receiver) latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.lat
	r.lat = nil
	return out
}

func (r *receiver) snapshot() WebhookStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// register creates every endpoint through the workers, retrying while a
// worker is unreachable, and keeps their secrets.
func (r *receiver) register(ctx context.Context, rt http.RoundTripper, apiKey string) error {
	hc := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	for _, e := range endpoints {
		secret, err := createEndpoint(ctx, hc, apiKey, r.url+e.path)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.secrets[e.path] = secret
		r.mu.Unlock()
	}
	return nil
}

// createEndpoint registers url for every event and returns its secret.
func createEndpoint(ctx context.Context, hc *http.Client, apiKey, url string) (string, error) {
	body, _ := json.Marshal(map[string]any{"url": url, "events": []string{"*"}})
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
				var ep struct{ Secret string }
				if err := json.Unmarshal(b, &ep); err != nil || ep.Secret == "" {
					return "", fmt.Errorf("webhook endpoint %s: %q: %v", url, b, err)
				}
				return ep.Secret, nil
			}
			last = fmt.Errorf("webhook endpoint %s: %d %s", url, resp.StatusCode, b)
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
	return "", errors.Join(errors.New("webhook endpoint not created"), last)
}
