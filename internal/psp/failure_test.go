package psp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

// internalBody is what a proxy in front of a PSP may answer: a page that
// names internal hosts and addresses.
const internalBody = `<html>upstream psp-core.internal.corp (10.1.2.3:8443) unavailable; resolver 10.0.0.53:53</html>`

// closedURL returns a URL on which nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

// TestLastErrorNamesNoInternalAddress: every PSP failure carries public
// words (a Failure) classified from what happened, never from the error's
// text: the words name no host, address, port, URL or answer body, while
// the raw cause keeps them for operators. Before, the error's text was the
// only description, and it became the tenant's last_error verbatim:
// `Get "http://127.0.0.1:…/v1/authorizations?reference=ch_…": dial tcp …:
// connection refused`, or the PSP's raw 503 body.
func TestLastErrorNamesNoInternalAddress(t *testing.T) {
	t.Parallel()

	answer := func(status int, body string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) { http.Error(w, body, status) }
	}
	tests := []struct {
		name string
		// post answers the authorization; nil: the mock does.
		post func(w http.ResponseWriter)
		// hang: authorizations are answered only once the client gives up.
		hang bool
		// lookups answered 503 with internalBody.
		failLookups bool
		// unreachable: nothing listens at the base URL.
		unreachable bool
		cfg         psp.ClientConfig
		words       string
		raw         string // part of the raw cause
	}{
		{name: "Unreachable", unreachable: true, words: psp.ReasonUnreachable, raw: "connection refused"},
		{name: "ServiceUnavailableNamingInternalHost", post: answer(503, internalBody), words: "PSP answered 503",
			raw: "psp-core.internal.corp"},
		{name: "LookupAnswered503", post: answer(503, internalBody), failLookups: true, words: "PSP answered 503",
			raw: "10.0.0.53"},
		{name: "TimedOut", hang: true,
			cfg: psp.ClientConfig{AttemptTimeout: 50 * time.Millisecond, MaxAttempts: 1}, words: psp.ReasonTimedOut,
			raw: "deadline exceeded"},
		{name: "ConnectionLost", post: func(w http.ResponseWriter) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}, cfg: psp.ClientConfig{MaxAttempts: 1}, words: psp.ReasonConnectionLost, raw: "EOF"},
		{name: "Malformed", post: func(w http.ResponseWriter) { _, _ = w.Write([]byte(internalBody)) },
			cfg: psp.ClientConfig{MaxAttempts: 1}, words: psp.ReasonMalformed, raw: "psp-core.internal.corp"},
		{name: "Redirect", post: func(w http.ResponseWriter) {
			w.Header().Set("Location", "http://10.1.2.3/")
			w.WriteHeader(http.StatusFound)
		}, cfg: psp.ClientConfig{MaxAttempts: 1}, words: "PSP answered 302", raw: "302"},
		{name: "Busy", post: answer(429, internalBody), cfg: psp.ClientConfig{MaxAttempts: 1}, words: "PSP busy (429)",
			raw: "10.1.2.3"},
		{name: "RefusedWithoutReason", post: answer(400, internalBody), words: "PSP refused the request (400)",
			raw: "psp-core.internal.corp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var client *psp.Client
			if tt.unreachable {
				var err error
				client, err = psp.NewClient(psp.ClientConfig{BaseURL: closedURL(t), InitialBackoff: time.Millisecond,
					MaxBackoff: 5 * time.Millisecond, HTTPClient: psp.NewHTTPClient(psp.NewTransport())})
				require.NoError(t, err)
			} else {
				client = setupClient(t, mockpsp.Config{}, tt.cfg, func(_ int, w http.ResponseWriter, r *http.Request) bool {
					switch {
					case r.Method == http.MethodPost && tt.hang:
						// Read to the end: only then does the server see the
						// client hang up, and cancel r's context.
						_, _ = io.Copy(io.Discard, r.Body)
						<-r.Context().Done()
						return true
					case r.Method == http.MethodPost && tt.post != nil:
						tt.post(w)
						return true
					case r.Method == http.MethodGet && tt.failLookups:
						http.Error(w, internalBody, http.StatusServiceUnavailable)
						return true
					}
					return false
				}).client
			}
			out, err := client.AuthorizeOutcome(t.Context(), visaRequest("k1"))
			require.Error(t, err)
			f, ok := errors.AsType[*psp.Failure](err)
			require.True(t, ok, "%T %v carries no Failure", err, err)
			require.Equal(t, tt.words, f.Public)
			require.Equal(t, out.Class, f.Class)
			requireNothingInternal(t, f.Public)
			requireNothingInternal(t, out.Reason)
			require.ErrorContains(t, err, tt.raw, "the raw cause is kept for operators")
		})
	}
}

// requireNothingInternal fails if s names an address, a port, a URL or the
// internal names of internalBody.
func requireNothingInternal(t *testing.T, s string) {
	t.Helper()
	for _, bad := range []string{"127.0.0.1", "10.", "internal", "http", ":", "resolver", "<html>"} {
		require.NotContains(t, s, bad, "%q", s)
	}
}

// TestConfiguredURLCredentialsAreNeverLogged: the raw cause names the PSP
// by its configured URL without user information or query, where
// net/http's *url.Error quoted both (and the query of the base URL was
// appended after a lookup's own, making `?token=…?reference=…`).
func TestConfiguredURLCredentialsAreNeverLogged(t *testing.T) {
	t.Parallel()
	base := strings.Replace(closedURL(t), "http://", "http://operator:s3cret@", 1) + "/psp?token=t0ken"
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: base, MaxAttempts: 1, HTTPClient: psp.NewHTTPClient(psp.NewTransport())})
	require.NoError(t, err)
	for _, call := range []func() error{
		func() error { _, err := client.AuthorizeOutcome(t.Context(), resumed(visaRequest("k1"))); return err },
		func() error { _, err := client.AuthorizeOutcome(t.Context(), visaRequest("k1")); return err },
		func() error { _, err := client.Lookup(t.Context(), "ch_1"); return err },
	} {
		err := call()
		require.ErrorIs(t, err, psp.ErrUnavailable)
		for _, secret := range []string{"operator", "s3cret", "t0ken"} {
			require.NotContains(t, err.Error(), secret)
		}
		require.ErrorContains(t, err, "/psp/v1/authorizations", "the PSP is still named, for operators")
	}

	_, err = psp.NewClient(psp.ClientConfig{BaseURL: "ftp://operator:s3cret@psp/?token=t0ken"})
	require.ErrorContains(t, err, "ftp://psp/")
	require.NotContains(t, err.Error(), "s3cret")
	_, err = psp.NewClient(psp.ClientConfig{BaseURL: "http://operator:s3cret@psp:bad port/"})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")

	require.Equal(t, "https://psp.example:8443/base", psp.RedactURL("https://u:p@psp.example:8443/base?key=k#frag"))
	require.Equal(t, "(unparseable URL)", psp.RedactURL("http://u:p@h:x/"))
}

// TestLookupKeepsTheBaseURLsQuery: a lookup's reference joins the query a
// configured base URL has, rather than following it after a second "?".
func TestLookupKeepsTheBaseURLsQuery(t *testing.T) {
	t.Parallel()
	got := make(chan url.Values, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Query()
		_, _ = w.Write([]byte(`{"data":[]}`))
	}))
	t.Cleanup(srv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: srv.URL + "/?account=a1", HTTPClient: psp.NewHTTPClient(psp.NewTransport())})
	require.NoError(t, err)
	list, err := client.Lookup(context.Background(), "ch_1")
	require.NoError(t, err)
	require.Empty(t, list)
	require.Equal(t, url.Values{"account": {"a1"}, "reference": {"ch_1"}}, <-got)
}

// TestPSPReasonIsItsReasonFieldOnly: the 402's detail may carry the PSP's
// reason field, on one printable line of bounded length, never a body of
// another shape.
func TestPSPReasonIsItsReasonFieldOnly(t *testing.T) {
	t.Parallel()
	require.Equal(t, "card_invalid: no such card", psp.PSPReason([]byte(`{"error":{"code":"card_invalid","message":"no such card"}}`)))
	require.Equal(t, "no such card", psp.PSPReason([]byte(`{"error":{"message":"no such card"}}`)))
	require.Equal(t, "a b", psp.PSPReason([]byte(`{"error":{"message":"a\nb"}}`)))
	require.Empty(t, psp.PSPReason([]byte(internalBody)))
	require.Empty(t, psp.PSPReason([]byte(`{"message":"10.1.2.3 down"}`)))
	long := psp.PSPReason([]byte(`{"error":{"message":"` + strings.Repeat("é", 500) + `"}}`))
	require.Len(t, []rune(long), psp.MaxReasonRunes+3)
}
