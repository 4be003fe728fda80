package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler adds trace_id and span_id to every record logged with a
// context that carries a span, so a log line leads to its trace. Over a
// LogWriter it flushes every record at WARN and above before returning.
type LogHandler struct {
	slog.Handler
	// flush writes the lines a LogWriter holds; nil if none does.
	flush func() error
}

// NewLogHandler wraps h.
func NewLogHandler(h slog.Handler) *LogHandler { return &LogHandler{Handler: h} }

// Handle implements slog.Handler.
func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	err := h.Handler.Handle(ctx, r)
	if h.flush != nil && r.Level >= slog.LevelWarn {
		if ferr := h.flush(); err == nil {
			err = ferr
		}
	}
	return err
}

// WithAttrs implements slog.Handler.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &LogHandler{Handler: h.Handler.WithAttrs(attrs), flush: h.flush}
}

// WithGroup implements slog.Handler.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{Handler: h.Handler.WithGroup(name), flush: h.flush}
}

// NewLogger returns the JSON logger every phasepay process writes to
// stderr, with trace ids; over a LogWriter, its warnings and errors are
// written before the call that logs them returns.
func NewLogger(w interface{ Write([]byte) (int, error) }) *slog.Logger {
	h := NewLogHandler(slog.NewJSONHandler(w, nil))
	if lw, ok := w.(*LogWriter); ok {
		h.flush = lw.Flush
	}
	return slog.New(h)
}
