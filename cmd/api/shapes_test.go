package main

// No 500 from input (docs/api.md, "Basics"): a path id or query value no
// object can have, a body that cannot be read, a charset phasepay does not
// read and two Authorization fields are each answered 4xx, before any SQL,
// and none writes an ERROR log line.

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requireNoErrorLogged fails if the server logged at ERROR: each such line
// is an alert an operator is paged for.
func (b *testBundle) requireNoErrorLogged(t *testing.T) {
	t.Helper()
	for _, l := range b.logLines(t) {
		require.NotEqual(t, "ERROR", l["level"], "logged: %v", l)
	}
}

// TestNulInPathIDIsNotFound: NUL or invalid UTF-8 in a path id reached
// PostgreSQL, whose text type refused it (SQLSTATE 22021): 500 and an
// ERROR line, at any tenant's will. A path id of a shape no object has is
// now 404, exactly as an unknown id, and a POST on one claims no key.
func TestNulInPathIDIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := http.Header{"Authorization": {"Bearer " + b.key}}
	post := http.Header{"Authorization": {"Bearer " + b.key}, "Content-Type": {"application/json"},
		"Idempotency-Key": {"shape-1"}}
	for _, tt := range []struct {
		method, path string
	}{
		{"GET", "/v1/charges/%00"},
		{"GET", "/v1/charges/%FF"},
		{"GET", "/v1/charges/ch_%00"},
		{"GET", "/v1/charges/ch_%C3%A9"},
		{"GET", "/v1/charges/re_abc"},
		{"GET", "/v1/charges/ch_a%2Fb"},
		{"GET", "/v1/refunds/%00"},
		{"GET", "/v1/refunds/re_%FF"},
		{"GET", "/v1/events/%00"},
		{"GET", "/v1/events/%FF/deliveries"},
		{"GET", "/v1/idempotency_keys/%00"},
		{"GET", "/v1/idempotency_keys/%FF"},
		{"GET", "/v1/idempotency_keys/a%20b"},
		{"GET", "/v1/idempotency_keys/%25zz"},
		{"DELETE", "/v1/webhook_endpoints/%FF"},
		{"DELETE", "/v1/webhook_endpoints/%00"},
		{"POST", "/v1/charges/%00/capture"},
		{"POST", "/v1/charges/%FF/void"},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			h, body := auth, ""
			if tt.method == http.MethodPost {
				h, body = post, `{}`
			}
			requireProblem(t, b.rawRequest(t, tt.method, tt.path, h, body), http.StatusNotFound, "not_found")
		})
	}
	require.Zero(t, b.keyRows(t, "shape-1"), "a POST on an id no charge can have claims no key")
	b.requireNoErrorLogged(t)

	// An id spelled with needless escapes is still found: decoded once.
	charge := decodeCharge(t, b.post(t, "shape-2", visaBody).body)
	r := b.rawRequest(t, http.MethodGet, "/v1/charges/%63h_"+strings.TrimPrefix(charge.ID, "ch_"), auth, "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.Equal(t, charge.ID, decodeCharge(t, r.body).ID)
}

// TestMalformedQueryValueIsInvalidRequest: a query value no object can
// have was a 500 (NUL, invalid UTF-8 in starting_after or charge) or was
// silently dropped (a value that does not decode read as absent: the first
// page). It is now 400 invalid_request; a well-shaped unknown id is still
// 404.
func TestMalformedQueryValueIsInvalidRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := http.Header{"Authorization": {"Bearer " + b.key}}
	for _, path := range []string{
		"/v1/charges?starting_after=%FF",
		"/v1/charges?starting_after=%00",
		"/v1/charges?starting_after=re_abc",
		"/v1/charges?starting_after=%zz",
		"/v1/charges?limit=1&limit=2",
		"/v1/refunds?charge=%00",
		"/v1/refunds?charge=ch_%FF",
		"/v1/refunds?starting_after=%00",
		"/v1/idempotency_keys?starting_after=%00",
		"/v1/idempotency_keys?starting_after=a%20b",
		"/v1/idempotency_keys?state=%00",
		"/v1/events?starting_after=%FF",
		"/v1/events?type=%00",
		"/v1/webhook_endpoints?starting_after=%FF",
		"/v1/webhook_endpoints?limit=%00",
	} {
		t.Run(path, func(t *testing.T) {
			p := requireProblem(t, b.rawRequest(t, http.MethodGet, path, auth, ""), http.StatusBadRequest, "invalid_request")
			require.NotContains(t, p.Detail, "\x00")
		})
	}
	for _, path := range []string{"/v1/charges?starting_after=ch_unknown", "/v1/refunds?charge=ch_unknown"} {
		requireProblem(t, b.rawRequest(t, http.MethodGet, path, auth, ""), http.StatusNotFound, "not_found")
	}
	r := b.rawRequest(t, http.MethodGet, "/v1/charges?starting_after=&unknown=%00", auth, "")
	require.Equal(t, http.StatusOK, r.status, "an empty value is absent, an unknown parameter ignored: %s", r.body)
	b.requireNoErrorLogged(t)
}

// rawExchange writes request on a connection of its own, exactly as
// given, and reads one answer.
func (b *testBundle) rawExchange(t *testing.T, request string) response {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = conn.Write([]byte(request))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body json.RawMessage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

// TestUnreadableBodyIsBadRequest: a body whose chunked encoding is
// malformed failed io.ReadAll, which answered 500. It is the client's
// error: 400, and nothing stored.
func TestUnreadableBodyIsBadRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, chunks := range []string{
		"zz\r\n{}\r\n0\r\n\r\n",                 // not a chunk size
		"2\r\n{}XX0\r\n\r\n",                    // no CRLF after the chunk
		"ffffffffffffffffff\r\n{}\r\n0\r\n\r\n", // a size past int64
	} {
		r := b.rawExchange(t, "POST /v1/charges HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer "+b.key+
			"\r\nContent-Type: application/json\r\nIdempotency-Key: chunked-1\r\nTransfer-Encoding: chunked\r\n\r\n"+chunks)
		requireProblem(t, r, http.StatusBadRequest, "invalid_request")
	}
	require.Zero(t, b.keyRows(t, "chunked-1"))
	b.requireNoErrorLogged(t)
}

// TestContentTypeCharsetOtherThanUTF8IsRefused: `application/json;
// charset=utf-16` was accepted and its body read as UTF-8. Only no charset
// or charset=utf-8 (any case) is accepted; any other is 415.
func TestContentTypeCharsetOtherThanUTF8IsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, ct := range []string{"application/json; charset=utf-16", "application/json; charset=UTF-16LE",
		"application/json;charset=iso-8859-1", "application/json; charset=utf8", "application/json; charset="} {
		h := map[string]string{"Idempotency-Key": "cs-refused", "Content-Type": ct}
		status, _, body := b.doUnchecked(t, http.MethodPost, "/v1/charges", h, []byte(visaBody))
		require.Equal(t, http.StatusUnsupportedMediaType, status, "%d %q: %s", i, ct, body)
	}
	require.Zero(t, b.keyRows(t, "cs-refused"))
	status, _, body := b.do(t, http.MethodPost, "/v1/charges",
		map[string]string{"Idempotency-Key": "cs-refused", "Content-Type": "application/json; charset=utf-16"}, []byte(visaBody))
	require.Equal(t, http.StatusUnsupportedMediaType, status, "the OpenAPI document lists it: %s", body)

	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON; Charset=UTF-8",
		`application/json; charset="utf-8"`} {
		h := map[string]string{"Idempotency-Key": "cs-" + string(rune('a'+i)), "Content-Type": ct}
		status, _, body := b.do(t, http.MethodPost, "/v1/charges", h, []byte(visaBody))
		require.Equal(t, http.StatusCreated, status, "%q: %s", ct, body)
	}
}

// TestTwoAuthorizationFieldsAreRefused: with two Authorization fields the
// first was used, while a proxy or the client's own log may go by the
// second. Two fields are 401, with WWW-Authenticate, even when both carry
// the same valid key.
func TestTwoAuthorizationFieldsAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, otherKey := newTenantKey(t, b.pool, "other")
	for _, keys := range [][]string{{b.key, b.key}, {b.key, otherKey}, {b.key, "sk_unknown"}} {
		h := http.Header{"Authorization": {"Bearer " + keys[0], "Bearer " + keys[1]}}
		r := b.rawRequest(t, http.MethodGet, "/v1/charges", h, "")
		requireProblem(t, r, http.StatusUnauthorized, "unauthorized")
		require.Equal(t, "Bearer", r.header.Get("WWW-Authenticate"))
	}
	r := b.rawRequest(t, http.MethodGet, "/v1/charges", http.Header{"Authorization": {"Bearer " + b.key}}, "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
}

// TestIdempotencyKeyInPathIsDecodedOnce: GET /v1/idempotency_keys/{key}
// decoded the key twice when the client's escaping was the default one
// (net/http had decoded it, then the handler again): z%252Fz answered the
// key z/z. A key is decoded exactly once, however it is spelled.
func TestIdempotencyKeyInPathIsDecodedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{"z/z", "z%2Fz", "a%b"} {
		require.Equal(t, http.StatusCreated, b.post(t, key, visaBody).status, key)
	}
	auth := http.Header{"Authorization": {"Bearer " + b.key}}
	for path, key := range map[string]string{
		"/v1/idempotency_keys/z%252Fz": "z%2Fz",
		"/v1/idempotency_keys/z%2Fz":   "z/z",
		"/v1/idempotency_keys/z%2fz":   "z/z",
		"/v1/idempotency_keys/%7A%2Fz": "z/z",
		"/v1/idempotency_keys/a%25b":   "a%b",
	} {
		r := b.rawRequest(t, http.MethodGet, path, auth, "")
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
		var doc keyDoc
		require.NoError(t, json.Unmarshal(r.body, &doc))
		require.Equal(t, key, doc.Key, path)
	}
	requireProblem(t, b.rawRequest(t, http.MethodGet, "/v1/idempotency_keys/z%25252Fz", auth, ""), http.StatusNotFound, "not_found")
}
