// Package history records what the clients of a chaos or failover run saw
// and checks it with Porcupine against a model of the idempotent API that
// knows nothing of phasepay's internals (model.go): per tenant and key, the
// first final answer is the only one, a replay returns it byte for byte, a
// different request under the key is refused 422, and a 409 or 503 changes
// nothing. The PSPs' books are checked once at the end: at most one
// authorization per charge (books.go).
//
// The recorder is an http.RoundTripper: every request the harness's
// clients send through it is kept in memory with its invocation and return
// times, and written beside the run's summary when it ends.
package history

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// Op is one client request and what came back: an operation of the
// history.
type Op struct {
	ID     int    `json:"id"`
	Tenant string `json:"tenant"`
	// Key is the Idempotency-Key as the server reads it (the
	// structured-field quotes removed); empty for a request without one.
	Key    string `json:"key,omitempty"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Body   string `json:"body,omitempty"`
	// Call and Return are nanoseconds since the recording started: before
	// the request was handed to the transport, and after the answer's last
	// byte was read. Return is 0 for a request without an answer.
	Call   int64 `json:"call_ns"`
	Return int64 `json:"return_ns,omitempty"`
	// Status is 0 when no answer arrived (a connection refused, reset or
	// cut mid-body, a client timeout); Err then says why.
	Status   int    `json:"status,omitempty"`
	Code     string `json:"code,omitempty"` // a problem document's code
	Replayed bool   `json:"replayed,omitempty"`
	// Answer is the SHA-256 of the answer's body; AnswerBody the body
	// itself, in the file only, on the first operation that got it.
	Answer     string `json:"answer_sha256,omitempty"`
	AnswerBody string `json:"answer_body,omitempty"`
	Err        string `json:"error,omitempty"`
	// Unsent: the connection was never made (refused, no route), so the
	// request never reached a server and took no effect.
	Unsent bool `json:"unsent,omitempty"`
}

// Answered says the request got a whole answer.
func (o *Op) Answered() bool { return o.Status != 0 }

// Log is a run's history, filled by the transports it wraps. It is safe for
// concurrent use.
type Log struct {
	start time.Time

	mu      sync.Mutex
	ops     []Op
	bodies  map[string]string // answer hash -> body
	tenants map[string]string // bearer token hash -> tenant name
}

// NewLog starts an empty history; its times count from now.
func NewLog() *Log {
	return &Log{start: time.Now(), bodies: map[string]string{}, tenants: map[string]string{}}
}

// NameTenant names the tenant whose requests carry apiKey. A request with
// a key never named is recorded under the first 8 hex digits of its hash:
// the history never holds a secret.
func (l *Log) NameTenant(apiKey, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tenants[digest([]byte(apiKey))] = name
}

// Transport wraps rt so that every request sent through it is recorded.
func (l *Log) Transport(rt http.RoundTripper) http.RoundTripper {
	return &transport{log: l, rt: rt}
}

// Ops returns a copy of the operations recorded so far, in invocation
// order.
func (l *Log) Ops() []Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Op(nil), l.ops...)
}

// Bodies returns the answers' bodies by hash.
func (l *Log) Bodies() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]string, len(l.bodies))
	for k, v := range l.bodies {
		out[k] = v
	}
	return out
}

func (l *Log) since() int64 { return max(time.Since(l.start).Nanoseconds(), 1) }

// begin records a request's invocation and returns its index.
func (l *Log) begin(op Op) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	op.ID = len(l.ops)
	if name, ok := l.tenants[op.Tenant]; ok {
		op.Tenant = name
	} else {
		op.Tenant = "key-" + op.Tenant[:8]
	}
	op.Call = l.since()
	l.ops = append(l.ops, op)
	return op.ID
}

// end records what came back for the request at i.
func (l *Log) end(i int, resp *http.Response, body []byte, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	op := &l.ops[i]
	if err != nil {
		op.Err = err.Error()
		var ne *net.OpError
		op.Unsent = errors.As(err, &ne) && ne.Op == "dial"
		return
	}
	op.Return = l.since()
	op.Status = resp.StatusCode
	op.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	op.Answer = digest(body)
	if _, ok := l.bodies[op.Answer]; !ok {
		l.bodies[op.Answer] = string(body)
	}
	if resp.StatusCode >= 400 {
		var p struct{ Code string }
		if json.Unmarshal(body, &p) == nil {
			op.Code = p.Code
		}
	}
}

type transport struct {
	log *Log
	rt  http.RoundTripper
}

// RoundTrip sends r and reads the whole answer before returning it, so
// that the return time is when its last byte arrived. A body cut short is
// handed on as it came: what arrived, then the error.
func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	op := Op{Method: r.Method, Path: r.URL.RequestURI(), Key: unquoteKey(r.Header.Get("Idempotency-Key")),
		Tenant: digest([]byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))}
	if r.Body != nil && r.Body != http.NoBody {
		b, err := requestBody(r)
		if err != nil {
			return nil, err
		}
		op.Body = string(b)
	}
	i := t.log.begin(op)
	resp, err := t.rt.RoundTrip(r)
	if err != nil {
		t.log.end(i, nil, nil, err)
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.log.end(i, nil, nil, fmt.Errorf("read answer: %w", err))
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return resp, nil
	}
	t.log.end(i, resp, body, nil)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// requestBody reads r's body without consuming it: through GetBody when
// the request has one (every body made from bytes or a string), else by
// reading it and putting a copy back.
func requestBody(r *http.Request) ([]byte, error) {
	if r.GetBody != nil {
		rc, err := r.GetBody()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	b, err := io.ReadAll(r.Body)
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b, err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// unquoteKey is the key a server reads from an Idempotency-Key field: the
// structured-field string "abc" means abc.
func unquoteKey(k string) string {
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		return k[1 : len(k)-1]
	}
	return k
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// WriteFile writes ops as gzipped JSON lines, one operation a line, each
// answer's body on the first operation that got it.
func WriteFile(path string, ops []Op, bodies map[string]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	written := map[string]bool{}
	for _, op := range ops {
		if op.Answer != "" && !written[op.Answer] {
			written[op.Answer] = true
			op.AnswerBody = bodies[op.Answer]
		}
		if err = enc.Encode(op); err != nil {
			break
		}
	}
	err = errors.Join(err, zw.Close(), f.Close())
	if err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	return nil
}

// ReadFile reads a history WriteFile wrote, and the answers' bodies.
func ReadFile(path string) ([]Op, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read history: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("read history %s: %w", path, err)
	}
	var ops []Op
	bodies := map[string]string{}
	dec := json.NewDecoder(bufio.NewReader(zr))
	for {
		var op Op
		if err := dec.Decode(&op); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("read history %s: operation %d: %w", path, len(ops), err)
		}
		if op.AnswerBody != "" {
			bodies[op.Answer] = op.AnswerBody
			op.AnswerBody = ""
		}
		ops = append(ops, op)
	}
	return ops, bodies, nil
}
