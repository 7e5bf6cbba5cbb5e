package readrecovery

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/readrecovery/readrecovery/otelattr"
)

// Metrics beside spans: a wait counts once by trigger with its seconds in
// the histogram; a stop counts once by reason, read through the real SDK.
func TestMetricsWaitsAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		srv := newScript(sequenceOf(reply(429, "Retry-After", "3"), reply(429, "Retry-After", "1")))
		tr := New(srv, WithMeterProvider(mp))
		b := NewBudget("s")
		ctx := WithBudget(context.Background(), b)
		resp, err := tr.RoundTrip(get(t, ctx, base+"/x"))
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		_, err = tr.RoundTrip(get(t, ctx, base+"/x"))
		require.ErrorIs(t, err, ErrSequenceStopped)

		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		got := map[string]metricdata.Aggregation{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				got[m.Name] = m.Data
			}
		}
		waits := got[otelattr.WaitsMetric].(metricdata.Sum[int64])
		require.Len(t, waits.DataPoints, 1)
		assert.Equal(t, int64(1), waits.DataPoints[0].Value)
		assert.Equal(t, attribute.NewSet(otelattr.WaitTrigger.String("read-429"), otelattr.WaitCanceled.Bool(false)), waits.DataPoints[0].Attributes)

		stops := got[otelattr.StopsMetric].(metricdata.Sum[int64])
		require.Len(t, stops.DataPoints, 1, "a stopped sequence counts once, however many requests it refuses")
		assert.Equal(t, int64(1), stops.DataPoints[0].Value)
		assert.Equal(t, attribute.NewSet(otelattr.StopReason.String("persistent-429")), stops.DataPoints[0].Attributes)

		hist := got[otelattr.WaitDurationMetric].(metricdata.Histogram[float64])
		require.Len(t, hist.DataPoints, 1)
		assert.Equal(t, uint64(1), hist.DataPoints[0].Count)
		assert.Equal(t, 3.0, hist.DataPoints[0].Sum)
	})
}
