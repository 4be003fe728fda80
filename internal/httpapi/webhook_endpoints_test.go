package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/httpapi"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// tableResolver resolves names from a table that a test may change, and
// counts its lookups.
type tableResolver struct {
	mu      sync.Mutex
	names   map[string]string
	lookups int
}

func (r *tableResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	a, ok := r.names[host]
	if !ok {
		return nil, errors.New("lookup " + host + " on 10.0.0.2:53: no such host")
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

func (r *tableResolver) set(host, addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if addr == "" {
		delete(r.names, host)
		return
	}
	r.names[host] = addr
}

func (r *tableResolver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups
}

// setupWebhookAPI serves the handler, its webhook guard strict and names
// resolved by res, on a fresh database; it serves no charges.
func setupWebhookAPI(t *testing.T, res *tableResolver) *apiBundle {
	t.Helper()
	ctx := context.Background()
	pool := testdb.Pool(t, testdb.NewURL(t), time.Time{})
	tel, err := telemetry.New(ctx, "httpapi-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	h, err := httpapi.NewHandler(httpapi.Config{Pool: pool, Telemetry: tel, AuthCacheTTL: -1,
		Logger: telemetry.NewLogger(io.Discard), WebhookGuard: webhooks.NewGuard(false, webhooks.WithResolver(res))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	v, err := validator()
	require.NoError(t, err)
	tenant, key, err := tenants.CreateKey(ctx, pool, "acme")
	require.NoError(t, err)
	_, otherKey, err := tenants.CreateKey(ctx, pool, "other")
	require.NoError(t, err)
	return &apiBundle{url: srv.URL, pool: pool, tenant: tenant, key: key, otherKey: otherKey, validator: v}
}

type endpointAnswer struct {
	ID     string  `json:"id"`
	Secret *string `json:"secret"`
}

// A tenant has at most 16 live endpoints: the 17th creation gets 400
// endpoint_limit_reached and creates nothing; a deletion frees a place;
// another tenant has places of its own.
func TestSeventeenthEndpointIsRefused(t *testing.T) {
	t.Parallel()
	b := setupWebhookAPI(t, &tableResolver{names: map[string]string{"hooks.example": "93.184.216.34"}})
	var first string
	for i := range webhooks.MaxEndpoints {
		r := b.do(t, http.MethodPost, "/v1/webhook_endpoints", "", fmt.Sprintf(`{"url":"https://hooks.example/%d","events":["*"]}`, i))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		if i == 0 {
			first = requireStatus(t, r, http.StatusCreated, "").ID
		}
	}
	r := b.do(t, http.MethodPost, "/v1/webhook_endpoints", "limit-1", `{"url":"https://hooks.example/17","events":["*"]}`)
	requireStatus(t, r, http.StatusBadRequest, "endpoint_limit_reached")
	// Nothing was stored under the key: the request can be retried with it.
	var keys int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&keys))
	require.Zero(t, keys)

	requireStatus(t, b.asOther(t, http.MethodPost, "/v1/webhook_endpoints", "", `{"url":"https://hooks.example/x","events":["*"]}`),
		http.StatusCreated, "")
	requireStatus(t, b.do(t, http.MethodDelete, "/v1/webhook_endpoints/"+first, "", ""), http.StatusOK, "")
	requireStatus(t, b.do(t, http.MethodPost, "/v1/webhook_endpoints", "limit-1", `{"url":"https://hooks.example/17","events":["*"]}`),
		http.StatusCreated, "")
}

// The secret of an endpoint is shown in the answer to its creation and in
// its replays while the endpoint lives; once it is deleted, a replay
// answers the same object with "secret": null. The stored answer never
// holds the secret. Main replayed the secret for as long as the key was
// kept.
func TestDeletedEndpointSecretIsNeverShownAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWebhookAPI(t, &tableResolver{names: map[string]string{"hooks.example": "93.184.216.34"}})
	const body = `{"url":"https://hooks.example/h","events":["charge.authorized"]}`
	first := b.do(t, http.MethodPost, "/v1/webhook_endpoints", "we-1", body)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	var ep endpointAnswer
	require.NoError(t, json.Unmarshal(first.body, &ep))
	require.NotNil(t, ep.Secret)
	secret := *ep.Secret
	require.Regexp(t, `^whsec_[0-9a-f]{48}$`, secret)
	b.requireReplay(t, first, http.MethodPost, "/v1/webhook_endpoints", "we-1", body)

	var stored []byte
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT response_body FROM idempotency_keys WHERE key = 'we-1'`).Scan(&stored))
	require.NotContains(t, string(stored), secret)
	require.Contains(t, string(stored), `"secret":"whsec_…"`)

	requireStatus(t, b.do(t, http.MethodDelete, "/v1/webhook_endpoints/"+ep.ID, "", ""), http.StatusOK, "")
	replay := b.do(t, http.MethodPost, "/v1/webhook_endpoints", "we-1", body)
	require.Equal(t, http.StatusCreated, replay.status)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.NotContains(t, string(replay.body), "whsec_")
	require.Equal(t, string(bytes.Replace(first.body, []byte(`"`+secret+`"`), []byte("null"), 1)), string(replay.body))
	var after endpointAnswer
	require.NoError(t, json.Unmarshal(replay.body, &after))
	require.Nil(t, after.Secret)
	require.Equal(t, ep.ID, after.ID)
}

// A retry of an endpoint's creation is answered from its key before the
// host is resolved: a replay makes no DNS query and does not depend on
// what the name resolves to now (here: nothing at all, then a private
// address); another request under the key gets 422, also without a
// lookup. Main resolved the host again first, and answered a replay 400
// once the name no longer resolved to a public address.
func TestEndpointReplayIsAnsweredBeforeResolving(t *testing.T) {
	t.Parallel()
	res := &tableResolver{names: map[string]string{"hooks.example": "93.184.216.34"}}
	b := setupWebhookAPI(t, res)
	const body = `{"url":"https://hooks.example/h","events":["*"]}`
	first := b.do(t, http.MethodPost, "/v1/webhook_endpoints", "we-dns", body)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	require.Equal(t, 1, res.count())

	res.set("hooks.example", "")
	b.requireReplay(t, first, http.MethodPost, "/v1/webhook_endpoints", "we-dns", body)
	res.set("hooks.example", "10.0.0.5")
	b.requireReplay(t, first, http.MethodPost, "/v1/webhook_endpoints", "we-dns", body)
	requireStatus(t, b.do(t, http.MethodPost, "/v1/webhook_endpoints", "we-dns", `{"url":"https://hooks.example/other","events":["*"]}`),
		http.StatusUnprocessableEntity, "idempotency_key_mismatch")
	require.Equal(t, 1, res.count(), "lookups")
}

// A refused host gets the same 400, in words that name neither the
// address the name resolves to nor the resolver, whether it resolves to a
// private address or not at all: no DNS oracle.
func TestEndpointRefusalIsNoDNSOracle(t *testing.T) {
	t.Parallel()
	b := setupWebhookAPI(t, &tableResolver{names: map[string]string{"internal.example": "10.0.0.5"}})
	var details []string
	for _, host := range []string{"internal.example", "nx.example", "10.0.0.5", "[64:ff9b::a00:5]"} {
		r := b.do(t, http.MethodPost, "/v1/webhook_endpoints", "", `{"url":"https://`+host+`/h","events":["*"]}`)
		requireStatus(t, r, http.StatusBadRequest, "invalid_request")
		var p struct{ Detail string }
		require.NoError(t, json.Unmarshal(r.body, &p))
		require.NotContains(t, p.Detail, "10.0.0")
		require.NotContains(t, p.Detail, "no such host")
		details = append(details, p.Detail)
	}
	for _, d := range details {
		require.Equal(t, "invalid webhook endpoint: url: host does not resolve to a public address (WEBHOOK_ALLOW_PRIVATE=1 allows it, in development only)", d)
	}
}
