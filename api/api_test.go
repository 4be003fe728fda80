package api_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/api"
)

func TestLoadValidates(t *testing.T) {
	t.Parallel()

	require.NotEmpty(t, api.Spec, "openapi.yaml must be embedded")

	doc, err := api.Load()
	require.NoError(t, err)
	require.Equal(t, "3.0.3", doc.OpenAPI)
	require.Contains(t, doc.Components.SecuritySchemes, "bearerAuth")
}

// TestLoadReturnsFreshDocument guards the promise that callers may mutate
// what Load returns (apitest clears the servers) without affecting others.
func TestLoadReturnsFreshDocument(t *testing.T) {
	t.Parallel()

	a, err := api.Load()
	require.NoError(t, err)
	b, err := api.Load()
	require.NoError(t, err)

	a.Servers = nil
	require.NotEmpty(t, b.Servers)
}

// TestContractOperationsDocumented lists every operation and status of the
// API (docs/api.md), so the document can neither lose one nor grow one
// unnoticed.
func TestContractOperationsDocumented(t *testing.T) {
	t.Parallel()

	doc, err := api.Load()
	require.NoError(t, err)

	type operation struct {
		method, path string
		statuses     []int
		authed       bool
	}
	want := []operation{
		{"POST", "/v1/charges", []int{201, 400, 401, 402, 405, 409, 413, 415, 422, 500, 503}, true},
		{"GET", "/v1/charges", []int{200, 400, 401, 404, 405, 500, 503}, true},
		{"GET", "/v1/charges/{id}", []int{200, 401, 404, 405, 500, 503}, true},
		{"POST", "/v1/charges/{id}/capture", []int{200, 400, 401, 402, 404, 405, 409, 413, 415, 422, 500, 503}, true},
		{"POST", "/v1/charges/{id}/void", []int{200, 400, 401, 402, 404, 405, 409, 413, 415, 422, 500, 503}, true},
		{"POST", "/v1/refunds", []int{201, 400, 401, 402, 404, 405, 409, 413, 415, 422, 500, 503}, true},
		{"GET", "/v1/refunds", []int{200, 400, 401, 404, 405, 500, 503}, true},
		{"GET", "/v1/refunds/{id}", []int{200, 401, 404, 405, 500, 503}, true},
		{"GET", "/v1/idempotency_keys", []int{200, 400, 401, 404, 405, 500, 503}, true},
		{"GET", "/v1/idempotency_keys/{key}", []int{200, 401, 404, 405, 500, 503}, true},
		{"GET", "/v1/idempotency_keys/{key}/timeline", []int{200, 401, 404, 405, 500, 503}, true},
		{"GET", "/v1/events", []int{200, 400, 401, 404, 405, 500, 503}, true},
		{"GET", "/v1/events/{id}", []int{200, 401, 404, 405, 500, 503}, true},
		{"GET", "/v1/events/{id}/deliveries", []int{200, 401, 404, 405, 500, 503}, true},
		{"POST", "/v1/events/{id}/redeliver", []int{202, 400, 401, 404, 405, 413, 415, 500, 503}, true},
		{"POST", "/v1/webhook_endpoints", []int{201, 400, 401, 405, 409, 413, 415, 422, 500, 503}, true},
		{"GET", "/v1/webhook_endpoints", []int{200, 400, 401, 404, 405, 500, 503}, true},
		{"DELETE", "/v1/webhook_endpoints/{id}", []int{200, 401, 404, 405, 500, 503}, true},
		{"POST", "/v1/psp_webhooks/{psp}", []int{200, 400, 404, 405, 413, 415, 500, 503}, false},
		{"GET", "/healthz", []int{200, 405}, false},
		{"GET", "/readyz", []int{200, 405, 503}, false},
		{"GET", "/metrics", []int{200, 405}, false},
	}

	var wantOps, gotOps []string
	for _, w := range want {
		wantOps = append(wantOps, w.method+" "+w.path)
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			gotOps = append(gotOps, method+" "+path)
		}
	}
	require.ElementsMatch(t, wantOps, gotOps, "operations in openapi.yaml")

	for _, w := range want {
		t.Run(w.method+" "+w.path, func(t *testing.T) {
			t.Parallel()

			op := doc.Paths.Find(w.path).GetOperation(w.method)
			require.NotNil(t, op)

			var got []int
			for code := range op.Responses.Map() {
				n, err := strconv.Atoi(code)
				require.NoError(t, err, "response key %q must be a status code, not a range or default", code)
				got = append(got, n)
			}
			slices.Sort(got)
			require.Equal(t, w.statuses, got)

			// An operation without its own security inherits the global
			// bearerAuth; the operations endpoints opt out with [].
			if w.authed {
				require.Nil(t, op.Security, "charges operations inherit the global bearer security")
			} else {
				require.NotNil(t, op.Security)
				require.Empty(t, *op.Security, "operations endpoints and PSP webhooks need no API key")
			}
		})
	}
	require.Len(t, doc.Security, 1)
	require.Contains(t, doc.Security[0], "bearerAuth")
}

// TestIdempotencyKeyParameter pins the header's bounds: 255 characters of
// key plus the two quotes of the structured-field form.
func TestIdempotencyKeyParameter(t *testing.T) {
	t.Parallel()

	doc, err := api.Load()
	require.NoError(t, err)

	op := doc.Paths.Find("/v1/charges").GetOperation("POST")
	p := op.Parameters.GetByInAndName("header", "Idempotency-Key")
	require.NotNil(t, p)
	require.True(t, p.Required)
	require.Equal(t, uint64(1), p.Schema.Value.MinLength)
	require.NotNil(t, p.Schema.Value.MaxLength)
	require.Equal(t, uint64(257), *p.Schema.Value.MaxLength)
}
