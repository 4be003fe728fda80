package bench

import (
	"encoding/binary"
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
//
// It also counts the statements the client sends (Execute and simple Query
// messages): a round trip can carry any number of them, and each costs the
// server a round of its own (bind, snapshot, executor start and end)
// whatever it writes, so fewer round trips alone do not make a cheaper
// request.
type wireCounter struct {
	ln         net.Listener
	target     string
	trips      atomic.Int64
	statements atomic.Int64
	wg         sync.WaitGroup
	mu         sync.Mutex
	conns      map[net.Conn]struct{}
	closed     bool
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

// Statements returns the statements counted since the start.
func (w *wireCounter) Statements() int64 { return w.statements.Load() }

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
		msgs := frontendMessages{seen: func(typ byte) {
			if typ == 'E' || typ == 'Q' {
				w.statements.Add(1)
			}
		}}
		w.wg.Go(func() {
			w.pump(server, client, func(p []byte) {
				if answered.Swap(false) {
					w.trips.Add(1)
				}
				msgs.feed(p)
			})
			server.Close()
			client.Close()
		})
		w.wg.Go(func() {
			w.pump(client, server, func([]byte) { answered.Store(true) })
			server.Close()
			client.Close()
		})
	}
}

// pump copies src to dst, calling saw with each read before forwarding it.
func (w *wireCounter) pump(dst, src net.Conn, saw func([]byte)) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			saw(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF, a reset or Close: the copy ends either way
			return
		}
	}
}

// frontendMessages splits what a client sends into PostgreSQL protocol
// messages, however reads cut them, and reports each message's type. A
// connection opens with untyped messages (length, then a code): an SSL or
// GSS encryption request, answered by one byte, then the startup message;
// every message after that is a type byte and a length.
type frontendMessages struct {
	seen  func(typ byte)
	typed bool
	hdr   [8]byte
	have  int // bytes of hdr read
	skip  int // bytes of the current message's body still to pass
}

// The codes of the untyped requests that come before the startup message.
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
)

func (m *frontendMessages) feed(p []byte) {
	for len(p) > 0 {
		if m.skip > 0 {
			n := min(m.skip, len(p))
			m.skip, p = m.skip-n, p[n:]
			continue
		}
		size := 8 // length and code
		if m.typed {
			size = 5 // type and length
		}
		n := copy(m.hdr[m.have:size], p)
		m.have, p = m.have+n, p[n:]
		if m.have < size {
			return
		}
		m.have = 0
		if m.typed {
			m.skip = int(binary.BigEndian.Uint32(m.hdr[1:5])) - 4
			m.seen(m.hdr[0])
			continue
		}
		m.skip = int(binary.BigEndian.Uint32(m.hdr[0:4])) - 8
		if code := binary.BigEndian.Uint32(m.hdr[4:8]); code != sslRequestCode && code != gssEncRequestCode {
			m.typed = true // that was the startup message
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
