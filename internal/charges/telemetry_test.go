package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/phases/phasestest"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

type telemetryBundle struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	cfg    phases.Config
}

func newTelemetry() *telemetryBundle {
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	return &telemetryBundle{
		spans:  spans,
		reader: reader,
		cfg: phases.Config{
			TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
			MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		},
	}
}

// take returns the spans ended since the last call, in order.
func (tb *telemetryBundle) take(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	ended := tb.spans.Ended()
	tb.spans.Reset()
	return ended
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func events(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

func (tb *telemetryBundle) outcomes(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tb.reader.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "phasepay.idempotency.outcomes" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value("phasepay.outcome")
				out[v.AsString()] = dp.Value
			}
		}
	}
	return out
}

func TestTracesAndMetricsPerOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	tb := newTelemetry()
	svc := chargestest.NewService(t, b.Pool, b.Keys, b.PSP, tb.cfg)
	req, _ := chargestest.Request(t, visa)

	// A new charge: one span per phase, in order, under the request's span.
	_, err := svc.Create(ctx, b.Tenant, "tel", phases.Parsed(req))
	require.NoError(t, err)
	spans := tb.take(t)
	require.Equal(t, []string{"phase charge_created", "phase psp_authorized", "phase done", "charges.create"}, names(spans))
	root := spans[3]
	for i, point := range []string{"charge_created", "psp_authorized", "done"} {
		a := attrs(spans[i])
		require.Equal(t, point, a["phasepay.recovery_point"].AsString())
		require.Equal(t, b.Tenant, a["phasepay.tenant_id"].AsInt64())
		require.EqualValues(t, 1, a["phasepay.lock_version"].AsInt64())
		require.Equal(t, "ok", a["phasepay.outcome"].AsString())
		require.Equal(t, root.SpanContext().SpanID(), spans[i].Parent().SpanID())
	}

	// A replay: an event, and no phase spans.
	_, err = svc.Create(ctx, b.Tenant, "tel", phases.Parsed(req))
	require.NoError(t, err)
	spans = tb.take(t)
	require.Equal(t, []string{"charges.create"}, names(spans))
	require.Equal(t, []string{phases.EventReplay}, events(spans[0]))

	// A takeover: the crashed request's key is resumed by a later worker,
	// whose resume span links to the trace that claimed the key.
	dying := chargestest.NewService(t, b.Pool, b.Keys, b.PSP, phases.Config{
		TracerProvider: tb.cfg.TracerProvider, MeterProvider: tb.cfg.MeterProvider, CrashHook: phasestest.CrashAt(phases.CrashAfterClaim),
	})
	_, err = dying.Create(ctx, b.Tenant, "tel-2", phases.Parsed(req))
	require.ErrorIs(t, err, phasestest.ErrCrash)
	claimed := tb.take(t)
	claimTrace := claimed[len(claimed)-1].SpanContext().TraceID()

	later := chargestest.NewService(t, testdb.Pool(t, b.URL, b.T0.Add(b.Keys.Lease()+time.Second)), b.Keys, b.PSP, tb.cfg)
	_, err = later.Create(ctx, b.Tenant, "tel-2", phases.Parsed(req))
	require.NoError(t, err)
	spans = tb.take(t)
	require.Equal(t, []string{"phase psp_authorized", "phase done", "charges.create.resume", "charges.create"}, names(spans))
	require.Contains(t, events(spans[3]), phases.EventTakeover)
	resume := spans[2]
	require.Len(t, resume.Links(), 1)
	require.Equal(t, claimTrace, resume.Links()[0].SpanContext.TraceID())
	require.EqualValues(t, 2, attrs(spans[0])["phasepay.lock_version"].AsInt64())

	// A mismatch and an in-progress answer are events too.
	other, _ := chargestest.Request(t, `{"amount":1,"currency":"usd","payment_method":"pm_card_visa"}`)
	_, err = svc.Create(ctx, b.Tenant, "tel", phases.Parsed(other))
	require.Error(t, err)
	require.Equal(t, []string{phases.EventMismatch}, events(tb.take(t)[0]))

	require.Equal(t, map[string]int64{"new": 2, "replay": 1, "takeover": 1, "mismatch": 1}, tb.outcomes(t))
}

// A request's spans are found by its tenant, operation, charge and key,
// but carry the key only as its hash: spans leave the service for a
// tracing backend, and a key is the tenant's own text. The span of a
// resume names the same.
func TestSpansNameTheRequestNotItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	tb := newTelemetry()
	svc := chargestest.NewService(t, b.Pool, b.Keys, b.PSP, tb.cfg)
	req, _ := chargestest.Request(t, visa)
	const key = "order-4242-secret-ish"

	res, err := svc.Create(ctx, b.Tenant, key, phases.Parsed(req))
	require.NoError(t, err)
	id := chargeID(t, res.Response)
	spans := tb.take(t)
	root := attrs(spans[len(spans)-1])
	require.Equal(t, b.Tenant, root["phasepay.tenant_id"].AsInt64())
	require.Equal(t, "charges.create", root["phasepay.operation"].AsString())
	require.Equal(t, id, root["phasepay.object_id"].AsString())
	require.Equal(t, idempotency.KeyHash(key), root["phasepay.key_hash"].AsString())
	require.Len(t, idempotency.KeyHash(key), 16)
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			require.NotContains(t, kv.Value.String(), key, "span %s, attribute %s", s.Name(), kv.Key)
		}
	}

	// A replay's span names the charge it answers with.
	_, err = svc.Create(ctx, b.Tenant, key, phases.Parsed(req))
	require.NoError(t, err)
	require.Equal(t, id, attrs(tb.take(t)[0])["phasepay.object_id"].AsString())

	// A resume's span too.
	dying := chargestest.NewService(t, b.Pool, b.Keys, b.PSP, phases.Config{CrashHook: phasestest.CrashAt(phases.CrashAfterClaim)})
	_, err = dying.Create(ctx, b.Tenant, "resumed", phases.Parsed(req))
	require.ErrorIs(t, err, phasestest.ErrCrash)
	later := chargestest.NewService(t, testdb.Pool(t, b.URL, b.T0.Add(b.Keys.Lease()+time.Second)), b.Keys, b.PSP, tb.cfg)
	res, err = later.Create(ctx, b.Tenant, "resumed", phases.Parsed(req))
	require.NoError(t, err)
	for _, s := range tb.take(t) {
		if s.Name() == "charges.create.resume" {
			a := attrs(s)
			require.Equal(t, "charges.create", a["phasepay.operation"].AsString())
			require.Equal(t, chargeID(t, res.Response), a["phasepay.object_id"].AsString())
			require.Equal(t, idempotency.KeyHash("resumed"), a["phasepay.key_hash"].AsString())
			return
		}
	}
	t.Fatal("no charges.create.resume span")
}
