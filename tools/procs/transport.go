package procs

import (
	"net/http"
	"net/url"
	"sync/atomic"
)

// RotatingTransport sends each attempt to the next worker, so that a retry
// after a dead or frozen worker lands elsewhere and takes the key over.
// Requests name any host ("http://workers/v1/charges"): the transport
// replaces it.
type RotatingTransport struct {
	bases []string
	next  atomic.Uint64
	rt    *http.Transport
}

// NewRotatingTransport spreads attempts over bases (the workers' base URLs)
// through rt.
func NewRotatingTransport(bases []string, rt *http.Transport) *RotatingTransport {
	return &RotatingTransport{bases: bases, rt: rt}
}

// RoundTrip sends r to the next worker.
func (t *RotatingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.bases[t.next.Add(1)%uint64(len(t.bases))]
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.URL.Host = u.Host
	r.Host = u.Host
	return t.rt.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections to every worker.
func (t *RotatingTransport) CloseIdleConnections() { t.rt.CloseIdleConnections() }
