package psp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// breakingServer answers the first request on each connection and keeps
// the connection alive, then closes it on the second request, after
// reading it and before answering: a keep-alive connection that fails on
// reuse, which is when net/http resends a request it deems replayable.
type breakingServer struct {
	url      string
	received atomic.Int64 // requests read, on every connection
}

func startBreakingServer(t *testing.T) *breakingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &breakingServer{url: "http://" + ln.Addr().String()}

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { s.serve(conn) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *breakingServer) serve(conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.received.Add(1)
		if n == 2 {
			return // read, not answered: the reused connection breaks
		}
		body := `{"data":[]}`
		if req.Method == http.MethodPost {
			body = `{"id":"auth_1","status":"authorized","decline_code":null,"reference":"ch_1"}`
		}
		_, _ = fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
}

// connTrace makes the test deterministic: net/http puts a connection back
// in its idle pool asynchronously, so a second request sent at once might
// dial a new connection instead of reusing the one that will break.
type connTrace struct {
	idle   chan struct{} // receives when a connection goes back to the pool
	reused atomic.Bool   // whether the last request got a reused connection
}

func newConnTrace() *connTrace { return &connTrace{idle: make(chan struct{}, 8)} }

func (c *connTrace) ctx(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { c.reused.Store(info.Reused) },
		PutIdleConn: func(err error) {
			if err == nil {
				c.idle <- struct{}{}
			}
		},
	})
}

func (c *connTrace) waitIdle(t *testing.T) {
	t.Helper()
	select {
	case <-c.idle:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the connection never went back to the pool")
	}
}

// drain reads the answer whole, which is what lets net/http put the
// connection back in its pool for reuse.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// TestTransportNeverResendsPSPRequests: net/http resends a POST carrying
// Idempotency-Key by itself when a reused keep-alive connection breaks
// before the answer; a resend our code never decided, without the lookup
// that must precede it. Every PSP request must reach the PSP exactly once
// per send our code makes.
func TestTransportNeverResendsPSPRequests(t *testing.T) {
	t.Parallel()

	// The pitfall itself, so this test is known to be able to fail: a
	// plain http.Transport turns two calls into three requests, and the
	// second call even "succeeds".
	t.Run("PlainTransportResends", func(t *testing.T) {
		t.Parallel()
		s := startBreakingServer(t)
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		trace := newConnTrace()
		for i := range 2 {
			req, err := http.NewRequestWithContext(trace.ctx(t.Context()), http.MethodPost, s.url+"/v1/authorizations", bytes.NewReader([]byte(`{}`)))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "ch_1:authorize")
			resp, err := (&http.Client{Transport: tr}).Do(req)
			require.NoError(t, err)
			drain(resp)
			if i == 0 {
				trace.waitIdle(t)
			}
		}
		require.Equal(t, int64(3), s.received.Load())
	})

	clients := map[string]func() *http.Client{
		"Transport":         func() *http.Client { return NewHTTPClient(NewTransport()) },
		"WrappedByOtelhttp": func() *http.Client { return NewHTTPClient(otelhttp.NewTransport(NewTransport())) },
	}
	for name, newHTTPClient := range clients {
		t.Run(name+"/Authorize", func(t *testing.T) {
			t.Parallel()
			s := startBreakingServer(t)
			hc := newHTTPClient()
			t.Cleanup(hc.CloseIdleConnections)
			c, err := NewClient(ClientConfig{BaseURL: s.url, HTTPClient: hc})
			require.NoError(t, err)

			req := visaRequest("ch_1:authorize")
			trace := newConnTrace()
			out, err := c.AuthorizeOnce(trace.ctx(t.Context()), req)
			require.NoError(t, err)
			require.Equal(t, ClassSuccess, out.Class)
			trace.waitIdle(t)

			out, err = c.AuthorizeOnce(trace.ctx(t.Context()), req)
			require.True(t, trace.reused.Load(), "the case under test: a reused connection breaks")
			require.ErrorIs(t, err, ErrUnavailable)
			require.Equal(t, ClassUnknown, out.Class, "the connection broke after the request was sent")
			require.Equal(t, int64(2), s.received.Load(), "exactly one request per call")
		})

		t.Run(name+"/Lookup", func(t *testing.T) {
			t.Parallel()
			s := startBreakingServer(t)
			hc := newHTTPClient()
			t.Cleanup(hc.CloseIdleConnections)
			c, err := NewClient(ClientConfig{BaseURL: s.url, HTTPClient: hc})
			require.NoError(t, err)
			for range 3 {
				_, err := c.Lookup(t.Context(), "ch_1")
				require.NoError(t, err, "a lookup never reuses a connection, so none breaks")
			}
			require.Equal(t, int64(3), s.received.Load())
		})

		// A request built elsewhere, with GetBody set by http.NewRequest,
		// is still sent once: the transport alone guarantees it.
		t.Run(name+"/RequestWithGetBody", func(t *testing.T) {
			t.Parallel()
			s := startBreakingServer(t)
			hc := newHTTPClient()
			t.Cleanup(hc.CloseIdleConnections)
			var errs []error
			trace := newConnTrace()
			for i := range 2 {
				if i == 1 {
					trace.waitIdle(t)
				}
				req, err := http.NewRequestWithContext(trace.ctx(t.Context()), http.MethodPost, s.url+"/v1/authorizations", bytes.NewReader([]byte(`{}`)))
				require.NoError(t, err)
				require.NotNil(t, req.GetBody)
				req.Header.Set("Idempotency-Key", "ch_1:authorize")
				resp, err := hc.Do(req)
				if err == nil {
					drain(resp)
				}
				errs = append(errs, err)
			}
			require.NoError(t, errs[0])
			require.Error(t, errs[1])
			require.Equal(t, int64(2), s.received.Load())
		})
	}
}

// countingConn counts the writes made on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestTransportWritesARequestAtOnce: a POST wrapped by otelhttp, whose body
// net/http does not know to be in memory, still goes out in one write
// (headers and body together), and otelhttp still counts its body's bytes.
func TestTransportWritesARequestAtOnce(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"id":"auth_1","status":"authorized","decline_code":null,"reference":"ch_1"}`)
	}))
	t.Cleanup(srv.Close)

	var writes atomic.Int64
	tr := NewTransport()
	dial := tr.keepAlive.DialContext
	tr.keepAlive.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: conn, writes: &writes}, nil
	}
	t.Cleanup(tr.CloseIdleConnections)
	reader := sdkmetric.NewManualReader()
	hc := NewHTTPClient(otelhttp.NewTransport(tr, otelhttp.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))))
	c, err := NewClient(ClientConfig{BaseURL: srv.URL, HTTPClient: hc})
	require.NoError(t, err)

	req := visaRequest("ch_1:authorize")
	out, err := c.AuthorizeOnce(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, ClassSuccess, out.Class)
	require.Equal(t, int64(1), writes.Load(), "headers and body in one write")

	body, err := json.Marshal(req)
	require.NoError(t, err)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	var size int64 = -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[int64]); ok && m.Name == "http.client.request.body.size" {
				size = h.DataPoints[0].Sum
			}
		}
	}
	require.Equal(t, int64(len(body)), size, "otelhttp counts the body it sent")
}

// TestTransportRefusesABodyLongerThanDeclared: a body that does not match
// its ContentLength is an error, as net/http itself makes it.
func TestTransportRefusesABodyLongerThanDeclared(t *testing.T) {
	t.Parallel()
	for _, length := range []int64{3, 5} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1:1/", io.NopCloser(strings.NewReader("abcd")))
		require.NoError(t, err)
		req.ContentLength = length
		_, err = NewTransport().RoundTrip(req)
		require.ErrorContains(t, err, "ContentLength")
	}
}

// visaRequest is a charge's first attempt: nothing sent before.
func visaRequest(key string) AuthorizeRequest {
	return AuthorizeRequest{IdempotencyKey: key, FirstSend: true, Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa", Reference: "ch_1"}
}
