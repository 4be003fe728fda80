package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/client"
	"github.com/phasepay/phasepay/tools/chaos/history"
	"github.com/phasepay/phasepay/tools/procs"
)

// probeReapers shows that the reapers still drive requests after the last
// database restart, which nothing else in a run does: every intent's own
// client retries it to the end, so a reaper that stayed up but stopped
// working would go unnoticed. An extra api process crashes (chaos crash
// point after_claim, probability 1) right after claiming one new request,
// which no client retries; a reaper must finish it within a few leases,
// and its answer must then replay from a worker. The probe's charge and
// PSP authorization are checked by verify with every other one.
//
// It returns how long the reapers took from the crash to the finished key,
// and the violations it found; an error only when the probe itself could
// not be set up.
func probeReapers(ctx context.Context, cfg *Config, apiBin string, env map[string]string, dbURL, apiKey string,
	pool *pgxpool.Pool, workers http.RoundTripper, log *history.Log) (time.Duration, []string, error) {
	addr, err := procs.FreeAddr()
	if err != nil {
		return 0, nil, err
	}
	penv := map[string]string{
		"API_ADDR":             addr,
		"DATABASE_URL":         procs.WithApplicationName(dbURL, "api-probe"),
		"PHASEPAY_CHAOS_CRASH": "after_claim=1",
	}
	for k, v := range env {
		penv[k] = v
	}
	probe := procs.New("api-probe", apiBin, penv, "serve")
	if err := probe.Start(); err != nil {
		return 0, nil, err
	}
	defer probe.Stop(5 * time.Second)
	if err := procs.WaitUp(ctx, "http://"+addr+"/healthz"); err != nil {
		return 0, nil, fmt.Errorf("reaper probe: %w\n%s", err, probe.LogText())
	}

	key := fmt.Sprintf("chaos-%d-reaper-probe", cfg.Seed)
	params := client.ChargeParams{Amount: 4242, Currency: "usd", PaymentMethod: "pm_card_visa"}
	body, err := json.Marshal(params)
	if err != nil {
		return 0, nil, err
	}
	post := func(rt http.RoundTripper, base string) (*http.Response, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/charges", bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Transport: rt, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	// The probe dies mid-request: no answer is the expected outcome.
	if resp, b, err := post(log.Transport(http.DefaultTransport), "http://"+addr); err == nil {
		return 0, []string{fmt.Sprintf("reaper probe: inconclusive, the probe api answered %d %q instead of crashing after the claim", resp.StatusCode, b)}, nil
	}
	select {
	case <-probe.Done():
	case <-time.After(10 * time.Second):
		return 0, []string{"reaper probe: inconclusive, the probe api did not crash after the claim"}, nil
	}
	if !strings.Contains(probe.LogText(), `"point":"after_claim"`) {
		return 0, []string{"reaper probe: inconclusive, the probe api exited without crashing at after_claim: " + procs.LastLines(probe.LogText(), 3)}, nil
	}

	// The abandoned key is the reapers' alone now.
	crashed := time.Now()
	deadline := time.Now().Add(3*cfg.Lease + 20*time.Second)
	var state string
	for {
		err := pool.QueryRow(ctx, `SELECT state FROM idempotency_keys WHERE key = $1`, key).Scan(&state)
		if err == nil && state != "started" {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, []string{fmt.Sprintf("reaper probe: key %s, abandoned after the last database restart, still %q (%v) %s later: no reaper drives requests any more",
				key, state, err, 3*cfg.Lease+20*time.Second)}, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(crashed)
	resp, got, err := post(workers, "http://replay")
	if err != nil {
		return 0, []string{fmt.Sprintf("reaper probe: replay of %s: %v", key, err)}, nil
	}
	// 402: the PSP's reject_rate refused it for good, also an end.
	final := resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusPaymentRequired
	if !final || resp.Header.Get("Idempotent-Replayed") != "true" {
		return 0, []string{fmt.Sprintf("reaper probe: replay of %s, finished by a reaper: got %d %q (replayed=%q), want the stored 201 or 402",
			key, resp.StatusCode, got, resp.Header.Get("Idempotent-Replayed"))}, nil
	}
	return took, nil, nil
}
