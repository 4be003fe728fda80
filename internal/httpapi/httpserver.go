package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// The contract's limits on what one client may hold of the server ("The
// HTTP API in general").
const (
	// HeaderTimeoutDefault: a client that has not sent its request line and
	// headers within it is disconnected.
	HeaderTimeoutDefault = 10 * time.Second
	// BodyTimeoutDefault: a client that has not sent its whole body within
	// it, counted from the end of its headers, is disconnected.
	BodyTimeoutDefault = 30 * time.Second
	// IdleTimeoutDefault: a keep-alive connection that sends no new request
	// for this long is closed.
	IdleTimeoutDefault = 120 * time.Second
	// MaxHeaderBytesDefault bounds the request line and headers. The
	// largest legitimate ones (a bearer key, a 255-character
	// Idempotency-Key, a 128-character X-Request-Id, trace context) are far
	// smaller; net/http answers a larger one with 431 itself, before any
	// handler runs.
	MaxHeaderBytesDefault = 16 << 10
)

// ServerConfig bounds the connections of NewServer's server. Zero fields
// take the contract's defaults; tests shorten them.
type ServerConfig struct {
	// HeaderTimeout is the time allowed for the request line and headers,
	// counted from the request's first byte. Default HeaderTimeoutDefault.
	HeaderTimeout time.Duration
	// BodyTimeout is the time allowed for the request body, counted from
	// the end of the headers. Default BodyTimeoutDefault.
	BodyTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request. Default IdleTimeoutDefault.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers, in bytes.
	// Default MaxHeaderBytesDefault.
	MaxHeaderBytes int
	// ErrorLog receives net/http's own complaints; nil: the log package's
	// standard logger.
	ErrorLog *log.Logger
}

// NewServer returns the http.Server that serves h within cfg's limits.
//
// net/http alone would let a client hold a connection and its goroutine for
// as long as it likes: ReadHeaderTimeout bounds only the headers, and
// ReadTimeout, the only bound on the body, counts from the first byte of
// the request, so it cannot say "30 s for the body" after a slow header.
// The body's deadline is therefore set by a wrapper of h once the headers
// are in, and lifted when the body has been read, so that it never cuts a
// slow answer short.
func NewServer(h http.Handler, cfg ServerConfig) *http.Server {
	return &http.Server{
		Handler:           bodyDeadline(h, cmp.Or(cfg.BodyTimeout, BodyTimeoutDefault)),
		ReadHeaderTimeout: cmp.Or(cfg.HeaderTimeout, HeaderTimeoutDefault),
		IdleTimeout:       cmp.Or(cfg.IdleTimeout, IdleTimeoutDefault),
		MaxHeaderBytes:    cmp.Or(cfg.MaxHeaderBytes, MaxHeaderBytesDefault),
		ErrorLog:          cfg.ErrorLog,
	}
}

// errBodyTimeout is a body read cut off by the body deadline. A handler
// that meets it answers nothing: writeError aborts the connection.
var errBodyTimeout = errors.New("request body not received in time")

// bodyDeadline sets the connection's read deadline to now+d for a request
// with a body, and lifts it once the body has been read to its end.
func bodyDeadline(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			// An error means w cannot set deadlines (not a net/http
			// connection, e.g. a test's recorder): nothing to bound.
			if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline at the body's end. After it the
// server reads the connection only to notice the client going away, which
// must not cancel a request that takes longer than the body deadline.
type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.lifted:
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = errors.Join(errBodyTimeout, err)
	}
	return n, err
}

// MetricsListener serves GET /metrics on a listener of its own
// (METRICS_ADDR, REAPER_METRICS_ADDR), so that a public API port does not
// expose the process's internals, and remembers the address it bound (an
// addr of port 0 picks a free one; tests read it). It has the API's
// connection limits: a scraper is a client like any other. Every process
// that serves metrics holds one; the zero value is ready to use.
type MetricsListener struct {
	mu   sync.Mutex
	addr string
}

// Serve serves h on addr until stop is called.
func (l *MetricsListener) Serve(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := NewServer(mux, ServerConfig{})
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", "error", err.Error())
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	l.mu.Lock()
	l.addr = ln.Addr().String()
	l.mu.Unlock()
	return func() { _ = srv.Shutdown(context.Background()) }, nil
}

// Addr returns the address Serve listens on, or "" before it does.
func (l *MetricsListener) Addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}
