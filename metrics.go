package readrecovery

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/readrecovery/readrecovery/otelattr"
)

// instruments are the transport's metrics: waits and stops counted by
// trigger and reason, and a histogram of wait seconds. They go beside the
// spans so that a dashboard shows throttling without sampling traces.
type instruments struct {
	waits    metric.Int64Counter
	stops    metric.Int64Counter
	duration metric.Float64Histogram
}

func newInstruments(mp metric.MeterProvider) *instruments {
	m := mp.Meter(otelattr.ScopeName)
	// Errors here only mean a no-op instrument; the transport works without
	// metrics.
	waits, _ := m.Int64Counter(otelattr.WaitsMetric,
		metric.WithUnit("{wait}"),
		metric.WithDescription("Server-directed waits taken, by trigger."))
	stops, _ := m.Int64Counter(otelattr.StopsMetric,
		metric.WithUnit("{stop}"),
		metric.WithDescription("Sequences stopped, by reason."))
	duration, _ := m.Float64Histogram(otelattr.WaitDurationMetric,
		metric.WithUnit("s"),
		metric.WithDescription("Length of server-directed waits."),
		metric.WithExplicitBucketBoundaries(waitBuckets()...))
	return &instruments{waits: waits, stops: stops, duration: duration}
}

// wait records one wait with the request's context (its exemplars and
// baggage).
func (m *instruments) wait(ctx context.Context, trigger string, d time.Duration, canceled bool) {
	attrs := metric.WithAttributes(otelattr.WaitTrigger.String(trigger), otelattr.WaitCanceled.Bool(canceled))
	m.waits.Add(ctx, 1, attrs)
	m.duration.Record(ctx, d.Seconds(), attrs)
}

// stop counts one stopped sequence, with the context of the request that
// recorded it.
func (m *instruments) stop(ctx context.Context, r StopReason) {
	m.stops.Add(ctx, 1, metric.WithAttributes(otelattr.StopReason.String(string(r))))
}

// waitBuckets are the histogram's boundaries in seconds: fine below 2 s
// (most Retry-After values are 0 to 2), then up to the wait ceiling, which
// no wait exceeds.
func waitBuckets() []float64 {
	ceiling := MaxServerWait.Seconds()
	b := []float64{0, 0.5, 1, 2}
	for _, f := range []float64{1.0 / 6, 1.0 / 3, 2.0 / 3, 1} {
		b = append(b, ceiling*f)
	}
	return b
}
