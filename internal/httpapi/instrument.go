package httpapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/httpconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasepay/phasepay/internal/telemetry"
)

// instrumentation is every request's span and request metrics: the span
// otelhttp's handler started (named after its method, then its route by
// nameRoute) with the same attributes, and the same three histograms
// (http.server.request.duration, .request.body.size, .response.body.size)
// with the same labels, under otelhttp's instrumentation scope, so that
// every series and dashboard stays as it was (TestInstrumentationIsOtelhttps
// compares the two).
//
// What it spares is otelhttp's work per request: a new attribute set built,
// sorted and hashed for every metric record, the span's dozen attributes
// built even when the span records nothing (tracing off, or not sampled),
// and a wrapper of each interface the ResponseWriter might have. Here a
// request's labels (method, protocol, status, route) pick a set built once
// (telemetry.AttrSets), and the span's attributes are built only for a
// span that records. Standard samplers decide without attributes; one that
// decides on them would see none at the span's start.
type instrumentation struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	// host and port are the configured address (Config.ServerAddr), never
	// the client's Host header; port -1 when it has none. (otelhttp took
	// the port from the Host header then; request metrics here never do.)
	host     string
	port     int
	duration httpconv.ServerRequestDuration
	reqSize  httpconv.ServerRequestBodySize
	respSize httpconv.ServerResponseBodySize
	sets     *telemetry.AttrSets[requestLabels]
}

// requestLabels is what varies between the label sets of request metrics.
type requestLabels struct {
	method, protoName, protoVersion string
	status                          int
	route                           string
}

func newInstrumentation(tel *telemetry.Telemetry, serverAddr string) (*instrumentation, error) {
	meter := tel.Meter.Meter(otelhttp.ScopeName, metric.WithInstrumentationVersion(otelhttp.Version))
	in := &instrumentation{
		tracer:     tel.Tracer.Tracer(otelhttp.ScopeName, trace.WithInstrumentationVersion(otelhttp.Version)),
		propagator: tel.Propagator,
	}
	in.host, in.port = splitHostPort(serverAddr)
	var err error
	if in.reqSize, err = httpconv.NewServerRequestBodySize(meter); err != nil {
		return nil, err
	}
	if in.respSize, err = httpconv.NewServerResponseBodySize(meter); err != nil {
		return nil, err
	}
	// otelhttp's buckets.
	if in.duration, err = httpconv.NewServerRequestDuration(meter, metric.WithExplicitBucketBoundaries(
		0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)); err != nil {
		return nil, err
	}
	in.sets = telemetry.NewAttrSets(in.labels)
	return in, nil
}

// labels are a request metric's labels, as otelhttp's MetricAttributes.
func (in *instrumentation) labels(l requestLabels) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		semconv.HTTPRequestMethodKey.String(l.method),
		semconv.URLScheme("http"),
		semconv.ServerAddress(in.host),
	}
	if p := requiredPort(in.port); p > 0 {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	if l.protoName != "" {
		attrs = append(attrs, semconv.NetworkProtocolName(l.protoName))
	}
	if l.protoVersion != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(l.protoVersion))
	}
	if l.status > 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(l.status))
	}
	if l.route != "" {
		attrs = append(attrs, semconv.HTTPRoute(l.route))
	}
	return attrs
}

// handler wraps next. /metrics and /healthz are neither traced nor
// counted, as otelhttp's filter had them.
func (in *instrumentation) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" || r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		ctx := in.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		// Named by its method until nameRoute knows its route, as
		// otelhttp named it ("HTTP" for a method HTTP does not define).
		name := standardMethod(r.Method)
		if name == "_OTHER" {
			name = "HTTP"
		}
		ctx, span := in.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		recording := span.IsRecording()
		if recording {
			span.SetAttributes(in.requestAttrs(r)...)
		}
		// nameRoute writes the route here; requestID and logRequests
		// use the same record.
		ri := &requestInfo{}
		ctx = context.WithValue(ctx, infoKey{}, ri)
		var body *countingBody
		if r.Body != nil && r.Body != http.NoBody {
			body = &countingBody{ReadCloser: r.Body}
			prev := r.Body
			r.Body = body
			defer func() { r.Body = prev }()
		}
		rw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(rw, r.WithContext(ctx))

		status := rw.status
		if status == 0 {
			status = http.StatusOK
		}
		var read int64
		if body != nil {
			read = body.n
		}
		if recording {
			switch {
			case status < 100 || status >= 600:
				span.SetStatus(codes.Error, "Invalid HTTP status code "+strconv.Itoa(status))
			case status >= 500:
				span.SetStatus(codes.Error, "")
			}
			var attrs []attribute.KeyValue
			if read > 0 {
				attrs = append(attrs, semconv.HTTPRequestBodySize(int(read)))
			}
			if rw.written > 0 {
				attrs = append(attrs, semconv.HTTPResponseBodySize(int(rw.written)))
			}
			span.SetAttributes(append(attrs, semconv.HTTPResponseStatusCode(status))...)
		}
		protoName, protoVersion := netProtocol(r.Proto)
		set := in.sets.Get(requestLabels{method: standardMethod(r.Method), protoName: protoName, protoVersion: protoVersion,
			status: status, route: ri.route})
		in.reqSize.Inst().Record(ctx, read, set)
		in.respSize.Inst().Record(ctx, rw.written, set)
		in.duration.Inst().Record(ctx, float64(time.Since(start))/float64(time.Second), set)
	})
}

// requestAttrs are the span's attributes of the request, as otelhttp's
// RequestTraceAttrs.
func (in *instrumentation) requestAttrs(r *http.Request) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, semconv.ServerAddress(in.host), semconv.HTTPRequestMethodKey.String(standardMethod(r.Method)),
		semconv.URLScheme("http"))
	port := in.port
	if port < 0 {
		_, port = splitHostPort(r.Host)
	}
	if p := requiredPort(port); p > 0 {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	if r.Method != "" && (standardMethod(r.Method) == "_OTHER" || r.Method != strings.ToUpper(r.Method)) {
		attrs = append(attrs, semconv.HTTPRequestMethodOriginal(r.Method))
	}
	peer, peerPort := splitHostPort(r.RemoteAddr)
	if peer != "" {
		attrs = append(attrs, semconv.NetworkPeerAddress(peer))
		if peerPort > 0 {
			attrs = append(attrs, semconv.NetworkPeerPort(peerPort))
		}
	}
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, semconv.UserAgentOriginal(ua))
	}
	client := r.Header.Get("X-Forwarded-For")
	if i := strings.IndexByte(client, ','); i >= 0 {
		client = client[:i]
	}
	if client == "" {
		client = peer
	}
	if client != "" {
		attrs = append(attrs, semconv.ClientAddress(client))
	}
	if r.URL != nil && r.URL.Path != "" {
		attrs = append(attrs, semconv.URLPath(r.URL.Path))
	}
	name, version := netProtocol(r.Proto)
	if name != "" && name != "http" {
		attrs = append(attrs, semconv.NetworkProtocolName(name))
	}
	if version != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(version))
	}
	return attrs
}

// standardMethod is the method as a metric label: one of HTTP's, or _OTHER
// (a client must not mint series).
func standardMethod(m string) string {
	switch m = strings.ToUpper(m); m {
	case http.MethodConnect, http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodPatch, http.MethodPost, http.MethodPut, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// requiredPort is port unless it is none or http's default.
func requiredPort(port int) int {
	if port <= 0 || port == 80 {
		return -1
	}
	return port
}

// netProtocol splits "HTTP/1.1" into "http" and "1.1".
func netProtocol(proto string) (name, version string) {
	name, version, _ = strings.Cut(proto, "/")
	return strings.ToLower(name), version
}

// splitHostPort splits host:port; port -1 when there is none.
func splitHostPort(hostport string) (string, int) {
	if !strings.Contains(hostport, ":") {
		return hostport, -1
	}
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return host, -1
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 {
		return host, -1
	}
	return host, port
}

// countingBody counts the bytes of the request body the handler read.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// statusWriter records the response's status and the bytes of its body.
type statusWriter struct {
	http.ResponseWriter
	status  int
	written int64
}

// WriteHeader records the first final status (an informational one but
// 101 is not final).
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.written += int64(n)
	return n, err
}

// Flush sends what is buffered, when the connection's writer can.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer
// (Flush, deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
