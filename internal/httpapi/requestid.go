package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// RequestIDHeader names the request's id, kept from the client when it is
// sound and sent back on every response.
const RequestIDHeader = "X-Request-Id"

// MaxRequestIDLength is the longest client X-Request-Id kept, in bytes.
const MaxRequestIDLength = 128

// requestID gives every request an id: the client's X-Request-Id if it is
// 1 to MaxRequestIDLength visible ASCII characters in one header field,
// else a generated one. A client value is written into every log line of
// the request, so an unbounded or binary one would let any client, even
// one without a key, write what it likes into the logs (chi's RequestID
// keeps any value, of any length). The id is set on the response before
// anything else runs, so that every answer carries it, errors included.
//
// The id is stored under chi's key, so middleware.GetReqID reads it.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := ""
		if vs := r.Header.Values(RequestIDHeader); len(vs) == 1 && validRequestID(vs[0]) {
			id = vs[0]
		} else {
			id = newRequestID()
		}
		w.Header().Set(RequestIDHeader, id)
		// A span that records nothing (tracing off) would drop the
		// attribute anyway; the check spares building it.
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			span.SetAttributes(attribute.String("phasepay.request_id", id))
		}
		// The request log's requestInfo (logRequests, next in the chain)
		// goes into the same derived request, unless the instrumentation
		// put one there: every r.WithContext copies the whole request.
		ctx := context.WithValue(r.Context(), middleware.RequestIDKey, id)
		if _, ok := ctx.Value(infoKey{}).(*requestInfo); !ok {
			ctx = context.WithValue(ctx, infoKey{}, &requestInfo{})
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func validRequestID(id string) bool {
	if len(id) == 0 || len(id) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// newRequestID returns 128 random bits in hex: unique without coordination
// between api processes.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
