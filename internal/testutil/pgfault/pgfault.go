// Package pgfault breaks one exchange between a pool and PostgreSQL, for
// tests of what a lost or cut exchange leaves behind: a proxy that, once
// armed, cuts the connection that carries a request, or lets the server
// run it and drops its answer.
package pgfault

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Proxy stands between a pool and PostgreSQL and, once armed, breaks
// one exchange: the first that carries its marker (a statement's
// parameter, say a key or an operation's name, which the Bind of a
// prepared statement carries, its text not) in the client's request, or in
// the server's answer, after skipping the first skip such exchanges. It
// either cuts the connection as soon as the client sends that request
// (nothing of it reaches the server: a dropped connection, a timeout) or
// lets the server run it and cuts the connection before a byte of its
// answer reaches the client (the server committed it: the answer is lost).
// Arm it between exchanges, so that an answer starts at a message.
type Proxy struct {
	ln     net.Listener
	target string
	hit    chan struct{}

	mu    sync.Mutex
	fault Fault
	armed bool
}

// Fault is what a Proxy breaks.
type Fault struct {
	// Marker is what the exchange carries.
	Marker []byte
	// InAnswer matches Marker in the server's answer, not the request.
	InAnswer bool
	// Skip is how many matching exchanges are let through first.
	Skip int
	// CutRequest cuts the connection before the request reaches the
	// server; without it, the server's answer is dropped.
	CutRequest bool
}

// New starts a Proxy to the server of dbURL, stopped when the test ends,
// and returns it with dbURL through it.
func New(t testing.TB, dbURL string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &Proxy{ln: ln, target: u.Host, hit: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(client) })
		}
	})
	proxied := *u
	proxied.Host = ln.Addr().String()
	return p, proxied.String()
}

// Arm makes the proxy break the next exchange f matches.
func (p *Proxy) Arm(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault, p.armed = f, true
}

// match reports whether an exchange holding b (a request, or an answer
// when answer is set) is the one to break, counting it against skip.
func (p *Proxy) match(b []byte, answer bool) (f Fault, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed || p.fault.InAnswer != answer || !bytes.Contains(b, p.fault.Marker) {
		return Fault{}, false
	}
	if p.fault.Skip > 0 {
		p.fault.Skip--
		return Fault{}, false
	}
	p.armed = false
	p.hit <- struct{}{}
	return p.fault, true
}

// Hit receives once for each exchange the proxy broke.
func (p *Proxy) Hit() <-chan struct{} { return p.hit }

func (p *Proxy) isArmed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.armed
}

func (p *Proxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	dropAnswer := make(chan struct{}, 1) // the next answer's request matched
	go func() {
		defer client.Close() // the session ended on either side: so does the other
		defer server.Close()
		var (
			tail  []byte // the end of the last read, for a marker split across reads
			chunk = make([]byte, 32<<10)
		)
		for {
			n, err := client.Read(chunk)
			if err != nil {
				return
			}
			seen := append(tail, chunk[:n]...)
			if f, ok := p.match(seen, false); ok {
				if f.CutRequest {
					return
				}
				dropAnswer <- struct{}{}
			}
			tail = append(tail[:0], seen[max(0, len(seen)-64):]...)
			if _, err := server.Write(chunk[:n]); err != nil {
				return
			}
		}
	}()
	var (
		answer []byte
		chunk  = make([]byte, 32<<10)
	)
	for {
		n, err := server.Read(chunk)
		if err != nil {
			return
		}
		if len(answer) == 0 && len(dropAnswer) == 0 && !p.isArmed() {
			if _, err := client.Write(chunk[:n]); err != nil {
				return
			}
			continue
		}
		// Held back until the exchange's ReadyForQuery, then forwarded
		// whole, or never.
		answer = append(answer, chunk[:n]...)
		end := exchangeEnd(answer)
		if end < 0 {
			continue
		}
		select {
		case <-dropAnswer:
			return // closes both connections: the answer is never read
		default:
		}
		if _, ok := p.match(answer[:end], true); ok {
			return
		}
		if _, err := client.Write(answer); err != nil {
			return
		}
		answer = answer[:0]
	}
}

// exchangeEnd returns the length of b up to and including its first
// ReadyForQuery message ('Z', the end of an exchange), or -1.
func exchangeEnd(b []byte) int {
	for i := 0; len(b)-i >= 5; {
		size := 1 + int(binary.BigEndian.Uint32(b[i+1:i+5]))
		if len(b)-i < size {
			return -1
		}
		if b[i] == 'Z' {
			return i + size
		}
		i += size
	}
	return -1
}
