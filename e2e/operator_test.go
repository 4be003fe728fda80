package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The operator's levers against a running stack: bin/mockpsp, bin/api
// serve and bin/reaper as processes of their own, and the operator's
// commands (bin/api requests, bin/api webhooks) as an operator runs them.

// cli runs bin/api with args in env and returns its exit code and outputs.
func cli(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "api"), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, stdout.String(), stderr.String()
}

// call sends a request as the cluster's tenant.
func (c *cluster) call(t *testing.T, base, method, path, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// pitfall O5 "An operator's reason in a tenant's stored answer": a
// request that needs attention is retried by one operator and resolved by
// another, once refused (the PSP could not be asked) and then as failed,
// with a reason holding a ticket number and a person's name. The reason
// and the names stay with operators (requests show, the log); the tenant's
// stored 402 (replayed), its key view, its timeline, its charge and its
// events carry stable words and "by": "operator" only. The replayed 402
// carries no request_id: it is the stored bytes.
func TestOperatorReasonStaysWithOperators(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 0)
	env := c.env(map[string]string{"GIVE_UP_AFTER": "1ms", "RETRY_BASE": "1ms", "RETRY_MAX": "10ms"})
	addr := freeAddr(t)
	apiEnv := map[string]string{"API_ADDR": addr}
	for k, v := range env {
		apiEnv[k] = v
	}
	start(t, "api", apiEnv, "serve")
	base := "http://" + addr
	waitHealthy(t, base)
	const key, reason = "order-7", "TICKET-4711: Jane Roe at card-ops says chargeback risk"
	secrets := []string{"4711", "Jane", "card-ops", "alice", "bob"}

	putFaults(t, c.pspURL, `{"error_rate": 1}`)
	r, err := post(context.Background(), base, c.apiKey, key, visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
	require.Contains(t, string(r.body), "payment_unresolved")

	code, out, errOut := cli(t, env, "requests", "retry", "e2e", key, "--by", "bob")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "due now")
	r, err = post(context.Background(), base, c.apiKey, key, visa) // the one attempt made due, failing again
	require.NoError(t, err)
	require.Contains(t, string(r.body), "payment_unresolved")

	code, _, errOut = cli(t, env, "requests", "resolve", "e2e", key, "--as", "succeeded", "--reason", reason, "--by", "alice")
	require.Equal(t, 1, code, "the PSP cannot be asked: refused")
	require.Contains(t, errOut, "could not be asked")

	putFaults(t, c.pspURL, `{}`)
	code, out, errOut = cli(t, env, "requests", "resolve", "e2e", key, "--as", "failed", "--reason", reason, "--by", "alice")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "resolved as failed, stored answer 402")
	require.Contains(t, errOut, reason, "the log keeps the reason, for operators")

	// What the tenant can read.
	replay, err := post(context.Background(), base, c.apiKey, key, visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, replay.status)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	var p struct {
		Code, Detail, Charge string
		RequestID            *string `json:"request_id"`
	}
	require.NoError(t, json.Unmarshal(replay.body, &p))
	require.Equal(t, "payment_failed", p.Code)
	require.Equal(t, "The payment failed: settled as failed by an operator.", p.Detail)
	require.Nil(t, p.RequestID, "a stored answer is replayed byte for byte: no request's id")
	require.NotEmpty(t, replay.header.Get("X-Request-Id"))
	view := c.call(t, base, http.MethodGet, "/v1/idempotency_keys/"+key, "")
	tl := c.call(t, base, http.MethodGet, "/v1/idempotency_keys/"+key+"/timeline", "")
	charge := c.call(t, base, http.MethodGet, "/v1/charges/"+p.Charge, "")
	evs := c.call(t, base, http.MethodGet, "/v1/events?type=charge.failed", "")
	for _, read := range []response{view, tl, charge, evs} {
		require.Equal(t, http.StatusOK, read.status, "%s", read.body)
	}
	require.Contains(t, string(evs.body), p.Charge, "the charge.failed event is there")
	for _, read := range []response{replay, view, tl, charge, evs} {
		for _, s := range secrets {
			require.NotContains(t, string(read.body), s, "the tenant reads %q in %s", s, read.body)
		}
	}
	var timeline struct {
		Data []struct{ Kind, By, As string }
	}
	require.NoError(t, json.Unmarshal(tl.body, &timeline))
	var acts []string
	for _, e := range timeline.Data {
		if e.By == "operator" {
			acts = append(acts, strings.TrimSpace(e.Kind+" "+e.As))
		}
	}
	require.Equal(t, []string{"retried", "resolution_refused succeeded", "resolved failed"}, acts)

	// What operators read.
	code, out, errOut = cli(t, env, "requests", "show", "e2e", key)
	require.Zero(t, code, errOut)
	require.Contains(t, out, "retried by bob: next attempt due now")
	require.Contains(t, out, "resolution as succeeded by alice refused")
	require.Contains(t, out, "resolved as failed by alice")
	require.Contains(t, out, reason)
	code, out, errOut = cli(t, env, "requests", "show", "e2e", key, "--json")
	require.Zero(t, code, errOut)
	var shown struct {
		LockVersion int64 `json:"lock_version"`
		Resolutions []struct{ Reason, By string }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Positive(t, shown.LockVersion)
	require.Len(t, shown.Resolutions, 1)
	require.Equal(t, reason, shown.Resolutions[0].Reason)
}

// receiver is a webhook endpoint on this machine that answers 500 until
// told to answer 200, and keeps the event ids it answered 200.
type receiver struct {
	srv  *httptest.Server
	ok   atomic.Bool
	hits atomic.Int32
	mu   sync.Mutex
	got  []string
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.hits.Add(1)
		var ev struct{ ID string }
		_ = json.NewDecoder(r.Body).Decode(&ev)
		if !rc.ok.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		rc.mu.Lock()
		rc.got = append(rc.got, ev.ID)
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) received() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.got...)
}

// pitfall W13 "A redelivery only a hand-written UPDATE can make": an
// endpoint that failed until its delivery was given up gets the event again
// when the tenant asks (POST /v1/events/{id}/redeliver, 202), from the
// running reaper within seconds; the operator's bin/api webhooks
// redeliver sends an endpoint's window again; both are recorded (who,
// through what) and shown in the request's timeline; unknown ids are 404.
func TestRedeliverWebhooksEndToEnd(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 0)
	env := c.env(map[string]string{"WEBHOOK_ALLOW_PRIVATE": "1", "REAPER_INTERVAL": "100ms", "RETRY_BASE": "1h", "RETRY_MAX": "1h"})
	addr := freeAddr(t)
	apiEnv := map[string]string{"API_ADDR": addr}
	for k, v := range env {
		apiEnv[k] = v
	}
	start(t, "api", apiEnv, "serve")
	base := "http://" + addr
	waitHealthy(t, base)
	start(t, "reaper", env)
	rc := newReceiver(t)

	created := c.call(t, base, http.MethodPost, "/v1/webhook_endpoints", `{"url": "`+rc.srv.URL+`/hooks", "events": ["charge.authorized"]}`)
	require.Equal(t, http.StatusCreated, created.status, "%s", created.body)
	var ep struct{ ID string }
	require.NoError(t, json.Unmarshal(created.body, &ep))
	r, err := post(context.Background(), base, c.apiKey, "paid-1", visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.status)
	var list struct{ Data []struct{ ID string } }
	require.NoError(t, json.Unmarshal(c.call(t, base, http.MethodGet, "/v1/events?type=charge.authorized", "").body, &list))
	require.Len(t, list.Data, 1)
	evID := list.Data[0].ID
	require.Eventually(t, func() bool { return rc.hits.Load() >= 1 }, 10*time.Second, 20*time.Millisecond, "the first attempt")

	// Three days of 500s later the delivery is given up (its next retry
	// is an hour away, RETRY_BASE): its state is set as the deliverer
	// would set it, once the first attempt is recorded.
	require.Eventually(t, func() bool {
		tag, err := c.pool.Exec(context.Background(), `UPDATE webhook_deliveries SET state = 'failed', finished_at = now()
 WHERE event_id = $1 AND attempts >= 1 AND locked_until IS NULL AND state = 'pending'`, evID)
		return err == nil && tag.RowsAffected() == 1
	}, 10*time.Second, 20*time.Millisecond)
	rc.ok.Store(true)

	red := c.call(t, base, http.MethodPost, "/v1/events/"+evID+"/redeliver", "")
	require.Equal(t, http.StatusAccepted, red.status, "%s", red.body)
	require.Contains(t, string(red.body), ep.ID)
	require.Eventually(t, func() bool { return len(rc.received()) == 1 }, 10*time.Second, 20*time.Millisecond,
		"the tenant's redelivery reached the endpoint")
	require.Equal(t, []string{evID}, rc.received())
	require.Equal(t, http.StatusNotFound, c.call(t, base, http.MethodPost, "/v1/events/evt_0661d5a3c9e1f0b2a4c6e8d0f1a3b5/redeliver", "").status)
	require.Equal(t, http.StatusNotFound, c.call(t, base, http.MethodPost, "/v1/events/"+evID+"/redeliver", `{"endpoint": "we_0000"}`).status)

	code, out, errOut := cli(t, env, "webhooks", "redeliver", "--tenant", "e2e", "--endpoint", ep.ID, "--since", "1h", "--by", "carol")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "a new attempt is due now for 1 deliveries")
	require.Eventually(t, func() bool { return len(rc.received()) == 2 }, 10*time.Second, 20*time.Millisecond,
		"the operator's redelivery reached the endpoint")

	rows, err := c.pool.Query(context.Background(), `SELECT requested_by || ' ' || via || ' ' || deliveries FROM webhook_redeliveries ORDER BY id`)
	require.NoError(t, err)
	var audit []string
	for rows.Next() {
		var a string
		require.NoError(t, rows.Scan(&a))
		audit = append(audit, a)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"tenant api 1", "carol cli 1"}, audit)

	code, out, errOut = cli(t, env, "requests", "show", "e2e", "paid-1")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "webhook redelivery of "+evID+" to every endpoint it was owed to asked by tenant (api): 1 made due")
}
