package psp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// MaxIdleConnsPerHostDefault is how many idle keep-alive connections the
// transport keeps to the PSP. net/http's default of 2 would make every
// other call under load open (and leave in TIME_WAIT) a new connection.
const MaxIdleConnsPerHostDefault = 64

// Transport is the http.RoundTripper for PSP requests: it sends every
// request at most once, however a connection fails. Build it with
// NewTransport; wrap it (otelhttp) as you like.
//
// Why: http.Transport resends a request by itself when a reused keep-alive
// connection breaks before the answer, if it thinks the request is
// replayable (net/http Request.isReplayable): a GET, or any request
// carrying an Idempotency-Key or X-Idempotency-Key header, as long as its
// body is absent or can be rewound with GetBody, which
// http.NewRequest sets for bytes and strings readers. Every
// authorization carries Idempotency-Key, so a stale keep-alive connection
// made net/http resend it, invisibly to our code: a resend without the
// lookup by reference that must precede it. Once the PSP has forgotten the
// key, that resend is a second authorization.
//
// The rule that stops it, read in net/http's transport.go
// (persistConn.shouldRetryRequest): a request is never resent if it went
// out on a fresh connection, nor if it has a body and no GetBody. So:
//   - a request with a body (every POST) goes out with GetBody removed, on
//     the keep-alive pool: it is never resendable;
//   - a request without a body (GET lookups, which net/http always deems
//     replayable) goes out on a connection of its own, never reused. Lookups
//     are rare (only after an unknown outcome), so the extra handshake is
//     cheap, and a lookup too is sent exactly as often as our code says.
//
// HTTP/2 is off: its transport has retry rules of its own (on GOAWAY and
// refused streams), and the PSP needs none of its features.
type Transport struct {
	keepAlive *http.Transport // requests with a body, GetBody removed
	fresh     *http.Transport // requests without a body, one connection each
}

// NewTransport returns a Transport on a clone of http.DefaultTransport
// (proxy, dial and TLS timeouts), HTTP/1.1 only, keeping up to
// MaxIdleConnsPerHostDefault idle connections to each PSP.
func NewTransport() *Transport {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = MaxIdleConnsPerHostDefault
	base.ForceAttemptHTTP2 = false
	base.Protocols = new(http.Protocols)
	base.Protocols.SetHTTP1(true)
	fresh := base.Clone()
	fresh.DisableKeepAlives = true
	return &Transport{keepAlive: base, fresh: fresh}
}

// maxInMemoryBody is the largest request body RoundTrip reads into memory
// before sending (see inMemoryBody); an authorization is a few hundred
// bytes.
const maxInMemoryBody = 64 << 10

// RoundTrip sends r once. It does not modify r.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return t.fresh.RoundTrip(r)
	}
	// A shallow copy: the body is the caller's, read once.
	c := *r
	c.GetBody = nil
	body, err := inMemoryBody(c.Body, c.ContentLength)
	if err != nil {
		return nil, err
	}
	c.Body = body
	return t.keepAlive.RoundTrip(&c)
}

// inMemoryBody returns body as an in-memory reader, read whole, if it is
// not one already and declares a small length.
//
// Why: net/http writes a request's headers and its body in one write only
// when the body is a reader it knows to be in memory (*bytes.Reader and
// the like); any other body makes it flush the headers first, in a write
// (and a TCP segment) of their own. otelhttp's transport wraps every body
// to count its bytes, so every PSP request took two writes. Reading the
// wrapped body here still counts its bytes for otelhttp's request size
// metric, and closing it is what lets otelhttp record it.
func inMemoryBody(body io.ReadCloser, length int64) (io.ReadCloser, error) {
	if length <= 0 || length > maxInMemoryBody {
		return body, nil
	}
	buf := make([]byte, length+1)
	n, err := io.ReadFull(body, buf)
	_ = body.Close()
	switch {
	case n == len(buf):
		return nil, fmt.Errorf("psp transport: request body longer than its ContentLength %d", length)
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("psp transport: read request body: %w", err)
	case int64(n) != length:
		return nil, fmt.Errorf("psp transport: request body of %d bytes, not its ContentLength %d", n, length)
	}
	// net/http sees through io.NopCloser to the *bytes.Reader.
	return io.NopCloser(bytes.NewReader(buf[:n])), nil
}

// CloseIdleConnections closes the idle keep-alive connections; http.Client
// calls it through its own CloseIdleConnections.
func (t *Transport) CloseIdleConnections() {
	t.keepAlive.CloseIdleConnections()
	t.fresh.CloseIdleConnections()
}
