package phases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/telemetry"
)

// instrumentationName names this package's tracer and meter.
const instrumentationName = "github.com/phasepay/phasepay/internal/phases"

// Attribute keys of phase spans and metrics.
const (
	attrTenant        = attribute.Key("phasepay.tenant_id")
	attrRecoveryPoint = attribute.Key("phasepay.recovery_point")
	attrLockVersion   = attribute.Key("phasepay.lock_version")
	attrOutcome       = attribute.Key("phasepay.outcome")
	attrPhase         = attribute.Key("phasepay.phase")
	attrPSPResult     = attribute.Key("phasepay.psp.result")
	// A request's span names its operation, its key's hash and its
	// object, so that a tracing backend finds its traces by any of them.
	// Never the key itself, since spans leave the service (KeyHash).
	attrOperation = attribute.Key("phasepay.operation")
	attrKeyHash   = attribute.Key("phasepay.key_hash")
	attrObjectID  = attribute.Key("phasepay.object_id")
)

// nameRequest sets the attributes that find a request's span: its
// operation and key hash, and its object once known ("" leaves it out).
// Only on a span that records, since the hash costs a SHA-256.
func nameRequest(span trace.Span, op string, key, objectID string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrOperation.String(op), attrKeyHash.String(idempotency.KeyHash(key)))
	nameObject(span, objectID)
}

// nameObject sets the request's object on its span, once known.
func nameObject(span trace.Span, objectID string) {
	if objectID != "" && span.IsRecording() {
		span.SetAttributes(attrObjectID.String(objectID))
	}
}

// Span events: what the key decided, and lost leases.
const (
	EventReplay     = "idempotency.replay"
	EventInProgress = "idempotency.in_progress"
	EventMismatch   = "idempotency.mismatch"
	EventTakeover   = "idempotency.takeover"
	EventLeaseLost  = "idempotency.lease_lost"
)

type instruments struct {
	tracer        trace.Tracer
	outcomes      metric.Int64Counter
	phaseDuration metric.Float64Histogram
	pspDuration   metric.Float64Histogram
	// batches and batched count the batches of more than one request and
	// the requests in them (batch.go).
	batches, batched metric.Int64Counter
	// The label sets of the three, one per combination (few of each).
	outcomeAttrs *telemetry.AttrSets[string]
	phaseAttrs   *telemetry.AttrSets[[2]string] // phase, outcome
	pspAttrs     *telemetry.AttrSets[string]
}

func newInstruments(cfg Config) (instruments, error) {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	in := instruments{
		tracer: tp.Tracer(instrumentationName),
		outcomeAttrs: telemetry.NewAttrSets(func(outcome string) []attribute.KeyValue {
			return []attribute.KeyValue{attrOutcome.String(outcome)}
		}),
		phaseAttrs: telemetry.NewAttrSets(func(k [2]string) []attribute.KeyValue {
			return []attribute.KeyValue{attrPhase.String(k[0]), attrOutcome.String(k[1])}
		}),
		pspAttrs: telemetry.NewAttrSets(func(result string) []attribute.KeyValue {
			return []attribute.KeyValue{attrPSPResult.String(result)}
		}),
	}
	var err1, err2, err3 error
	in.outcomes, err1 = m.Int64Counter("phasepay.idempotency.outcomes",
		metric.WithDescription("Requests by what their idempotency key decided: new, replay, in_progress, mismatch, takeover, lease_lost."))
	in.phaseDuration, err2 = m.Float64Histogram("phasepay.phase.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one atomic phase (its statements, before the commit), by the recovery point it reaches."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1))
	in.pspDuration, err3 = m.Float64Histogram("phasepay.psp.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of a PSP call (authorization, capture, void, refund), retries and lookups included, by result."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	var err4, err5 error
	in.batches, err4 = m.Int64Counter("phasepay.batches",
		metric.WithDescription("Batches of more than one request's transaction (claims, or commits after a PSP call) sent as one."))
	in.batched, err5 = m.Int64Counter("phasepay.batched_requests",
		metric.WithDescription("Requests whose transaction went out in a batch of more than one: over phasepay.batches, the mean batch size."))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return instruments{}, fmt.Errorf("phases: instruments: %w", err)
	}
	return in, nil
}

// countOutcome records what a key decided, as a metric and as an event on
// the request's span.
func (in *instruments) countOutcome(ctx context.Context, outcome string) {
	in.outcomes.Add(ctx, 1, in.outcomeAttrs.Get(outcome))
	if outcome != string(OutcomeNew) {
		trace.SpanFromContext(ctx).AddEvent("idempotency." + outcome)
	}
}

// phase runs one phase's statements in a span named after the recovery
// point it reaches, and times it.
func (e *Engine) phase(ctx context.Context, lease *idempotency.Lease, to Point, fn func(context.Context) error) error {
	start := time.Now()
	ctx, span := e.startPhase(ctx, lease, to, start)
	err := fn(ctx)
	e.endPhase(ctx, span, to, start, time.Now(), err)
	return err
}

// phaseRun is a phase run in the claim's transaction, whose span waits for
// that transaction's end (recordPhases).
//
// Its writes go out with the claim, and roll back with it when the key
// exists. Then no phase ran, and a replay shows none.
type phaseRun struct {
	to    Point
	start time.Time
	err   error
}

// recordPhases records the spans and metrics of the phases run in the
// claim's transaction, which ended at end.
func (e *Engine) recordPhases(ctx context.Context, lease *idempotency.Lease, runs []phaseRun, end time.Time) {
	for _, r := range runs {
		pctx, span := e.startPhase(ctx, lease, r.to, r.start)
		e.endPhase(pctx, span, r.to, r.start, end, r.err)
	}
}

func (e *Engine) startPhase(ctx context.Context, lease *idempotency.Lease, to Point, start time.Time) (context.Context, trace.Span) {
	return e.tel.tracer.Start(ctx, "phase "+string(to), trace.WithTimestamp(start), trace.WithAttributes(
		attrTenant.Int64(lease.Record.TenantID),
		attrRecoveryPoint.String(string(to)),
		attrLockVersion.Int64(lease.Record.LockVersion),
	))
}

func (e *Engine) endPhase(ctx context.Context, span trace.Span, to Point, start, end time.Time, err error) {
	outcome := "ok"
	switch {
	case errors.Is(err, idempotency.ErrLeaseLost):
		outcome = "lease_lost"
		span.AddEvent(EventLeaseLost)
	case err != nil:
		outcome = "error"
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.SetAttributes(attrOutcome.String(outcome))
	span.End(trace.WithTimestamp(end))
	e.tel.phaseDuration.Record(ctx, end.Sub(start).Seconds(), e.tel.phaseAttrs.Get([2]string{string(to), outcome}))
}

// recordCall times a foreign call by its result.
func (e *Engine) recordCall(ctx context.Context, start time.Time, out CallOutcome) {
	result := cmp.Or(out.Result, out.Class.String())
	e.tel.pspDuration.Record(ctx, time.Since(start).Seconds(), e.tel.pspAttrs.Get(result))
}

// traceContext serialises the span context of ctx to store with a new key.
// It is always a W3C traceparent, whatever propagators the process uses on
// the wire: the column has one format.
func traceContext(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// linkTo returns a link to the trace a key was claimed in, if it stored one.
func linkTo(traceContext string) []trace.SpanStartOption {
	if traceContext == "" {
		return nil
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceContext})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []trace.SpanStartOption{trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("phasepay.link", "claimed_by")}})}
}

// endSpan ends a request's span. A mismatch or a conflict is an answer the
// key gave, and an invalid body the client's mistake. Neither fails the
// span.
func endSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, idempotency.ErrMismatch) && !errors.Is(err, idempotency.ErrInProgress) &&
		!errors.As(err, new(*ParseError)) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
