package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testsignal"
)

// mockProcess is bin/mockpsp running as a process of its own.
type mockProcess struct {
	url string
	mu  sync.Mutex
	log []map[string]any // its JSON log lines
}

// startProcess runs the binary at bin with env on a free port, and waits
// until its "listening" line tells the address.
func startProcess(t *testing.T, bin string, env map[string]string) *mockProcess {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "MOCKPSP_ADDR=127.0.0.1:0")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	p := &mockProcess{}
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			p.mu.Lock()
			p.log = append(p.log, line)
			p.mu.Unlock()
			if line["msg"] == "mockpsp listening" {
				addr <- line["addr"].(string)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		_ = cmd.Wait()
	})
	select {
	case a := <-addr:
		p.url = "http://" + a
	case <-done:
		require.FailNow(t, "mockpsp exited before listening")
	case <-time.After(20 * time.Second):
		require.FailNow(t, "mockpsp did not start listening")
	}
	return p
}

func (p *mockProcess) lines() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]map[string]any(nil), p.log...)
}

func (p *mockProcess) get(t *testing.T, path string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.url+path, nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

func (p *mockProcess) client(t *testing.T) *psp.Client {
	t.Helper()
	tr := psp.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	c, err := psp.NewClient(psp.ClientConfig{
		BaseURL: p.url, HTTPClient: psp.NewHTTPClient(tr),
		InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
	})
	require.NoError(t, err)
	return c
}

type requestLog struct {
	Data []struct {
		Method         string `json:"method"`
		Path           string `json:"path"`
		IdempotencyKey string `json:"idempotency_key"`
		Reference      string `json:"reference"`
		Status         int    `json:"status"`
	} `json:"data"`
}

type ledger struct {
	Data []mockpsp.LedgerEntry `json:"data"`
}

// TestMockProcess runs bin/mockpsp as its own process, configured only by
// its environment, and drives it with the psp client across the process
// boundary, as the api and the reaper do.
func TestMockProcess(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "mockpsp")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	visa := func(i int) psp.AuthorizeRequest {
		return psp.AuthorizeRequest{
			IdempotencyKey: fmt.Sprintf("ch_%d:authorize", i), Reference: fmt.Sprintf("ch_%d", i),
			Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa",
		}
	}

	// MOCKPSP_KEY_TTL: after it, the same key authorizes again (what a
	// blind resend costs), while a lookup still finds the first.
	t.Run("ForgetsKeyAfterTTL", func(t *testing.T) {
		t.Parallel()
		// Long enough that a loaded machine still replays within it.
		const ttl = 2 * time.Second
		p := startProcess(t, bin, map[string]string{"MOCKPSP_KEY_TTL": ttl.String()})
		c := p.client(t)
		req := visa(1)
		req.FirstSend = true
		// The mock's TTL runs from when it made the authorization, which
		// is after this.
		sent := time.Now()
		first, err := c.AuthorizeOnce(t.Context(), req)
		require.NoError(t, err)
		again, err := c.AuthorizeOnce(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, first.Authorization.ID, again.Authorization.ID, "remembered")

		// Resent until forgotten: a replay until the TTL, then a second
		// authorization.
		var blind psp.Outcome
		testsignal.WaitFor(t, 10*time.Second, func() bool {
			blind, err = c.AuthorizeOnce(t.Context(), req)
			require.NoError(t, err)
			return blind.Authorization.ID != first.Authorization.ID
		}, "the key was never forgotten")
		require.GreaterOrEqual(t, time.Since(sent), ttl, "forgotten before its TTL")

		found, err := c.Lookup(t.Context(), "ch_1")
		require.NoError(t, err)
		require.Len(t, found, 2)
		require.Equal(t, first.Authorization.ID, found[0].ID)
	})

	// Lost answers, failed lookups, outages and refusals at once: the
	// client never sends an authorization twice without a lookup between
	// (read from the mock's request log), and never authorizes a charge
	// twice although the mock forgets keys quickly.
	t.Run("LookupBeforeResend", func(t *testing.T) {
		t.Parallel()
		p := startProcess(t, bin, map[string]string{
			"MOCKPSP_NAME": "primary", "MOCKPSP_KEY_TTL": "50ms",
			"MOCKPSP_DROP_RATE": "0.4", "MOCKPSP_ERROR_RATE": "0.2",
			"MOCKPSP_LOOKUP_ERROR_RATE": "0.3", "MOCKPSP_REJECT_RATE": "0.1",
		})
		c := p.client(t)
		const charges = 30
		var wg sync.WaitGroup
		for i := range charges {
			wg.Go(func() {
				// Each charge is retried, as the state machine would on
				// its schedule, until its outcome is known.
				req := visa(i)
				req.FirstSend = true
				for range 20 {
					out, _ := c.AuthorizeOutcome(t.Context(), req)
					if out.Class == psp.ClassSuccess || out.Class == psp.ClassFinalFailure {
						return
					}
					req.FirstSend = false
					// sleep: a resend comes after the mock's 50 ms key TTL has run out by its own clock.
					time.Sleep(60 * time.Millisecond)
				}
			})
		}
		wg.Wait()

		var log requestLog
		p.get(t, "/_admin/requests", &log)
		sentSinceLookup := map[string]bool{}
		var drops int
		for i, r := range log.Data {
			switch {
			case r.Method == http.MethodPost:
				require.False(t, sentSinceLookup[r.Reference], "request %d: %s sent again without a lookup", i, r.Reference)
				sentSinceLookup[r.Reference] = true
				if r.Status == 0 {
					drops++
				}
			case r.Method == http.MethodGet && r.Status == http.StatusOK:
				sentSinceLookup[r.Reference] = false
			}
		}
		require.Positive(t, drops)

		var l ledger
		p.get(t, "/_admin/authorizations", &l)
		perCharge := map[string]int{}
		for _, a := range l.Data {
			perCharge[a.Reference]++
		}
		for ref, n := range perCharge {
			require.Equal(t, 1, n, "%s authorized %d times", ref, n)
		}

		var faults struct {
			Name     string           `json:"name"`
			Injected mockpsp.Injected `json:"injected"`
		}
		p.get(t, "/_admin/faults", &faults)
		require.Equal(t, "primary", faults.Name)
		require.Positive(t, faults.Injected.Drops)
		require.Positive(t, faults.Injected.LookupErrors)

		for _, line := range p.lines() {
			require.Equal(t, "primary", line["name"], "every log line names the mock: %v", line)
		}
		require.NotEmpty(t, p.lines())
		require.True(t, strings.HasPrefix(p.url, "http://127.0.0.1:"))
	})
}
