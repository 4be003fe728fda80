package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/httpapi"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// runWithin is runCmd that fails the test if the command has not returned
// within d: what is tested with it must answer at once, and an api that
// started serving instead would never return.
func runWithin(t *testing.T, d time.Duration, args []string, env map[string]string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, func(k string) string { return env[k] }, &stdout, &stderr) }()
	select {
	case code := <-done:
		return code, stdout.String(), stderr.String()
	case <-time.After(d):
		require.FailNow(t, "the command did not return: it started serving", "args %q", args)
		return 0, "", ""
	}
}

// Unset or empty, PSP_URL used to mean the embedded mock PSP: a production
// api that lost its configuration would report charges as authorized that
// no PSP ever saw. serve must refuse to start, at once, with one line
// naming PSP_URL; the commands that need no PSP still run without it.
func TestServeWithoutPSPURLRefusesToStart(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t) // a database it could serve on: only PSP_URL is missing
	for name, env := range map[string]map[string]string{
		"unset": {"DATABASE_URL": dbURL, "API_ADDR": "127.0.0.1:0", "MOCKPSP_ADDR": "127.0.0.1:0"},
		"empty": {"DATABASE_URL": dbURL, "API_ADDR": "127.0.0.1:0", "MOCKPSP_ADDR": "127.0.0.1:0", "PSP_URL": ""},
	} {
		for _, args := range [][]string{nil, {"serve"}} {
			t.Run(name+"/"+strings.Join(append([]string{"api"}, args...), " "), func(t *testing.T) {
				t.Parallel()
				code, stdout, stderr := runWithin(t, 10*time.Second, args, env)
				require.Equal(t, 2, code, "bad configuration: %s", stderr)
				require.Empty(t, stdout)
				require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
				require.True(t, strings.HasPrefix(stderr, "api: PSP_URL is required"), "%q", stderr)
			})
		}
	}

	// migrate needs no PSP.
	code, _, stderr := runWithin(t, time.Minute, []string{"migrate"}, map[string]string{"DATABASE_URL": dbURL})
	require.Equal(t, 0, code, "stderr: %s", stderr)

	// Main itself refuses too, for whatever runs it in-process.
	err := (&Main{Config: Config{DatabaseURL: dbURL, Addr: "127.0.0.1:0"}}).Run(t.Context())
	require.ErrorIs(t, err, ErrPSPURLRequired)
}

// rawRequest sends a request built by the test, with b's client, headers
// exactly as given (several values of one name included), and returns the
// exchange unchecked.
func (b *testBundle) rawRequest(t *testing.T, method, path string, h http.Header, body string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, strings.NewReader(body))
	require.NoError(t, err)
	if body == "" {
		req.Body = http.NoBody
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if k := h.Get("Host"); k != "" {
		req.Host = k
	}
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: respBody}
}

// Two Idempotency-Key header fields: the first was used silently. The
// request is refused with 400 and stores nothing; either key alone is then
// a new request.
func TestTwoIdempotencyKeyHeadersAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := http.Header{
		"Authorization":   {"Bearer " + b.key},
		"Content-Type":    {"application/json"},
		"Idempotency-Key": {"two-1", "two-2"},
	}
	r := b.rawRequest(t, http.MethodPost, "/v1/charges", h, visaBody)
	p := requireProblem(t, r, http.StatusBadRequest, "idempotency_key_invalid")
	require.Contains(t, p.Detail, "Idempotency-Key")
	require.Zero(t, b.keyRows(t, "two-1"))
	require.Zero(t, b.keyRows(t, "two-2"))
	require.Empty(t, b.psp.Authorizations())

	require.Equal(t, http.StatusCreated, b.post(t, "two-1", visaBody).status)
}

// logLines returns the server's log lines as JSON objects.
func (b *testBundle) logLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.logs.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "log line %q", line)
		out = append(out, m)
	}
	return out
}

// X-Request-Id was trusted and echoed whatever its size (60 KB log lines).
// A client value of 1 to 128 visible ASCII characters, in one field, is
// kept; anything else is replaced by a generated id. Either way the
// response carries it, its problem body too, and the request's log line
// carries it with the trace id.
func TestRequestIDFromClientIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	generated := regexp.MustCompile(`^[0-9a-f]{32}$`)
	max := strings.Repeat("r", 128)
	for _, tt := range []struct {
		name   string
		values []string
		kept   bool
	}{
		{"short", []string{"req-1"}, true},
		{"visible ASCII", []string{`a!"#~/z`}, true},
		{"128 characters", []string{max}, true},
		{"absent", nil, false},
		{"empty", []string{""}, false},
		{"129 characters", []string{max + "r"}, false},
		{"8 KB", []string{strings.Repeat("x", 8<<10)}, false},
		{"space", []string{"a b"}, false},
		{"control character", []string{"a\tb"}, false},
		{"not ASCII", []string{"réq"}, false},
		{"two fields", []string{"req-a", "req-b"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the log lines are matched by request id.
			h := http.Header{}
			if tt.values != nil {
				h["X-Request-Id"] = tt.values
			}
			r := b.rawRequest(t, http.MethodGet, "/v1/charges/ch_missing", h, "") // no key: 401
			got := r.header.Values("X-Request-Id")
			require.Len(t, got, 1)
			if tt.kept {
				require.Equal(t, tt.values[0], got[0])
			} else {
				require.Regexp(t, generated, got[0])
			}
			p := requireProblem(t, r, http.StatusUnauthorized, "unauthorized")
			_ = p
			var body struct {
				RequestID string `json:"request_id"`
			}
			require.NoError(t, json.Unmarshal(r.body, &body))
			require.Equal(t, got[0], body.RequestID)
		})
	}
	for _, line := range strings.Split(b.logs.String(), "\n") {
		require.Less(t, len(line), 2048, "a log line this long carries what a client sent: %.200s…", line)
	}
}

// Every response carries X-Request-Id (chi's RequestID middleware set none
// on the response), and the request's log line carries it with the trace
// id of the caller's trace context. The raw path of a request without a
// valid key is not logged: it is whatever that client chose to write.
func TestEveryResponseCarriesRequestID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		secret  = "secret-path-from-a-stranger"
	)
	auth := "Bearer " + b.key
	cases := []struct {
		method, path, auth, body string
		status                   int
	}{
		{http.MethodGet, "/healthz", "", "", http.StatusOK},
		{http.MethodGet, "/readyz", "", "", http.StatusOK},
		{http.MethodGet, "/metrics", "", "", http.StatusOK},
		{http.MethodGet, "/" + secret, "", "", http.StatusNotFound},
		{http.MethodGet, "/v1/charges/" + secret, "", "", http.StatusUnauthorized},
		{http.MethodGet, "/v1/charges/" + secret, "Bearer sk_wrong", "", http.StatusUnauthorized},
		{http.MethodPost, "/healthz", "", "", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/charges/ch_missing", auth, "", http.StatusNotFound},
		{http.MethodPost, "/v1/charges", auth, visaBody, http.StatusCreated},
	}
	for i, c := range cases {
		id := fmt.Sprintf("rid-%d", i)
		h := http.Header{
			"X-Request-Id": {id},
			"Traceparent":  {"00-" + traceID + "-00f067aa0ba902b7-01"},
			"Content-Type": {"application/json"},
		}
		if c.auth != "" {
			h.Set("Authorization", c.auth)
		}
		if c.method == http.MethodPost && c.path == "/v1/charges" {
			h.Set("Idempotency-Key", "rid-key")
		}
		r := b.rawRequest(t, c.method, c.path, h, c.body)
		require.Equal(t, c.status, r.status, "%s %s: %s", c.method, c.path, r.body)
		require.Equal(t, id, r.header.Get("X-Request-Id"), "%s %s", c.method, c.path)
	}

	require.NoError(t, b.stop()) // every request's line is written
	byID := map[string]map[string]any{}
	for _, line := range b.logLines(t) {
		if line["msg"] == "request" {
			id, _ := line["request_id"].(string)
			byID[id] = line
		}
	}
	for i, c := range cases {
		if c.path == "/healthz" || c.path == "/metrics" {
			continue // not traced (otelhttp's filter); still logged
		}
		line := byID[fmt.Sprintf("rid-%d", i)]
		require.NotNil(t, line, "%s %s: no request log line", c.method, c.path)
		require.Equal(t, traceID, line["trace_id"], "%s %s", c.method, c.path)
	}
	require.NotContains(t, b.logs.String(), secret, "the raw path of an unauthenticated request")
	authed := byID[fmt.Sprintf("rid-%d", len(cases)-2)]
	require.Equal(t, "/v1/charges/{id}", authed["route"])
	require.Equal(t, "/v1/charges/ch_missing", authed["path"], "a tenant's own path is logged")
}

// Router-level errors: 405 had no Allow, 401 no WWW-Authenticate, and a
// Content-Type other than JSON was a 400. Every one is a problem document
// with its code.
func TestRouterErrorsAreProblems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := "Bearer " + b.key
	for _, tt := range []struct {
		method, path, auth, contentType, body string
		status                                int
		code, allow                           string
	}{
		{method: "GET", path: "/nope", status: 404, code: "not_found"},
		{method: "GET", path: "/v1/nope", auth: auth, status: 404, code: "not_found"},
		{method: "POST", path: "/healthz", status: 405, code: "method_not_allowed", allow: "GET"},
		{method: "DELETE", path: "/readyz", status: 405, code: "method_not_allowed", allow: "GET"},
		{method: "PUT", path: "/v1/charges", auth: auth, status: 405, code: "method_not_allowed", allow: "GET, POST"},
		{method: "DELETE", path: "/v1/charges/ch_1", auth: auth, status: 405, code: "method_not_allowed", allow: "GET"},
		{method: "FROB", path: "/v1/charges", status: 405, code: "method_not_allowed", allow: "GET, POST"},
		{method: "FROB", path: "/nope", status: 404, code: "not_found"},
		{method: "GET", path: "/v1/charges/ch_1", status: 401, code: "unauthorized"},
		{method: "GET", path: "/v1/charges/ch_1", auth: "Bearer sk_unknown", status: 401, code: "unauthorized"},
		{method: "GET", path: "/v1/charges/ch_1", auth: "Basic dXNlcjpwYXNz", status: 401, code: "unauthorized"},
		{method: "POST", path: "/v1/charges", auth: auth, contentType: "application/json", body: `{"amount":` + strings.Repeat(" ", 70<<10) + `1}`, status: 413, code: "payload_too_large"},
		{method: "POST", path: "/v1/charges", auth: auth, contentType: "text/plain", body: visaBody, status: 415, code: "unsupported_media_type"},
		{method: "POST", path: "/v1/charges", auth: auth, contentType: "application/x-www-form-urlencoded", body: "amount=1", status: 415, code: "unsupported_media_type"},
	} {
		t.Run(tt.method+" "+tt.path+" "+tt.code, func(t *testing.T) {
			h := http.Header{"Idempotency-Key": {"router-1"}}
			if tt.auth != "" {
				h.Set("Authorization", tt.auth)
			}
			if tt.contentType != "" {
				h.Set("Content-Type", tt.contentType)
			}
			r := b.rawRequest(t, tt.method, tt.path, h, tt.body)
			requireProblem(t, r, tt.status, tt.code)
			require.Equal(t, tt.allow, r.header.Get("Allow"))
			if tt.status == http.StatusUnauthorized {
				require.Equal(t, "Bearer", r.header.Get("WWW-Authenticate"))
			}
		})
	}
	require.Zero(t, b.keyRows(t, "router-1"))

	// The documented ones pass the OpenAPI check, headers included.
	status, _, body := b.do(t, http.MethodPost, "/v1/charges", map[string]string{"Idempotency-Key": "router-2", "Content-Type": "text/plain"}, []byte(visaBody))
	require.Equal(t, http.StatusUnsupportedMediaType, status, "body: %s", body)
	status, _, body = b.do(t, http.MethodGet, "/v1/charges/ch_1", map[string]string{"Authorization": ""}, nil)
	require.Equal(t, http.StatusUnauthorized, status, "body: %s", body)
}

// Request metrics must carry the route pattern, never the raw path: every
// charge id would otherwise be a series of its own, and so would every Host
// header a client cares to send.
func TestRequestMetricsCarryRoutePatternNotRawPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const rawID = "ch_xyz0rawid"
	h := http.Header{"Authorization": {"Bearer " + b.key}, "Host": {"evil.example:31337"}}
	r := b.rawRequest(t, http.MethodGet, "/v1/charges/"+rawID, h, "")
	require.Equal(t, http.StatusNotFound, r.status)

	status, _, body := b.do(t, http.MethodGet, "/metrics", map[string]string{"Authorization": ""}, nil)
	require.Equal(t, http.StatusOK, status)
	text := string(body)
	require.True(t, hasSeries(text, "http_server_request_duration_seconds_count", `http_route="/v1/charges/{id}"`),
		"no request series labelled with the route pattern:\n%s", grepLines(text, "http_server_request_duration_seconds_count"))
	require.NotContains(t, text, rawID)
	require.NotContains(t, text, "evil.example")
	require.NotContains(t, text, "31337")
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// /metrics was served on the public API port. With METRICS_ADDR it moves
// to a listener of its own and is gone from the API port.
func TestMetricsAddrMovesMetricsOffAPIPort(t *testing.T) {
	t.Parallel()
	cfg, err := ParseEnv(func(k string) string { return map[string]string{"METRICS_ADDR": "127.0.0.1:9464"}[k] })
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9464", cfg.MetricsAddr)

	var m *Main
	b := setup(t, func(main *Main) {
		m = main
		m.Config.MetricsAddr = "127.0.0.1:0"
	})
	require.Equal(t, http.StatusCreated, b.post(t, "metrics-addr-1", visaBody).status)

	r := b.rawRequest(t, http.MethodGet, "/metrics", nil, "")
	requireProblem(t, r, http.StatusNotFound, "not_found")

	addr := m.MetricsAddr()
	require.NotEmpty(t, addr)
	resp, err := b.client.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "phasepay_idempotency_outcomes_total")
	require.Contains(t, string(body), "http_server_request_duration_seconds")
}

// A client that trickles its body is disconnected BodyTimeout after its
// headers, answered nothing, and nothing is stored.
func TestSlowBodyIsCutOffByTheAPI(t *testing.T) {
	t.Parallel()
	const bodyTimeout = 500 * time.Millisecond
	b := setup(t, func(m *Main) { m.Server = httpapi.ServerConfig{BodyTimeout: bodyTimeout} })
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nIdempotency-Key: slow-1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		b.key, len(visaBody))
	require.NoError(t, err)
	start := time.Now()
	answer := make(chan []byte, 1)
	go func() {
		got, _ := io.ReadAll(conn) // until the server closes
		answer <- got
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for i := 0; ; {
		select {
		case got := <-answer:
			took := time.Since(start)
			require.Empty(t, string(got), "disconnected, not answered")
			require.GreaterOrEqual(t, took, bodyTimeout-50*time.Millisecond)
			require.Less(t, took, bodyTimeout+5*time.Second)
			require.Zero(t, b.keyRows(t, "slow-1"))
			require.Contains(t, b.logs.String(), "request body too slow")
			return
		case <-deadline:
			require.FailNow(t, "the API still holds the slow client's connection")
		case <-tick.C:
			if i < len(visaBody)-1 { // never the last byte
				_, _ = conn.Write([]byte{visaBody[i]})
				i++
			}
		}
	}
}
