package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/events"
)

// POST /v1/events/{id}/redeliver makes a new attempt due now at every live
// endpoint the event was owed to, also one given up, or at the endpoint
// named; it refuses an endpoint id of the wrong shape (400 with errors), and
// answers 404 for an unknown or another tenant's event, an endpoint that is
// not the tenant's or is deleted, and one the event was never owed to.
// Every answer is checked against api/openapi.yaml on the way, and every
// redelivery is audited.
func TestRedeliverEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWebhookAPI(t, &tableResolver{names: map[string]string{"hooks.example": "93.184.216.34"}})
	create := func(events string) string {
		t.Helper()
		r := b.do(t, http.MethodPost, "/v1/webhook_endpoints", "", `{"url":"https://hooks.example/h","events":`+events+`}`)
		return requireStatus(t, r, http.StatusCreated, "").ID
	}
	all, authorized := create(`["*"]`), create(`["charge.authorized"]`)
	ev, err := events.Write(ctx, b.pool, b.tenant.ID, "charge.declined", []byte(`{"id":"ch_1","object":"charge"}`))
	require.NoError(t, err)
	later := create(`["*"]`)
	deleted := create(`["*"]`)
	_, err = b.pool.Exec(ctx, `UPDATE webhook_deliveries SET state = 'failed', finished_at = now() WHERE event_id = $1`, ev.ID)
	require.NoError(t, err)

	path := "/v1/events/" + ev.ID + "/redeliver"
	r := b.do(t, http.MethodPost, path, "", "")
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	var got struct {
		Object, Event string
		Endpoints     []string
	}
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Equal(t, "event_redelivery", got.Object)
	require.Equal(t, ev.ID, got.Event)
	require.Equal(t, []string{all}, got.Endpoints, "owed only to the endpoint subscribed to its type when it was written")
	var state string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT state FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2
   AND next_attempt_at <= now() AND locked_until IS NULL`, ev.ID, all).Scan(&state))
	require.Equal(t, "pending", state, "the given-up delivery is due again")

	r = b.do(t, http.MethodPost, path, "", `{"endpoint":"`+all+`"}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)

	p := problemOf(t, b.do(t, http.MethodPost, path, "", `{"endpoint":"nope"}`), http.StatusBadRequest, "invalid_request")
	require.Equal(t, "endpoint", p.Errors[0].Field)
	requireStatus(t, b.do(t, http.MethodPost, path, "", `{"endpoint":"we_0000"}`), http.StatusNotFound, "not_found")
	requireStatus(t, b.do(t, http.MethodPost, path, "", `{"endpoint":"`+authorized+`"}`), http.StatusNotFound, "not_found")
	requireStatus(t, b.do(t, http.MethodPost, path, "", `{"endpoint":"`+later+`"}`), http.StatusNotFound, "not_found")
	requireStatus(t, b.do(t, http.MethodDelete, "/v1/webhook_endpoints/"+deleted, "", ""), http.StatusOK, "")
	requireStatus(t, b.do(t, http.MethodPost, path, "", `{"endpoint":"`+deleted+`"}`), http.StatusNotFound, "not_found")
	requireStatus(t, b.do(t, http.MethodPost, "/v1/events/evt_0661d5a3c9e1f0b2a4c6e8d0f1a3b5/redeliver", "", ""), http.StatusNotFound, "not_found")
	requireStatus(t, b.asOther(t, http.MethodPost, path, "", ""), http.StatusNotFound, "not_found")
	requireStatus(t, b.do(t, http.MethodPost, path, "", `{"endpoint":"`+all+`","more":1}`), http.StatusBadRequest, "invalid_request")

	var audited int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_redeliveries
 WHERE tenant_id = $1 AND event_id = $2 AND requested_by = 'tenant' AND via = 'api'`, b.tenant.ID, ev.ID).Scan(&audited))
	require.Equal(t, 2, audited, "each redelivery that acted is recorded")
}

// A webhook endpoint refused for its url or its events says which in
// errors, like every other invalid body.
func TestWebhookEndpointValidationNamesTheField(t *testing.T) {
	t.Parallel()
	b := setupWebhookAPI(t, &tableResolver{names: map[string]string{"internal.example": "10.0.0.5"}})
	for body, field := range map[string]string{
		`{"url":"ftp://hooks.example/h","events":["*"]}`:      "url",
		`{"url":"https://internal.example/h","events":["*"]}`: "url",
		`{"url":"https://hooks.example/h","events":[]}`:       "events",
		`{"url":"https://hooks.example/h","events":["nope"]}`: "events",
	} {
		p := problemOf(t, b.do(t, http.MethodPost, "/v1/webhook_endpoints", "", body), http.StatusBadRequest, "invalid_request")
		require.Len(t, p.Errors, 1, body)
		require.Equal(t, field, p.Errors[0].Field, body)
		require.NotEmpty(t, p.Errors[0].Message, body)
		require.Contains(t, p.Detail, field+": "+p.Errors[0].Message, body)
	}
}

// problemDoc is a problem's detail and errors.
type problemDoc struct {
	Detail string
	Errors []struct{ Field, Message string }
}

func problemOf(t *testing.T, r reply, status int, code string) problemDoc {
	t.Helper()
	requireStatus(t, r, status, code)
	var p problemDoc
	require.NoError(t, json.Unmarshal(r.body, &p))
	return p
}
