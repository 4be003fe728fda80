package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/phasepay/phasepay/client"
)

// ListenAddrDefault is where `chargectl listen` receives webhooks: a free
// port on the loopback interface.
const ListenAddrDefault = "127.0.0.1:0"

// listen is `chargectl listen`: a local webhook receiver for development.
// It listens on ListenAddr, registers itself as a webhook endpoint of the
// tenant (the api must run with WEBHOOK_ALLOW_PRIVATE=1 to accept a
// loopback URL), verifies each delivery's Phasepay-Signature with the
// secret it got (client.VerifyWebhook) and prints each event's body, one
// line each, as it arrives. A delivery with a bad signature is answered
// 400 and reported on stderr. On SIGINT or SIGTERM it deletes the endpoint
// and exits 0.
func (m *Main) listen(ctx context.Context) error {
	ln, err := net.Listen("tcp", m.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	url := "http://" + ln.Addr().String() + "/"

	api := m.HTTPClient
	if api == nil {
		api = &http.Client{Timeout: 30 * time.Second}
	}
	events := strings.Split(m.ListenEvents, ",")
	reqBody, _ := json.Marshal(map[string]any{"url": url, "events": events})
	var ep struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := m.callAPI(ctx, api, http.MethodPost, "/v1/webhook_endpoints", reqBody, &ep); err != nil {
		return fmt.Errorf("register %s: %w", url, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.callAPI(ctx, api, http.MethodDelete, "/v1/webhook_endpoints/"+ep.ID, nil, nil); err != nil {
			fmt.Fprintf(m.Stderr, "chargectl: could not delete webhook endpoint %s: %s\n", ep.ID, oneLine(err.Error()))
		}
	}()
	fmt.Fprintf(m.Stderr, "chargectl: listening on %s as webhook endpoint %s for %s; Ctrl-C to stop\n", url, ep.ID, m.ListenEvents)

	var mu sync.Mutex // one event per line, whole
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body", http.StatusBadRequest)
			return
		}
		ev, err := client.VerifyWebhook(body, r.Header.Get(client.WebhookSignatureHeader), ep.Secret, nil)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			fmt.Fprintf(m.Stderr, "chargectl: refused a delivery: %s\n", oneLine(err.Error()))
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		fmt.Fprintln(m.Stdout, string(bytes.TrimSpace(body)))
		if m.ListenReceived != nil {
			m.ListenReceived(ev)
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	if m.ListenReady != nil {
		m.ListenReady(url)
	}
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return err
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// callAPI sends one request to the api and decodes a 2xx answer into out
// (if not nil); any other answer is an error with the problem's detail.
func (m *Main) callAPI(ctx context.Context, c *http.Client, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(m.APIURL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+m.APIKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var p struct{ Code, Detail string }
		_ = json.Unmarshal(b, &p)
		return fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, p.Code, p.Detail)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return errors.Join(fmt.Errorf("%s %s: answer", method, path), err)
	}
	return nil
}
