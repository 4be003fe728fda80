package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/pgbouncer"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// poolerCluster is a mock PSP, api processes and a reaper that reach
// PostgreSQL through a PgBouncer in transaction mode
// (DATABASE_POOLER=transaction), with or without a direct connection for
// LISTEN (DATABASE_DIRECT_URL).
type poolerCluster struct {
	*cluster
	pooled string // DATABASE_URL: through the pooler
	direct string // DATABASE_DIRECT_URL, "" for a pooler-only deployment
	procs  []*proc
}

func newPoolerCluster(t *testing.T, withDirect bool) *poolerCluster {
	t.Helper()
	dbURL := testdb.NewURL(t)
	b := pgbouncer.ForTest(t, pgbouncer.Config{Server: dbURL, PoolSize: 6})
	pspAddr := freeAddr(t)
	start(t, "mockpsp", map[string]string{"MOCKPSP_ADDR": pspAddr})
	c := &poolerCluster{
		cluster: &cluster{t: t, dbURL: dbURL, pool: testdb.Pool(t, dbURL, time.Time{}), pspURL: "http://" + pspAddr},
		pooled:  b.URL(dbURL),
	}
	if withDirect {
		c.direct = dbURL
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get(c.pspURL + "/_admin/authorizations")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	// migrate goes to the server itself, and makes phasepay's settings
	// the database's defaults: the pooler passes no startup parameter on.
	runCmd(t, "api", c.penv(map[string]string{"DATABASE_DIRECT_URL": dbURL}), "migrate")
	c.apiKey = runCmd(t, "api", c.penv(nil), "keys", "create", "--tenant", "pooled")
	return c
}

// penv is the environment of a process behind the pooler.
func (c *poolerCluster) penv(extra map[string]string) map[string]string {
	env := map[string]string{
		"DATABASE_URL":          c.pooled,
		"DATABASE_POOLER":       "transaction",
		"DATABASE_DIRECT_URL":   c.direct,
		"PSP_URL":               c.pspURL,
		"LEASE":                 "2s",
		"REAPER_INTERVAL":       "200ms",
		"WEBHOOK_ALLOW_PRIVATE": "1",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func (c *poolerCluster) startAPI() (*proc, string) {
	addr := freeAddr(c.t)
	p := start(c.t, "api", c.penv(map[string]string{"API_ADDR": addr}), "serve")
	c.procs = append(c.procs, p)
	base := "http://" + addr
	waitHealthy(c.t, base)
	return p, base
}

func (c *poolerCluster) startReaper() *proc {
	p := start(c.t, "reaper", c.penv(nil))
	c.procs = append(c.procs, p)
	return p
}

// requireNoServerErrors checks every process's log: no 500 and no
// ERROR line, whatever the pooler did.
func (c *poolerCluster) requireNoServerErrors() {
	c.t.Helper()
	for _, p := range c.procs {
		for _, line := range strings.Split(p.out.String(), "\n") {
			require.NotContains(c.t, line, `"level":"ERROR"`, "%s", p.name)
			require.NotContains(c.t, line, `"status":500`, "%s", p.name)
		}
	}
}

func (c *poolerCluster) setFaults(faults string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPut, c.pspURL+"/_admin/faults", strings.NewReader(faults))
	require.NoError(c.t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	resp.Body.Close()
	require.Less(c.t, resp.StatusCode, 300)
}

// call sends a request with the cluster's key.
func (c *poolerCluster) call(base, method, path, idemKey, body string) response {
	c.t.Helper()
	return c.callAs(c.apiKey, base, method, path, idemKey, body)
}

func (c *poolerCluster) callAs(apiKey, base, method, path, idemKey, body string) response {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// Behind a transaction pooler, with a direct connection for LISTEN and
// without one: claims, concurrent duplicates, a takeover by the reaper,
// capture and refund, a key revocation refused within 1 s, and a webhook's
// first attempt within 2 s plus one REAPER_INTERVAL; no 500 anywhere.
// Today's binaries, behind the same pooler, answered 500 ("prepared
// statement … does not exist"), refused to connect with their timeouts as
// startup parameters, and kept a revoked key working for the cache's 30 s
// (their LISTEN went through the pooler and heard nothing).
func TestBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	for name, withDirect := range map[string]bool{"listen on a direct connection": true, "pooler only, polling": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newPoolerCluster(t, withDirect)
			apiA, baseA := c.startAPI()
			_, baseB := c.startAPI()

			t.Run("claims", func(t *testing.T) { c.claims(t, baseA, baseB) })
			t.Run("capture and refund", func(t *testing.T) { c.captureRefund(t, baseB) })
			t.Run("revocation within 1s", func(t *testing.T) { c.revocation(t, baseA, baseB) })
			c.startReaper()
			t.Run("webhook within 2s plus REAPER_INTERVAL", func(t *testing.T) { c.webhook(t, baseB) })
			t.Run("takeover by the reaper", func(t *testing.T) { c.takeover(t, apiA, baseA, baseB) })
			c.requireNoServerErrors()
		})
	}
}

func (c *poolerCluster) claims(t *testing.T, baseA, baseB string) {
	// New keys on both processes, each replayed byte for byte.
	for i := range 10 {
		key := fmt.Sprintf("claim-%d", i)
		first := c.call([]string{baseA, baseB}[i%2], http.MethodPost, "/v1/charges", key, visa)
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
		again := c.call([]string{baseB, baseA}[i%2], http.MethodPost, "/v1/charges", key, visa)
		require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
		require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		require.Equal(t, string(first.body), string(again.body))
	}
	// Concurrent duplicates: one charge.
	var wg sync.WaitGroup
	type result struct {
		resp response
		err  error
	}
	results := make(chan result, 8)
	for i := range 8 {
		wg.Go(func() {
			resp, err := post(context.Background(), []string{baseA, baseB}[i%2], c.apiKey, "dup", visa)
			results <- result{resp, err}
		})
	}
	wg.Wait()
	close(results)
	for r := range results {
		require.NoError(t, r.err)
		require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, r.resp.status, "%s", r.resp.body)
	}
	require.Len(t, c.charges("dup"), 1)
}

func (c *poolerCluster) captureRefund(t *testing.T, base string) {
	r := c.call(base, http.MethodPost, "/v1/charges", "to-capture", visa)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	var ch struct{ ID string }
	require.NoError(t, json.Unmarshal(r.body, &ch))
	r = c.call(base, http.MethodPost, "/v1/charges/"+ch.ID+"/capture", "capture-1", `{}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = c.call(base, http.MethodPost, "/v1/refunds", "refund-1", `{"charge":"`+ch.ID+`","amount":600}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = c.call(base, http.MethodPost, "/v1/refunds", "refund-2", `{"charge":"`+ch.ID+`","amount":600}`)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	require.Contains(t, string(r.body), "amount_too_large")
	r = c.call(base, http.MethodGet, "/v1/charges/"+ch.ID, "", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, string(r.body), `"amount_refunded":600`)
}

func (c *poolerCluster) revocation(t *testing.T, bases ...string) {
	secret := runCmd(t, "api", c.penv(nil), "keys", "create", "--tenant", "revoked")
	for _, base := range bases {
		for range 3 { // cached by now
			require.Equal(t, http.StatusOK, c.callAs(secret, base, http.MethodGet, "/v1/charges", "", "").status)
		}
	}
	var key struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(runCmd(t, "api", c.penv(nil), "keys", "list", "--tenant", "revoked", "--json")), &key))
	start := time.Now()
	runCmd(t, "api", c.penv(nil), "keys", "revoke", key.ID)
	for _, base := range bases {
		require.Eventually(t, func() bool {
			return c.callAs(secret, base, http.MethodGet, "/v1/charges", "", "").status == http.StatusUnauthorized
		}, 2*time.Second, 20*time.Millisecond)
	}
	require.Less(t, time.Since(start), time.Second+200*time.Millisecond, "every api refuses a revoked key within 1 s of the revoke command")
}

func (c *poolerCluster) webhook(t *testing.T, base string) {
	received := make(chan time.Time, 16)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received <- time.Now()
	}))
	t.Cleanup(sink.Close)
	r := c.call(base, http.MethodPost, "/v1/webhook_endpoints", "", `{"url":"`+sink.URL+`/hook","events":["charge.authorized"]}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	for i := range 3 {
		sent := time.Now()
		r = c.call(base, http.MethodPost, "/v1/charges", fmt.Sprintf("hooked-%d", i), visa)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		select {
		case at := <-received:
			require.Less(t, at.Sub(sent), 2*time.Second+200*time.Millisecond, "first attempt within 2 s plus one REAPER_INTERVAL")
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
		}
	}
}

func (c *poolerCluster) takeover(t *testing.T, api *proc, base, other string) {
	c.setFaults(`{"latency_ms": 1500}`)
	before := len(ledger(t, c.pspURL))
	go post(context.Background(), base, c.apiKey, "taken-over", visa) //nolint:errcheck // its worker dies under it
	c.waitForAuthorization(before + 1)
	api.kill()
	c.setFaults(`{}`)
	require.Eventually(t, func() bool {
		state, _, _ := c.keyState("taken-over")
		return state == "done"
	}, 20*time.Second, 50*time.Millisecond, "the reaper takes the key over and finishes it")
	ids := c.charges("taken-over")
	require.Len(t, ids, 1)
	var auths int
	for _, e := range ledger(t, c.pspURL) {
		if e.Reference == ids[0] {
			auths++
		}
	}
	require.Equal(t, 1, auths)
	resp, err := post(context.Background(), other, c.apiKey, "taken-over", visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	require.Equal(t, "true", resp.header.Get("Idempotent-Replayed"))
	require.True(t, bytes.Contains(resp.body, []byte(ids[0])))
}
