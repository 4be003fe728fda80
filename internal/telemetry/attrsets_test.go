package telemetry_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/phasepay/phasepay/internal/telemetry"
)

// A cached option records exactly the labels metric.WithAttributes would,
// one series per combination, and builds each combination once.
func TestAttrSetsRecordTheLabelsOfTheirKey(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	counter, err := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t").Int64Counter("c")
	require.NoError(t, err)
	builds := 0
	sets := telemetry.NewAttrSets(func(k [2]string) []attribute.KeyValue {
		builds++
		return []attribute.KeyValue{attribute.String("psp", k[0]), attribute.String("class", k[1])}
	})
	ctx := context.Background()
	for range 3 {
		counter.Add(ctx, 1, sets.Get([2]string{"a", "success"}))
	}
	counter.Add(ctx, 1, sets.Get([2]string{"b", "unknown"}))
	require.Equal(t, 2, builds)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	for _, dp := range rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Sum[int64]).DataPoints {
		psp, _ := dp.Attributes.Value("psp")
		class, _ := dp.Attributes.Value("class")
		require.Equal(t, 2, dp.Attributes.Len())
		got[psp.AsString()+"/"+class.AsString()] = dp.Value
	}
	require.Equal(t, map[string]int64{"a/success": 3, "b/unknown": 1}, got)
}
