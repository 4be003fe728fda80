package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/api/apitest"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Every server, pool, client connection and PSP call a test starts is
// stopped by its cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// validator is built once: loading and validating the OpenAPI document is
// the slow part, and a Validator is safe for concurrent use.
var validator = sync.OnceValues(apitest.New)

// testBundle is one running API server on a database of its own.
type testBundle struct {
	// url is the server's base URL, http://127.0.0.1:PORT.
	url string
	// dbURL is the server's database.
	dbURL string
	// key is a secret API key of tenant, sent by do unless a test overrides
	// the Authorization header.
	key    string
	tenant tenants.Tenant
	// psp is the server's embedded mock PSP: its faults and its ledger.
	psp *mockpsp.Mock
	// pool is the test's own pool on the server's database, for direct
	// assertions; it never shares a connection with the server.
	pool *pgxpool.Pool

	client    *http.Client
	validator *apitest.Validator
	// logs is the server's JSON log.
	logs *lockedBuffer
	// stop cancels Run and returns its result; safe to call twice.
	stop func() error
}

// setup starts Main in-process on a fresh database with the embedded mock
// PSP, creates tenant "acme" with a key, and stops the server (requiring
// Run to return nil) when the test ends. Each opt may change Main (its
// Config, a crash hook) before it runs.
func setup(t *testing.T, opts ...func(*Main)) *testBundle {
	t.Helper()
	v, err := validator()
	require.NoError(t, err)

	dbURL := testdb.NewURL(t)
	pool := testdb.Pool(t, dbURL, time.Time{})

	env := map[string]string{
		"DATABASE_URL": dbURL,
		"API_ADDR":     "127.0.0.1:0",
		"MOCKPSP_ADDR": "127.0.0.1:0",
		"PSP_URL":      PSPEmbedded,
	}
	cfg, err := ParseEnv(func(k string) string { return env[k] })
	require.NoError(t, err)

	logs := &lockedBuffer{}
	m := &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	for _, opt := range opts {
		opt(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- m.Run(ctx) }()

	var (
		stopOnce sync.Once
		stopErr  error
	)
	stop := func() error {
		stopOnce.Do(func() {
			cancel()
			select {
			case stopErr = <-runErr:
			case <-time.After(ShutdownTimeout + 10*time.Second):
				stopErr = fmt.Errorf("Run did not return within %s of its context ending", ShutdownTimeout+10*time.Second)
			}
		})
		return stopErr
	}
	t.Cleanup(func() {
		require.NoError(t, stop(), "Run")
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})

	addr := waitAddr(t, m, runErr)
	mock := m.MockPSP()
	require.NotNil(t, mock, "PSP_URL=embedded: Run must start the embedded mock PSP")

	tenant, key := newTenantKey(t, pool, "acme")

	// A transport of the test's own, so that its idle connections are
	// closed with it and goleak sees no stray readLoop.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)

	return &testBundle{
		url:       "http://" + addr,
		dbURL:     dbURL,
		key:       key,
		tenant:    tenant,
		psp:       mock,
		pool:      pool,
		client:    client,
		validator: v,
		logs:      logs,
		stop:      stop,
	}
}

// waitAddr returns the address Run listens on, failing at once if Run
// returns first (Addr alone would wait forever).
func waitAddr(t *testing.T, m *Main, runErr <-chan error) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		addr string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		addr, err := m.Addr(ctx)
		got <- result{addr, err}
	}()
	select {
	case r := <-got:
		require.NoError(t, r.err, "server did not start listening")
		return r.addr
	case err := <-runErr:
		cancel()
		<-got
		require.FailNow(t, "Run returned before listening", "%v", err)
		return ""
	}
}

// newTenantKey creates tenant name (if new) and returns it with a new secret
// key, committed.
func newTenantKey(t *testing.T, pool *pgxpool.Pool, name string) (tenants.Tenant, string) {
	t.Helper()
	var (
		tenant tenants.Tenant
		secret string
	)
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		tenant, secret, err = tenants.CreateKey(t.Context(), tx, name)
		return err
	})
	require.NoError(t, err)
	return tenant, secret
}

// response is one HTTP exchange as the client saw it.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request and validates the exchange against api/openapi.yaml,
// failing the test if it does not conform. Unless headers says otherwise it
// sends Authorization: Bearer b.key, and Content-Type: application/json
// with a body; a header given as "" is left out.
func (b *testBundle) do(t *testing.T, method, path string, headers map[string]string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	r, err := b.send(t.Context(), method, path, headers, body, true)
	require.NoError(t, err)
	return r.status, r.header, r.body
}

// doUnchecked is do without the OpenAPI check, for the two exchanges the
// document cannot describe: an unknown route and a method it does not
// list.
func (b *testBundle) doUnchecked(t *testing.T, method, path string, headers map[string]string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	r, err := b.send(t.Context(), method, path, headers, body, false)
	require.NoError(t, err)
	return r.status, r.header, r.body
}

// post sends POST /v1/charges with an Idempotency-Key (none if key is "").
func (b *testBundle) post(t *testing.T, key, body string) response {
	t.Helper()
	status, h, respBody := b.do(t, http.MethodPost, "/v1/charges", map[string]string{"Idempotency-Key": key}, []byte(body))
	return response{status, h, respBody}
}

// asyncResult is a request sent from another goroutine.
type asyncResult struct {
	response
	err error
	// elapsed is how long the request took.
	elapsed time.Duration
}

// postAsync sends POST /v1/charges from a goroutine; the result, checked
// against the OpenAPI document, arrives on the channel.
func (b *testBundle) postAsync(t *testing.T, key, body string) <-chan asyncResult {
	t.Helper()
	out := make(chan asyncResult, 1)
	ctx := t.Context()
	go func() {
		start := time.Now()
		r, err := b.send(ctx, http.MethodPost, "/v1/charges", map[string]string{"Idempotency-Key": key}, []byte(body), true)
		out <- asyncResult{response: r, err: err, elapsed: time.Since(start)}
	}()
	return out
}

// await returns an async result, failing the test if the request failed or
// did not finish in time.
func await(t *testing.T, ch <-chan asyncResult) asyncResult {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r
	case <-time.After(45 * time.Second):
		require.FailNow(t, "request did not finish")
		return asyncResult{}
	}
}

// send is do for any goroutine: it reports failures instead of failing the
// test.
func (b *testBundle) send(ctx context.Context, method, path string, headers map[string]string, body []byte, check bool) (response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.url+path, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+b.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: respBody}
	if check {
		if err := b.validator.Check(req, body, resp, respBody); err != nil {
			return r, fmt.Errorf("%w\nbody: %s", err, respBody)
		}
	}
	return r, nil
}

// waitAuthorizing waits until the mock PSP has made n authorizations. The
// mock authorizes before it sleeps out a latency fault, so with one set the
// request that made the n-th is then inside its PSP call, unanswered.
func (b *testBundle) waitAuthorizing(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(b.psp.Authorizations()) >= n },
		10*time.Second, 5*time.Millisecond, "the PSP never received the authorization")
}

// ledgerFor returns the PSP's authorizations for one charge.
func (b *testBundle) ledgerFor(chargeID string) []mockpsp.LedgerEntry {
	var out []mockpsp.LedgerEntry
	for _, e := range b.psp.Authorizations() {
		if e.Reference == chargeID {
			out = append(out, e)
		}
	}
	return out
}

// keyRows counts the idempotency_keys rows of the bundle's tenant for key.
func (b *testBundle) keyRows(t *testing.T, key string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`, b.tenant.ID, key).Scan(&n))
	return n
}

// chargeRows counts the charges of the bundle's tenant made under key.
func (b *testBundle) chargeRows(t *testing.T, key string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT count(*) FROM charges WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenant.ID, key).Scan(&n))
	return n
}

// keyState is what the database holds about one key.
type keyState struct {
	State         string
	RecoveryPoint string
	// Locked: locked_until is set; LeaseValid: and still in the future by
	// the database's clock.
	Locked     bool
	LeaseValid bool
	Attempts   int
}

func (b *testBundle) keyState(t *testing.T, key string) keyState {
	t.Helper()
	var s keyState
	require.NoError(t, b.pool.QueryRow(t.Context(), `
SELECT state, recovery_point, locked_until IS NOT NULL, coalesce(locked_until > now(), false), attempts
  FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`, b.tenant.ID, key).
		Scan(&s.State, &s.RecoveryPoint, &s.Locked, &s.LeaseValid, &s.Attempts))
	return s
}

// chargeObject is the API's charge object.
type chargeObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	PaymentMethod  string            `json:"payment_method"`
	Status         string            `json:"status"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	PSP            string            `json:"psp"`
	PSPReference   *string           `json:"psp_reference"`
	Description    *string           `json:"description"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      string            `json:"created_at"`
}

func decodeCharge(t *testing.T, body []byte) chargeObject {
	t.Helper()
	var c chargeObject
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&c), "charge object: %s", body)
	return c
}

// problemDoc is an RFC 9457 problem body.
type problemDoc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Charge string `json:"charge"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

// requireProblem checks that r is a problem with status and code, and
// returns it.
func requireProblem(t *testing.T, r response, status int, code string) problemDoc {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	var p problemDoc
	require.NoError(t, json.Unmarshal(r.body, &p), "problem body: %s", r.body)
	require.Equal(t, status, p.Status)
	require.Equal(t, code, p.Code)
	require.NotEmpty(t, p.Type)
	require.NotEmpty(t, p.Title)
	require.NotEmpty(t, p.Detail)
	return p
}

// requireRetryAfter checks that r carries Retry-After in delay-seconds.
func requireRetryAfter(t *testing.T, r response) {
	t.Helper()
	v := r.header.Get("Retry-After")
	require.NotEmpty(t, v, "Retry-After is required")
	var secs int
	_, err := fmt.Sscanf(v, "%d", &secs)
	require.NoError(t, err, "Retry-After %q is not delay-seconds", v)
	require.Positive(t, secs)
	require.Equal(t, fmt.Sprint(secs), strings.TrimSpace(v))
}

// lockedBuffer collects the server's log for a failing test's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
