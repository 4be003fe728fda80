package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/events"
)

type endpointObject struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	URL     string   `json:"url"`
	Events  []string `json:"events"`
	Secret  string   `json:"secret"`
	Deleted bool     `json:"deleted"`
}

type listObject struct {
	Data    []json.RawMessage `json:"data"`
	HasMore bool              `json:"has_more"`
}

// Webhook endpoints: a private address is refused unless
// WEBHOOK_ALLOW_PRIVATE; the secret is shown at creation only; an
// Idempotency-Key is optional and replays; DELETE ends the endpoint.
func TestWebhookEndpointsAPI(t *testing.T) {
	t.Parallel()
	strict := setup(t)
	status, _, body := strict.do(t, http.MethodPost, "/v1/webhook_endpoints", nil,
		[]byte(`{"url":"http://127.0.0.1:9/hooks","events":["*"]}`))
	require.Equal(t, http.StatusBadRequest, status, string(body))
	require.Contains(t, string(body), "invalid_request")

	b := setup(t, func(m *Main) { m.Config.WebhookAllowPrivate = true })
	for _, bad := range []string{`{"url":"ftp://x/","events":["*"]}`, `{"url":"http://x/","events":[]}`,
		`{"url":"http://x/","events":["charge.nope"]}`, `{"url":"http://x/","events":["*","charge.authorized"]}`,
		`{"url":"http://x/","events":["*"],"extra":1}`} {
		status, _, body := b.do(t, http.MethodPost, "/v1/webhook_endpoints", nil, []byte(bad))
		require.Equal(t, http.StatusBadRequest, status, bad+": "+string(body))
	}

	create := `{"url":"http://127.0.0.1:9/hooks","events":["charge.authorized"]}`
	status, h, body := b.do(t, http.MethodPost, "/v1/webhook_endpoints", map[string]string{"Idempotency-Key": "we-1"}, []byte(create))
	require.Equal(t, http.StatusCreated, status, string(body))
	require.Empty(t, h.Get("Idempotent-Replayed"))
	var ep endpointObject
	require.NoError(t, json.Unmarshal(body, &ep))
	require.Regexp(t, `^whsec_`, ep.Secret)
	require.Equal(t, "webhook_endpoint", ep.Object)

	status, h, replay := b.do(t, http.MethodPost, "/v1/webhook_endpoints", map[string]string{"Idempotency-Key": "we-1"},
		[]byte(`{"events":["charge.authorized"],"url":"http://127.0.0.1:9/hooks"}`))
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "true", h.Get("Idempotent-Replayed"))
	require.Equal(t, body, replay)
	status, _, _ = b.do(t, http.MethodPost, "/v1/webhook_endpoints", map[string]string{"Idempotency-Key": "we-1"},
		[]byte(`{"url":"http://127.0.0.1:9/other","events":["charge.authorized"]}`))
	require.Equal(t, http.StatusUnprocessableEntity, status)

	status, _, body = b.do(t, http.MethodPost, "/v1/webhook_endpoints", nil, []byte(create))
	require.Equal(t, http.StatusCreated, status)
	var second endpointObject
	require.NoError(t, json.Unmarshal(body, &second))

	status, _, body = b.do(t, http.MethodGet, "/v1/webhook_endpoints?limit=1", nil, nil)
	require.Equal(t, http.StatusOK, status)
	var page listObject
	require.NoError(t, json.Unmarshal(body, &page))
	require.Len(t, page.Data, 1)
	require.True(t, page.HasMore)
	require.NotContains(t, string(body), "whsec_", "secrets are never listed")

	status, _, body = b.do(t, http.MethodDelete, "/v1/webhook_endpoints/"+ep.ID, nil, nil)
	require.Equal(t, http.StatusOK, status, string(body))
	var deleted endpointObject
	require.NoError(t, json.Unmarshal(body, &deleted))
	require.True(t, deleted.Deleted)
	status, _, _ = b.do(t, http.MethodDelete, "/v1/webhook_endpoints/"+ep.ID, nil, nil)
	require.Equal(t, http.StatusNotFound, status)
	status, _, body = b.do(t, http.MethodGet, "/v1/webhook_endpoints", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, json.Unmarshal(body, &page))
	require.Len(t, page.Data, 1)
	require.Contains(t, string(page.Data[0]), second.ID)
}

// Events: the list (by type, paged) and the single event answer the
// stored body byte for byte; deliveries are listed per event; another
// tenant sees none of it.
func TestEventsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, func(m *Main) { m.Config.WebhookAllowPrivate = true })
	ctx := context.Background()
	status, _, _ := b.do(t, http.MethodPost, "/v1/webhook_endpoints", nil, []byte(`{"url":"http://127.0.0.1:9/","events":["*"]}`))
	require.Equal(t, http.StatusCreated, status)
	first, err := events.Write(ctx, b.pool, b.tenant.ID, events.ChargeAuthorized, []byte(`{"id":"ch_1","object":"charge"}`))
	require.NoError(t, err)
	second, err := events.Write(ctx, b.pool, b.tenant.ID, events.ChargeDeclined, []byte(`{"id":"ch_2","object":"charge"}`))
	require.NoError(t, err)

	status, _, body := b.do(t, http.MethodGet, "/v1/events/"+first.ID, nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, append(first.Body, '\n'), body)

	status, _, body = b.do(t, http.MethodGet, "/v1/events?type=charge.declined", nil, nil)
	require.Equal(t, http.StatusOK, status)
	var page listObject
	require.NoError(t, json.Unmarshal(body, &page))
	require.Len(t, page.Data, 1)
	require.Equal(t, second.Body, []byte(page.Data[0]))

	status, _, body = b.do(t, http.MethodGet, "/v1/events?limit=1&starting_after="+second.ID, nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, json.Unmarshal(body, &page))
	require.Equal(t, first.Body, []byte(page.Data[0]))
	require.False(t, page.HasMore)

	status, _, _ = b.do(t, http.MethodGet, "/v1/events?type=nope", nil, nil)
	require.Equal(t, http.StatusBadRequest, status)

	status, _, body = b.do(t, http.MethodGet, "/v1/events/"+first.ID+"/deliveries", nil, nil)
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, json.Unmarshal(body, &page))
	require.Len(t, page.Data, 1)
	require.Contains(t, string(page.Data[0]), `"status":"pending"`)

	_, otherKey := newTenantKey(t, b.pool, "other")
	for _, path := range []string{"/v1/events/" + first.ID, "/v1/events/" + first.ID + "/deliveries"} {
		status, _, _ = b.do(t, http.MethodGet, path, map[string]string{"Authorization": "Bearer " + otherKey}, nil)
		require.Equal(t, http.StatusNotFound, status, path)
	}
	status, _, _ = b.do(t, http.MethodGet, "/v1/events/evt_unknown", nil, nil)
	require.Equal(t, http.StatusNotFound, status)
}

// Operator views never print a webhook endpoint's signing secret:
// `requests show` prints the stored answer of its creation with `whsec_…`,
// also for an answer stored by an earlier version with the secret in it;
// `requests list` neither. Main printed the secret.
func TestOperatorViewsRedactWebhookSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t, func(m *Main) { m.Config.WebhookAllowPrivate = true })
	status, _, body := b.do(t, http.MethodPost, "/v1/webhook_endpoints", map[string]string{"Idempotency-Key": "we-op"},
		[]byte(`{"url":"http://127.0.0.1:9/hooks?token=t0ken","events":["*"]}`))
	require.Equal(t, http.StatusCreated, status, string(body))
	var ep endpointObject
	require.NoError(t, json.Unmarshal(body, &ep))
	require.Regexp(t, `^whsec_[0-9a-f]{48}$`, ep.Secret)

	shows := func() string {
		var out strings.Builder
		for _, args := range [][]string{{"requests", "show", "acme", "we-op"}, {"requests", "show", "acme", "we-op", "--json"},
			{"requests", "list"}, {"requests", "list", "--json"}} {
			code, stdout, stderr := b.cli(t, PSPEmbedded, args...)
			require.Zero(t, code, stderr)
			out.WriteString(stdout)
		}
		return out.String()
	}
	out := shows()
	require.NotContains(t, out, ep.Secret)
	require.Contains(t, out, `"secret": "whsec_…"`)

	// An answer stored with the secret in it, as before this version.
	tag, err := b.pool.Exec(context.Background(), `UPDATE idempotency_keys
		SET response_body = convert_to(replace(convert_from(response_body, 'UTF8'), 'whsec_…', $1), 'UTF8')
		WHERE key = 'we-op'`, ep.Secret)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	out = shows()
	require.NotContains(t, out, ep.Secret)
	require.Contains(t, out, `"secret": "whsec_…"`)
}
