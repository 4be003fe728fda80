package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// consoleSpan is the part of a span that stdouttrace prints which this test
// reads.
type consoleSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

func parseSpans(t *testing.T, out string) []consoleSpan {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var spans []consoleSpan
	for {
		var s consoleSpan
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			return spans
		}
		require.NoError(t, err)
		spans = append(spans, s)
	}
}

// With OTEL_TRACES_EXPORTER=console, one charge is one trace across two
// processes: the API's request span, a span per phase, the PSP client span,
// and the mock PSP's server span under it.
func TestOneTraceSpansAPIAndPSP(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)
	pspAddr := freeAddr(t)
	otel := map[string]string{"OTEL_TRACES_EXPORTER": "console"}
	mockEnv := map[string]string{"MOCKPSP_ADDR": pspAddr, "OTEL_TRACES_EXPORTER": "console"}
	mock := start(t, "mockpsp", mockEnv)
	apiKey := runCmd(t, "api", map[string]string{"DATABASE_URL": dbURL}, "keys", "create", "--tenant", "trace")
	addr := freeAddr(t)
	env := map[string]string{"DATABASE_URL": dbURL, "PSP_URL": "http://" + pspAddr, "API_ADDR": addr}
	for k, v := range otel {
		env[k] = v
	}
	api := start(t, "api", env, "serve")
	waitHealthy(t, "http://"+addr)

	resp, err := post(context.Background(), "http://"+addr, apiKey, "trace-1", visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.status)
	api.stop() // flushes the batch of spans
	mock.stop()

	apiSpans := parseSpans(t, api.stdout.String())
	pspSpans := parseSpans(t, mock.stdout.String())
	byName := map[string]consoleSpan{}
	for _, s := range apiSpans {
		byName[s.Name] = s
	}
	for _, name := range []string{"POST /v1/charges", "charges.create", "phase charge_created", "phase psp_authorized", "phase done"} {
		require.Contains(t, byName, name, "api spans: %v", spanNames(apiSpans))
	}
	traceID := byName["POST /v1/charges"].SpanContext.TraceID
	for _, s := range apiSpans {
		if strings.HasPrefix(s.Name, "phase ") {
			require.Equal(t, traceID, s.SpanContext.TraceID)
			require.Equal(t, byName["charges.create"].SpanContext.SpanID, s.Parent.SpanID)
		}
	}
	require.NotEmpty(t, pspSpans)
	var server consoleSpan
	for _, s := range pspSpans {
		if strings.Contains(s.Name, "/v1/authorizations") {
			server = s
		}
	}
	require.Equal(t, traceID, server.SpanContext.TraceID, "the PSP's span joins the API's trace")

	// The trace is found from the request: requests show prints its id,
	// and the operation's span names the tenant, the operation, the
	// charge and the key's hash, never the key.
	var shown struct {
		TraceID  string `json:"trace_id"`
		KeyHash  string `json:"key_hash"`
		ObjectID string `json:"object_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(runCmd(t, "api", map[string]string{"DATABASE_URL": dbURL},
		"requests", "show", "trace", "trace-1", "--json")), &shown))
	require.Equal(t, traceID, shown.TraceID)
	attrs := map[string]any{}
	for _, a := range byName["charges.create"].Attributes {
		attrs[a.Key] = a.Value.Value
	}
	require.Equal(t, shown.KeyHash, attrs["phasepay.key_hash"])
	require.Equal(t, shown.ObjectID, attrs["phasepay.object_id"])
	require.Equal(t, "charges.create", attrs["phasepay.operation"])
	require.Contains(t, attrs, "phasepay.tenant_id")
	require.NotContains(t, api.stdout.String(), `"trace-1"`, "no span carries the key itself")
}

func spanNames(spans []consoleSpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}
