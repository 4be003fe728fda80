package bench

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
)

// wireCounter is a TCP proxy between a program and PostgreSQL that counts
// round trips: the times a client sends after the server has answered it.
// It counts what crossed the wire, whatever the code believes it sends: a
// pipelined batch (BEGIN, statements, COMMIT in one write) is one round
// trip, a BEGIN sent on its own and waited for is one more. (A pgx tracer
// would count statements, not exchanges, and pg_stat_statements needs a
// server restart to load, which the benchmark may not do.)
//
// A client burst is one round trip however many TCP segments carry it: a
// new one starts only once the server has written since the client's last
// write.
type wireCounter struct {
	ln     net.Listener
	target string
	trips  atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// startWireCounter listens on a free local port and forwards every
// connection to target (host:port).
func startWireCounter(target string) (*wireCounter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &wireCounter{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	w.wg.Go(w.accept)
	return w, nil
}

// Addr is the proxy's host:port.
func (w *wireCounter) Addr() string { return w.ln.Addr().String() }

// Trips returns the round trips counted since the start.
func (w *wireCounter) Trips() int64 { return w.trips.Load() }

func (w *wireCounter) track(c net.Conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.conns[c] = struct{}{}
	return true
}

func (w *wireCounter) accept() {
	for {
		client, err := w.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", w.target)
		if err != nil {
			client.Close()
			continue
		}
		if !w.track(client) || !w.track(server) {
			client.Close()
			server.Close()
			return
		}
		// answered is set when the server writes and cleared by the
		// client's next write, which is then a new round trip.
		var answered atomic.Bool
		answered.Store(true)
		w.wg.Go(func() {
			w.pump(server, client, func() {
				if answered.Swap(false) {
					w.trips.Add(1)
				}
			})
			server.Close()
			client.Close()
		})
		w.wg.Go(func() {
			w.pump(client, server, func() { answered.Store(true) })
			server.Close()
			client.Close()
		})
	}
}

// pump copies src to dst, calling saw before forwarding each read.
func (w *wireCounter) pump(dst, src net.Conn, saw func()) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			saw()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF, a reset or Close: the copy ends either way
			return
		}
	}
}

// Close stops accepting, closes every proxied connection and waits.
func (w *wireCounter) Close() {
	w.ln.Close()
	w.mu.Lock()
	w.closed = true
	for c := range w.conns {
		c.Close()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// viaWireCounter rewrites a connection URL to go through the proxy.
func viaWireCounter(dbURL, proxyAddr string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	u.Host = proxyAddr
	return u.String(), nil
}
