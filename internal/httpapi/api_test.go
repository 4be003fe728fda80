package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/api/apitest"
	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/httpapi"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// The handler against a real database of its own and a mock PSP behind the
// real client, for tests of the endpoints as a client sees them. Every
// exchange is checked against api/openapi.yaml.

var validator = sync.OnceValues(apitest.New)

// apiBundle is one test's API: two tenants, so that every test can ask
// for the other's objects.
type apiBundle struct {
	url       string
	pool      *pgxpool.Pool
	mock      *mockpsp.Mock
	tenant    tenants.Tenant
	key       string // tenant's API key
	otherKey  string // another tenant's API key
	validator *apitest.Validator
}

// setupAPI serves the handler on a fresh database. A non-zero clock stands
// the database clock (created_at of every charge) still at that time.
func setupAPI(t *testing.T, clock time.Time) *apiBundle {
	t.Helper()
	ctx := context.Background()
	pool := testdb.Pool(t, testdb.NewURL(t), clock)
	keys, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute})
	require.NoError(t, err)
	mock, err := mockpsp.New(mockpsp.Faults{})
	require.NoError(t, err)
	pspSrv := httptest.NewServer(mock)
	t.Cleanup(pspSrv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: pspSrv.URL, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	require.NoError(t, err)
	svc, err := charges.NewService(pool, keys, client, phases.Config{})
	require.NoError(t, err)
	t.Cleanup(svc.Wait)
	tel, err := telemetry.New(ctx, "httpapi-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	h, err := httpapi.NewHandler(httpapi.Config{Pool: pool, Charges: svc, Telemetry: tel, AuthCacheTTL: -1,
		Logger: telemetry.NewLogger(io.Discard)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	v, err := validator()
	require.NoError(t, err)
	tenant, key, err := tenants.CreateKey(ctx, pool, "acme")
	require.NoError(t, err)
	_, otherKey, err := tenants.CreateKey(ctx, pool, "other")
	require.NoError(t, err)
	return &apiBundle{url: srv.URL, pool: pool, mock: mock, tenant: tenant, key: key, otherKey: otherKey, validator: v}
}

// reply is one answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// call sends a request as the bundle's tenant (as the other tenant if
// apiKey is b.otherKey), with an Idempotency-Key unless idemKey is "", and
// checks the exchange against the OpenAPI document. It reports failures
// rather than failing the test, for goroutines.
func (b *apiBundle) call(ctx context.Context, apiKey, method, path, idemKey, body string) (reply, error) {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, b.url+path, rd)
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: respBody}
	if err := b.validator.Check(req, []byte(body), resp, respBody); err != nil {
		return r, err
	}
	return r, nil
}

// do is call as the bundle's tenant, failing the test on error.
func (b *apiBundle) do(t *testing.T, method, path, idemKey, body string) reply {
	t.Helper()
	r, err := b.call(t.Context(), b.key, method, path, idemKey, body)
	require.NoError(t, err, "body: %s", r.body)
	return r
}

// asOther is do as the other tenant.
func (b *apiBundle) asOther(t *testing.T, method, path, idemKey, body string) reply {
	t.Helper()
	r, err := b.call(t.Context(), b.otherKey, method, path, idemKey, body)
	require.NoError(t, err, "body: %s", r.body)
	return r
}

// object is the members of a charge or refund the tests look at.
type object struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Status         string `json:"status"`
	Amount         int64  `json:"amount"`
	AmountCaptured int64  `json:"amount_captured"`
	AmountRefunded int64  `json:"amount_refunded"`
	Charge         string `json:"charge"`
	Code           string `json:"-"` // of a problem
}

func decode(t *testing.T, r reply) object {
	t.Helper()
	var o object
	require.NoError(t, json.Unmarshal(r.body, &o), "%s", r.body)
	return o
}

// requireStatus fails unless r has status and, for a problem, code.
func requireStatus(t *testing.T, r reply, status int, code string) object {
	t.Helper()
	require.Equal(t, status, r.status, "%s", r.body)
	if code == "" {
		return decode(t, r)
	}
	var p struct {
		Code   string `json:"code"`
		Charge string `json:"charge"`
	}
	require.NoError(t, json.Unmarshal(r.body, &p), "%s", r.body)
	require.Equal(t, code, p.Code, "%s", r.body)
	return object{Code: p.Code, Charge: p.Charge}
}

// authorize creates an authorized charge of 1000 and returns its id.
func (b *apiBundle) authorize(t *testing.T, key string) string {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/charges", key, `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`)
	return requireStatus(t, r, http.StatusCreated, "").ID
}

// capture captures all of a charge.
func (b *apiBundle) capture(t *testing.T, id string) {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/charges/"+id+"/capture", "cap-"+id, `{}`)
	require.Equal(t, "captured", requireStatus(t, r, http.StatusOK, "").Status)
}

// requireReplay sends the same request again and requires the first
// answer, byte for byte, marked as replayed.
func (b *apiBundle) requireReplay(t *testing.T, first reply, method, path, idemKey, body string) {
	t.Helper()
	again := b.do(t, method, path, idemKey, body)
	require.Equal(t, first.status, again.status)
	require.Equal(t, string(first.body), string(again.body))
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
}
