package readrecovery

import (
	"context"
	"reflect"
	"slices"
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

// meterScopes registers the table's per-scope instruments with mp, once per
// provider however many Transports share the table (docs/policy.md:
// scope-state): gauges of the seconds until each scope's not-before, its
// pace (requests per second), room, requests in flight and queued, and a
// counter of its 429s, each with the scope's name as
// readrecovery.scope. The callback reads a Snapshot. Errors only mean no
// instruments.
func meterScopes(t *restrictions, mp metric.MeterProvider) {
	if mp == nil || !reflect.TypeOf(mp).Comparable() {
		return
	}
	t.metered.Lock()
	defer t.metered.Unlock()
	if slices.Contains(t.meters, mp) {
		return
	}
	t.meters = append(t.meters, mp)
	m := mp.Meter(otelattr.ScopeName)
	restricted, _ := m.Float64ObservableGauge(otelattr.ScopeRestrictedMetric, metric.WithUnit("s"),
		metric.WithDescription("Seconds until the scope's not-before; 0 when it is not restricted."))
	pace, _ := m.Float64ObservableGauge(otelattr.ScopePaceMetric, metric.WithUnit("{request}/s"),
		metric.WithDescription("The scope's paced release, requests per second; 0 when none."))
	room, _ := m.Int64ObservableGauge(otelattr.ScopeRoomMetric, metric.WithUnit("{request}"),
		metric.WithDescription("The scope's room: its in-flight limit."))
	inFlight, _ := m.Int64ObservableGauge(otelattr.ScopeInFlightMetric, metric.WithUnit("{request}"),
		metric.WithDescription("The scope's requests in flight that count against its room."))
	queued, _ := m.Int64ObservableGauge(otelattr.ScopeQueuedMetric, metric.WithUnit("{request}"),
		metric.WithDescription("The scope's requests waiting for room."))
	throttled, _ := m.Int64ObservableCounter(otelattr.ScopeThrottledMetric, metric.WithUnit("{response}"),
		metric.WithDescription("The 429s answered to the scope's requests that went through its room."))
	storeAge, _ := m.Float64ObservableGauge(otelattr.ScopeStoreAgeMetric, metric.WithUnit("s"),
		metric.WithDescription("Seconds since the scope store last answered for the scope (tables with a store)."))
	_, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := time.Now()
		if t.sharing != nil {
			now = t.sharing.now()
		}
		for _, st := range t.self.Snapshot() {
			attrs := metric.WithAttributes(otelattr.Scope.String(st.Scope))
			o.ObserveFloat64(restricted, max(st.NotBefore.Sub(now), 0).Seconds(), attrs)
			rate := 0.0
			if st.Pace > 0 {
				rate = float64(time.Second) / float64(st.Pace)
			}
			o.ObserveFloat64(pace, rate, attrs)
			o.ObserveInt64(room, int64(st.Room), attrs)
			o.ObserveInt64(inFlight, int64(st.InFlight), attrs)
			o.ObserveInt64(queued, int64(st.Queued), attrs)
			o.ObserveInt64(throttled, int64(st.Throttled), attrs)
			if !st.StoreView.IsZero() {
				o.ObserveFloat64(storeAge, now.Sub(st.StoreView).Seconds(), attrs)
			}
		}
		return nil
	}, restricted, pace, room, inFlight, queued, throttled, storeAge)
}
