package httpapi_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/httpapi"
)

// short are limits small enough for a test to wait them out, far apart
// enough to tell which one cut a connection.
var short = httpapi.ServerConfig{
	HeaderTimeout: 300 * time.Millisecond,
	BodyTimeout:   600 * time.Millisecond,
	IdleTimeout:   400 * time.Millisecond,
}

// serve runs NewServer(h, cfg) on a free port until the test ends and
// returns its address.
func serve(t *testing.T, h http.Handler, cfg httpapi.ServerConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httpapi.NewServer(h, cfg)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-done, http.ErrServerClosed)
	})
	return ln.Addr().String()
}

// readBody answers 200 with the body's length once it has read all of it.
var readBody = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return // a server that could not read the body has nothing to say
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, strings.Repeat("x", len(b)))
})

// trickle writes the prefix, then one byte of rest every 50ms until it has
// written it all or the server closes the connection, and returns how long
// after the prefix the server took to close it (reads see EOF or a reset).
// It fails the test if the server has not closed it within limit.
func trickle(t *testing.T, addr, prefix, rest string, limit time.Duration) time.Duration {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, prefix)
	require.NoError(t, err)
	start := time.Now()

	closed := make(chan time.Duration, 1)
	go func() {
		_, _ = io.Copy(io.Discard, conn) // until EOF or an error: the server closed
		closed <- time.Since(start)
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(limit)
	for i := 0; ; {
		select {
		case d := <-closed:
			return d
		case <-deadline:
			require.FailNow(t, "the server still holds the connection", "after %s", limit)
		case <-tick.C:
			if i < len(rest) {
				_, _ = conn.Write([]byte{rest[i]}) // fails once the server closed; the reader reports that
				i++
			}
		}
	}
}

// A client that sends its headers and then its body a byte at a time held
// a connection and a goroutine for as long as it liked: the server set
// only ReadHeaderTimeout. It is cut off BodyTimeout after its headers.
func TestSlowBodyClientIsDisconnected(t *testing.T) {
	t.Parallel()
	addr := serve(t, readBody, short)
	body := strings.Repeat("b", 1000) // 50 s at a byte per 50ms
	headers := "POST /v1/charges HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
	took := trickle(t, addr, headers, body, 10*time.Second)
	require.GreaterOrEqual(t, took, short.BodyTimeout-50*time.Millisecond, "cut off by the body timeout, not before")
	require.Less(t, took, short.BodyTimeout+5*time.Second)

	// A body sent at once is read, and an answer slower than the body
	// timeout is not cut short by it.
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The handler runs on the server's goroutine, where a failed
		// assertion could not stop the test: a read error is answered,
		// and the test's own checks of the answer fail on it.
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusInternalServerError)
			return
		}
		select {
		case <-time.After(2 * short.BodyTimeout):
		case <-r.Context().Done():
			http.Error(w, "request context cancelled", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "done")
	})
	resp, err := http.Post("http://"+serve(t, slow, short), "application/json", strings.NewReader(`{"a":1}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", b)
	require.Equal(t, "done", string(b))
}

// A client that sends its headers a line at a time is cut off
// HeaderTimeout after its first byte.
func TestSlowHeaderClientIsDisconnected(t *testing.T) {
	t.Parallel()
	addr := serve(t, readBody, short)
	took := trickle(t, addr, "GET /healthz HTTP/1.1\r\n", strings.Repeat("X-Slow: 1\r\n", 200), 10*time.Second)
	require.Less(t, took, short.HeaderTimeout+5*time.Second)
}

// Idle keep-alive connections were never closed (500 of them were held).
// One that sends no new request is closed IdleTimeout after its last
// answer.
func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	t.Parallel()
	addr := serve(t, readBody, short)
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.False(t, resp.Close, "a keep-alive connection")

	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server closes the idle connection")
	took := time.Since(start)
	require.GreaterOrEqual(t, took, short.IdleTimeout-50*time.Millisecond)
	require.Less(t, took, short.IdleTimeout+5*time.Second)
}

// Header size is bounded: net/http's default is 1 MiB per request.
func TestOversizedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	addr := serve(t, readBody, httpapi.ServerConfig{})
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("a", 2*httpapi.MaxHeaderBytesDefault))
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err == nil {
		defer resp.Body.Close()
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	} else {
		// The server may close before the client has written it all.
		require.True(t, errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe"), "%v", err)
	}

	// Headers of the largest legitimate size pass.
	req.Header.Set("X-Big", strings.Repeat("a", httpapi.MaxHeaderBytesDefault/2))
	resp, err = client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// The defaults are the contract's.
func TestServerLimitsDefaultToTheContracts(t *testing.T) {
	t.Parallel()
	srv := httpapi.NewServer(readBody, httpapi.ServerConfig{})
	require.Equal(t, 10*time.Second, srv.ReadHeaderTimeout)
	require.Equal(t, 120*time.Second, srv.IdleTimeout)
	require.Equal(t, 30*time.Second, httpapi.BodyTimeoutDefault)
	require.Equal(t, httpapi.MaxHeaderBytesDefault, srv.MaxHeaderBytes)
	require.Zero(t, srv.ReadTimeout, "the body's deadline counts from the end of the headers, not from the first byte")
}
