package history

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTransportRecordsWhatTheClientSaw: the request, the whole answer, the
// replay header, the tenant by name (never the secret), and a request cut
// off as one without an answer; the client reads the same bytes as without
// the recorder.
func TestTransportRecordsWhatTheClientSaw(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/charges":
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"ch_1"}`)
		case "/v1/refunds":
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"code":"idempotency_key_mismatch"}`)
		default:
			// Promise a body, send half of it, and hang up.
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"id":`)
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)

	log := NewLog()
	log.NameTenant("sk_secret", "chaos")
	hc := &http.Client{Transport: log.Transport(http.DefaultTransport)}
	send := func(path, key, body string) (string, error) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk_secret")
		req.Header.Set("Idempotency-Key", key)
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	got, err := send("/v1/charges", `"k1"`, `{"amount":1}`)
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"ch_1"}`, got)
	_, err = send("/v1/refunds", "k1", `{}`)
	require.NoError(t, err)
	got, err = send("/cut", "k2", `{}`)
	require.Error(t, err, "the client sees the cut as it would without the recorder")
	require.Equal(t, `{"id":`, got)

	req, err := http.NewRequest(http.MethodPost, "http://"+closedAddr(t)+"/v1/charges", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k3")
	_, err = hc.Do(req)
	require.Error(t, err)

	ops := log.Ops()
	require.Len(t, ops, 4)
	require.False(t, ops[2].Unsent, "the cut request was sent")
	require.True(t, ops[3].Unsent, "a refused connection sent nothing: %s", ops[3].Err)
	require.Equal(t, "key-"+digest(nil)[:8], ops[3].Tenant, "a request without a named key is recorded under a hash")
	require.Equal(t, "chaos", ops[0].Tenant)
	require.Equal(t, "k1", ops[0].Key, "the structured-field quotes are not part of the key")
	require.Equal(t, `{"amount":1}`, ops[0].Body)
	require.Equal(t, http.StatusCreated, ops[0].Status)
	require.True(t, ops[0].Replayed)
	require.Equal(t, digest([]byte(`{"id":"ch_1"}`)), ops[0].Answer)
	require.Less(t, ops[0].Call, ops[0].Return)
	require.LessOrEqual(t, ops[0].Return, ops[1].Call)
	require.Equal(t, "idempotency_key_mismatch", ops[1].Code)
	require.False(t, ops[2].Answered())
	require.Zero(t, ops[2].Return)
	require.NotEmpty(t, ops[2].Err)

	path := filepath.Join(t.TempDir(), "history.jsonl.gz")
	require.NoError(t, WriteFile(path, ops, log.Bodies()))
	back, bodies, err := ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, ops, back)
	require.Equal(t, `{"id":"ch_1"}`, bodies[ops[0].Answer])
}

// TestBooksCountAuthorizationsOverEveryPSP: one authorization per charge at
// each of two PSPs is kept; the same charge authorized at both is not.
func TestBooksCountAuthorizationsOverEveryPSP(t *testing.T) {
	t.Parallel()
	mock := func(body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/_admin/authorizations" {
				http.NotFound(w, r)
				return
			}
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	primary := mock(`{"data":[{"id":"auth_1","reference":"ch_a","status":"authorized"},{"id":"auth_2","reference":"ch_b","status":"declined"}]}`)
	secondary := mock(`{"data":[{"id":"auth_3","reference":"ch_b","status":"authorized"}]}`)
	b, err := ReadBooks(t.Context(), map[string]string{"primary": primary, "secondary": secondary})
	require.NoError(t, err)
	require.True(t, b.Kept(), b.Line())
	require.Equal(t, 2, b.Charges)
	require.Contains(t, b.Line(), "at most one PSP holds an authorization per charge")

	twice := mock(`{"data":[{"id":"auth_4","reference":"ch_a","status":"authorized"}]}`)
	b, err = ReadBooks(t.Context(), map[string]string{"primary": primary, "secondary": twice})
	require.NoError(t, err)
	require.False(t, b.Kept())
	require.Equal(t, []string{"ch_a: primary auth_1, secondary auth_4"}, b.Over)
	require.Contains(t, b.Line(), "NOT at most one")

	_, err = ReadBooks(t.Context(), map[string]string{"gone": "http://" + closedAddr(t)})
	require.Error(t, err)
}

func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
