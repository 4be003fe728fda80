package apitest_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/api/apitest"
)

// The port is arbitrary on purpose: the validator must not care which
// address the service under test listens on.
const base = "http://127.0.0.1:49321"

const chargeJSON = `{
	"id": "ch_01J9Z6Q3W8T5N2X4V7B0K1M3PA",
	"object": "charge",
	"amount": 1000,
	"currency": "usd",
	"payment_method": "pm_card_visa",
	"status": "authorized",
	"amount_captured": 0,
	"amount_refunded": 0,
	"psp": "default",
	"psp_reference": "auth_01J9Z6Q6H5C2Y8R1D4F7G0J3KL",
	"description": null,
	"metadata": {},
	"created_at": "2025-01-31T12:00:00.123456Z"
}`

const createBody = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

func newValidator(t *testing.T) *apitest.Validator {
	t.Helper()
	v, err := apitest.New()
	require.NoError(t, err)
	return v
}

func request(t *testing.T, method, path string, header http.Header) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	return req
}

func response(status int, header http.Header) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: header}
}

// problem builds a problem body; extra is spliced in as further members and
// must start with a comma.
func problem(status int, code, extra string) string {
	return `{"type":"about:blank","title":"t","status":` + strconv.Itoa(status) +
		`,"detail":"d","code":"` + code + `"` + extra + `}`
}

var (
	jsonCT    = http.Header{"Content-Type": {"application/json"}}
	problemCT = http.Header{"Content-Type": {"application/problem+json"}}
)

func with(h http.Header, k, v string) http.Header {
	c := h.Clone()
	c.Set(k, v)
	return c
}

func TestCheckAccepts(t *testing.T) {
	t.Parallel()

	v := newValidator(t)
	post := http.Header{"Idempotency-Key": {"k1"}, "Authorization": {"Bearer sk"}}

	tests := []struct {
		name   string
		method string
		path   string
		status int
		header http.Header
		body   string
	}{
		{"created charge", "POST", "/v1/charges", 201, jsonCT, chargeJSON},
		{"replayed charge", "POST", "/v1/charges", 201,
			with(jsonCT, "Idempotent-Replayed", "true"), chargeJSON},
		{"charge with charset", "POST", "/v1/charges", 201,
			http.Header{"Content-Type": {"application/json; charset=utf-8"}}, chargeJSON},
		{"invalid request problem", "POST", "/v1/charges", 400, problemCT,
			problem(400, "invalid_request", `,"errors":[{"field":"amount","message":"must be >= 1"}],"request_id":"r1"`)},
		{"missing key problem", "POST", "/v1/charges", 400, problemCT, problem(400, "idempotency_key_missing", "")},
		{"unauthorized", "POST", "/v1/charges", 401, with(problemCT, "WWW-Authenticate", "Bearer"), problem(401, "unauthorized", "")},
		{"declined", "POST", "/v1/charges", 402, problemCT,
			problem(402, "card_declined", `,"charge":"ch_1"`)},
		{"declined replayed", "POST", "/v1/charges", 402, with(problemCT, "Idempotent-Replayed", "true"),
			problem(402, "card_declined", `,"charge":"ch_1"`)},
		{"in use", "POST", "/v1/charges", 409, with(problemCT, "Retry-After", "1"),
			problem(409, "idempotency_key_in_use", "")},
		{"too large", "POST", "/v1/charges", 413, problemCT, problem(413, "payload_too_large", "")},
		{"mismatch", "POST", "/v1/charges", 422, problemCT, problem(422, "idempotency_key_mismatch", "")},
		{"internal", "POST", "/v1/charges", 500, problemCT, problem(500, "internal", "")},
		{"psp unavailable", "POST", "/v1/charges", 503, with(problemCT, "Retry-After", "2"),
			problem(503, "psp_unavailable", "")},
		{"get charge", "GET", "/v1/charges/ch_01J9Z6Q3W8T5N2X4V7B0K1M3PA", 200, jsonCT,
			strings.Replace(strings.Replace(chargeJSON, `"authorized"`, `"pending"`, 1),
				`"auth_01J9Z6Q6H5C2Y8R1D4F7G0J3KL"`, "null", 1)},
		{"charge not found", "GET", "/v1/charges/nope", 404, problemCT, problem(404, "not_found", "")},
		{"healthz", "GET", "/healthz", 200, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "ok\n"},
		{"readyz", "GET", "/readyz", 200, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "ok"},
		{"readyz down", "GET", "/readyz", 503, http.Header{"Content-Type": {"text/plain"}}, "not ready"},
		{"metrics", "GET", "/metrics",
			200, http.Header{"Content-Type": {"text/plain; version=0.0.4; charset=utf-8; escaping=underscores"}},
			"# HELP up x\n# TYPE up gauge\nup 1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := request(t, tt.method, tt.path, post)
			err := v.Check(req, []byte(createBody), response(tt.status, tt.header), []byte(tt.body))
			require.NoError(t, err)
		})
	}
}

func TestCheckRejects(t *testing.T) {
	t.Parallel()

	v := newValidator(t)

	tests := []struct {
		name    string
		method  string
		path    string
		status  int
		header  http.Header
		body    string
		errPart string
	}{
		{"charge missing status", "POST", "/v1/charges", 201, jsonCT,
			strings.Replace(chargeJSON, `"status": "authorized",`, "", 1), "status"},
		{"charge with unknown field", "POST", "/v1/charges", 201, jsonCT,
			strings.Replace(chargeJSON, `"object": "charge",`, `"object": "charge", "livemode": false,`, 1), "livemode"},
		{"charge with bad status", "POST", "/v1/charges", 201, jsonCT,
			strings.Replace(chargeJSON, `"authorized"`, `"succeeded"`, 1), "status"},
		{"charge with bad created_at", "POST", "/v1/charges", 201, jsonCT,
			strings.Replace(chargeJSON, `"2025-01-31T12:00:00.123456Z"`, `"31/01/2025"`, 1), "created_at"},
		{"charge as problem content type", "POST", "/v1/charges", 201, problemCT, chargeJSON, "Content-Type"},
		{"replayed header not true", "POST", "/v1/charges", 201,
			with(jsonCT, "Idempotent-Replayed", "false"), chargeJSON, "Idempotent-Replayed"},
		{"problem without code", "POST", "/v1/charges", 400, problemCT,
			`{"type":"about:blank","title":"t","status":400,"detail":"d"}`, "code"},
		{"problem with unknown code", "POST", "/v1/charges", 400, problemCT, problem(400, "oops", ""), "code"},
		{"problem code of another status", "POST", "/v1/charges", 400, problemCT,
			problem(400, "card_declined", ""), "code"},
		{"problem as plain json", "POST", "/v1/charges", 400, jsonCT,
			problem(400, "invalid_request", ""), "Content-Type"},
		{"declined without charge", "POST", "/v1/charges", 402, problemCT, problem(402, "card_declined", ""), "charge"},
		{"undocumented status", "POST", "/v1/charges", 418, problemCT, problem(418, "internal", ""), "status is not supported"},
		{"conflict without Retry-After", "POST", "/v1/charges", 409, problemCT,
			problem(409, "idempotency_key_in_use", ""), "Retry-After"},
		{"database unavailable without Retry-After", "GET", "/v1/charges/ch_1", 503, problemCT,
			problem(503, "database_unavailable", ""), "Retry-After"},
		{"problem code of no response", "GET", "/v1/charges/ch_1", 503, with(problemCT, "Retry-After", "1"),
			problem(503, "psp_unavailable", ""), "code"},
		{"Retry-After not seconds", "POST", "/v1/charges", 409,
			with(problemCT, "Retry-After", "Fri, 31 Jan 2025 12:00:00 GMT"),
			problem(409, "idempotency_key_in_use", ""), "Retry-After"},
		{"empty body", "GET", "/v1/charges/ch_1", 200, http.Header{}, "", "Content-Type"},
		{"unknown path", "GET", "/v1/payouts", 200, jsonCT, "{}", "not in openapi.yaml"},
		{"method not allowed", "DELETE", "/v1/charges/ch_1", 204, nil, "", "not in openapi.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := request(t, tt.method, tt.path, nil)
			err := v.Check(req, nil, response(tt.status, tt.header), []byte(tt.body))
			require.Error(t, err)
			require.ErrorContains(t, err, tt.errPart)
		})
	}
}

func TestCheckRequest(t *testing.T) {
	t.Parallel()

	v := newValidator(t)

	valid := http.Header{
		"Idempotency-Key": {"order-42"},
		"Content-Type":    {"application/json"},
		"Authorization":   {"Bearer sk"},
	}
	tests := []struct {
		name    string
		header  http.Header
		body    string
		wantErr bool
	}{
		{"minimal", valid, createBody, false},
		{"full", valid, `{"amount":9007199254740991,"currency":"eur","payment_method":"pm_x",
			"description":null,"metadata":{"order":"42"}}`, false},
		{"quoted key", with(valid, "Idempotency-Key", `"`+strings.Repeat("k", 255)+`"`), createBody, false},
		{"missing key", http.Header{"Content-Type": {"application/json"}}, createBody, true},
		{"key too long", with(valid, "Idempotency-Key", strings.Repeat("k", 258)), createBody, true},
		{"key with space", with(valid, "Idempotency-Key", "a b"), createBody, true},
		{"zero amount", valid, `{"amount":0,"currency":"usd","payment_method":"pm_x"}`, true},
		{"amount past 2^53-1", valid, `{"amount":9007199254740992,"currency":"usd","payment_method":"pm_x"}`, true},
		{"upper-case currency", valid, `{"amount":1,"currency":"USD","payment_method":"pm_x"}`, true},
		{"unknown field", valid, `{"amount":1,"currency":"usd","payment_method":"pm_x","capture":true}`, true},
		{"non-string metadata", valid, `{"amount":1,"currency":"usd","payment_method":"pm_x","metadata":{"a":1}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := request(t, "POST", "/v1/charges", tt.header)
			err := v.CheckRequest(req, []byte(tt.body))
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

// TestCheckIgnoresInvalidRequest pins that Check judges only the response:
// black-box tests send broken requests on purpose to see the 400.
func TestCheckIgnoresInvalidRequest(t *testing.T) {
	t.Parallel()

	v := newValidator(t)
	req := request(t, "POST", "/v1/charges", nil) // no key, no auth, no content type
	resp := response(400, problemCT)

	err := v.Check(req, []byte(`{"amount":-1,`), resp, []byte(problem(400, "idempotency_key_missing", "")))
	require.NoError(t, err)
	require.Error(t, v.CheckRequest(req, []byte(`{"amount":-1,`)))
}
