package psp

import (
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

// RoundTrip sends r once. It does not modify r.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return t.fresh.RoundTrip(r)
	}
	if r.GetBody != nil {
		// A shallow copy: the body is the caller's, read once.
		c := *r
		c.GetBody = nil
		r = &c
	}
	return t.keepAlive.RoundTrip(r)
}

// CloseIdleConnections closes the idle keep-alive connections; http.Client
// calls it through its own CloseIdleConnections.
func (t *Transport) CloseIdleConnections() {
	t.keepAlive.CloseIdleConnections()
	t.fresh.CloseIdleConnections()
}
