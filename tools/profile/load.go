package profile

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// chargeBody is the new charge every request asks for: a card the mock
// PSP authorizes, so each charge takes the whole path (claim, pending
// charge, attempt, PSP call, authorization, stored answer, event).
const chargeBody = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

// drive sends n new charges (keys prefix-0 … prefix-(n-1)) from clients
// closed-loop workers and returns how many were answered 201 and how many
// were not (another status or no answer).
func drive(ctx context.Context, base, apiKey, prefix string, n, clients int) (ok, failed int, elapsed time.Duration) {
	hc := newClient(clients)
	var next, okN, failN atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if post(ctx, hc, base, apiKey, fmt.Sprintf("%s-%d", prefix, i)) {
					okN.Add(1)
				} else {
					failN.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(okN.Load()), int(failN.Load()), time.Since(start)
}

func post(ctx context.Context, hc *http.Client, base, apiKey, key string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/charges", bytes.NewReader([]byte(chargeBody)))
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusCreated
}

// newClient is an HTTP client that keeps a connection per client.
func newClient(clients int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
}
