package main

// Nothing internal reaches a tenant (docs/api.md, "Why a request did not
// finish"): what a tenant can read says what happened in stable words; the
// raw cause, which names internal hosts and quotes the PSP, is for
// operators (logs, `requests show`), and even there a configured URL
// carries no credentials or query.

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// internalAnswer is a PSP (or the proxy in front of it) answering 503 with
// a page that names internal hosts, addresses and its resolver.
const internalAnswer = `<html>upstream psp-core.internal.corp (10.1.2.3:8443) unavailable; resolver 10.0.0.53:53</html>`

// internalWords are what must never reach a tenant: the address of an
// unreachable PSP is added per case.
var internalWords = []string{"psp-core", "internal.corp", "10.1.2.3", "10.0.0.53", "resolver", "<html>", "dial tcp",
	"connection refused", "http://", "127.0.0.1", "s3cret", "t0ken", "operator:"}

// closedPSPURL is a PSP URL, with credentials and a query, on which nothing
// listens.
func closedPSPURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://operator:s3cret@" + addr + "/?token=t0ken"
}

// withPSP makes the api use a PSP client on url instead of its embedded
// mock, and give requests up after a second.
func withPSP(url string) func(*Main) {
	return func(m *Main) {
		m.Config.GiveUpAfter = time.Second
		m.WrapPSP = func(charges.Authorizer) (charges.Authorizer, error) {
			return psp.NewClient(psp.ClientConfig{BaseURL: url, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
		}
	}
}

// requireClean fails if what a tenant read names anything internal.
func requireClean(t *testing.T, what string, body []byte) {
	t.Helper()
	for _, w := range internalWords {
		require.NotContains(t, string(body), w, "%s: %s", what, body)
	}
}

// TestLastErrorNamesNoInternalAddress: last_error (GET
// /v1/idempotency_keys/{key} and its list), the request.needs_attention
// event and the problem bodies carried the PSP client's error verbatim:
// `Get "http://127.0.0.1:…/v1/authorizations?reference=ch_…": dial tcp …:
// connection refused`, or the PSP's raw 503 body. They now carry stable
// words; `requests show` keeps the raw cause, for operators.
func TestLastErrorNamesNoInternalAddress(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		url   func(t *testing.T) string
		words string
		raw   string // in the operator's view
	}{
		{"Unreachable", closedPSPURL, "PSP unreachable", "connection refused"},
		{"AnswersWithInternalHost", func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, internalAnswer, http.StatusServiceUnavailable)
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		}, "PSP answered 503", "psp-core.internal.corp"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := tt.url(t)
			b := setup(t, withPSP(url))
			const key = "leak-1"

			first := b.post(t, key, visaBody)
			requireProblem(t, first, http.StatusServiceUnavailable, "psp_unavailable")
			requireClean(t, "503", first.body)
			status, _, body := b.do(t, http.MethodGet, "/v1/idempotency_keys/"+key, nil, nil)
			require.Equal(t, http.StatusOK, status)
			requireClean(t, "key", body)
			var doc keyDoc
			require.NoError(t, json.Unmarshal(body, &doc))
			require.Equal(t, "unfinished", doc.State)
			require.NotNil(t, doc.LastError)
			require.Equal(t, tt.words, *doc.LastError)

			// Past GIVE_UP_AFTER, the next failed attempt gives it up.
			waitDB(t, b, `SELECT next_attempt_at <= now() AND created_at <= now() - interval '1 second'
  FROM idempotency_keys WHERE key = $1`, key)
			given := b.post(t, key, visaBody)
			requireProblem(t, given, http.StatusServiceUnavailable, "payment_unresolved")
			requireClean(t, "503 unresolved", given.body)

			status, _, body = b.do(t, http.MethodGet, "/v1/events?type=request.needs_attention", nil, nil)
			require.Equal(t, http.StatusOK, status)
			requireClean(t, "events", body)
			var page struct {
				Data []struct {
					Data struct {
						Object keyDoc `json:"object"`
					} `json:"data"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(body, &page))
			require.Len(t, page.Data, 1)
			require.Equal(t, tt.words, *page.Data[0].Data.Object.LastError)
			for _, path := range []string{"/v1/idempotency_keys/" + key, "/v1/idempotency_keys"} {
				status, _, body = b.do(t, http.MethodGet, path, nil, nil)
				require.Equal(t, http.StatusOK, status)
				requireClean(t, path, body)
				require.Contains(t, string(body), `"last_error":"`+tt.words+`"`)
			}

			// The operator sees both.
			code, out, errOut := b.cli(t, url, "requests", "show", "acme", key, "--json")
			require.Equal(t, 0, code, errOut)
			var shown struct {
				LastError       string `json:"last_error"`
				LastErrorDetail string `json:"last_error_detail"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &shown))
			require.Equal(t, tt.words, shown.LastError)
			require.Contains(t, shown.LastErrorDetail, tt.raw)
			code, out, errOut = b.cli(t, url, "requests", "list", "--json")
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, `"last_error_detail":`)

			// Neither the operator's view nor the logs hold the URL's
			// credentials or query.
			for _, secret := range []string{"s3cret", "t0ken"} {
				require.NotContains(t, out, secret)
				require.NotContains(t, b.logs.String(), secret)
			}
		})
	}
}

// TestConfiguredURLCredentialsAreNeverLogged: PSP_URL and PSPS were
// logged verbatim, credentials and query included: by the start-up line,
// and by every PSP error, which quoted the URL it was sent to; a refused
// one was quoted whole in the one-line reason.
func TestConfiguredURLCredentialsAreNeverLogged(t *testing.T) {
	t.Parallel()
	url := closedPSPURL(t)
	for _, vars := range []map[string]string{
		{"PSP_URL": url},
		{"PSPS": "a=" + url + ",b=http://operator:s3cret@127.0.0.1:1/b?token=t0ken", "PSP_ROUTING": "*:a>b"},
	} {
		vars["DATABASE_URL"], vars["API_ADDR"] = testdb.NewURL(t), "127.0.0.1:0"
		cfg, err := ParseEnv(func(k string) string { return vars[k] })
		require.NoError(t, err)
		logs := &lockedBuffer{}
		addr := runAPI(t, cfg, logs)
		_, key := newTenantKey(t, testdb.Pool(t, vars["DATABASE_URL"], time.Time{}), "acme")

		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/charges", strings.NewReader(visaBody))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", "creds-1")
		client := &http.Client{Transport: &http.Transport{}}
		resp, err := client.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		client.CloseIdleConnections()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

		log := logs.String()
		require.Contains(t, log, `"msg":"api listening"`)
		require.Contains(t, log, "connection refused", "the raw cause is logged, for operators")
		for _, secret := range []string{"s3cret", "t0ken", "operator"} {
			require.NotContains(t, log, secret)
		}
	}

	// A refused URL is named without its credentials.
	for _, vars := range []map[string]string{
		{"PSP_URL": "ftp://operator:s3cret@psp/?token=t0ken"},
		{"PSPS": "a=ftp://operator:s3cret@psp/?token=t0ken", "PSP_ROUTING": "*:a"},
	} {
		var stdout, stderr lockedBuffer
		code := run([]string{"serve"}, func(k string) string { return vars[k] }, &stdout, &stderr)
		require.NotZero(t, code)
		require.Contains(t, stderr.String(), "ftp://psp/")
		for _, secret := range []string{"s3cret", "t0ken", "operator"} {
			require.NotContains(t, stderr.String(), secret)
		}
	}
}

// runAPI starts Main on cfg, its log in logs, and returns its address; it
// stops when the test ends.
func runAPI(t *testing.T, cfg Config, logs *lockedBuffer) string {
	t.Helper()
	m := &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-runErr)
	})
	return waitAddr(t, m, runErr)
}
