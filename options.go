package readrecovery

import (
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/readrecovery/readrecovery/internal/clock"
)

// config holds the options of [New].
type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	logger         *slog.Logger
	clock          clock.Clock
}

// An Option configures a [Transport].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

func newConfig(opts []Option) config {
	c := config{clock: clock.Real{}}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.tracerProvider == nil {
		c.tracerProvider = otel.GetTracerProvider()
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	return c
}

// WithTracerProvider sets the provider of the tracer that records wait spans
// and stop events. The default (and what a nil tp means) is the global
// provider, otel.GetTracerProvider(), looked up when the Transport is made;
// the global provider delegates to one installed later.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tracerProvider = tp
		}
	})
}

// WithMeterProvider sets the provider of the meter that counts waits (by
// trigger) and stops (by reason) and records a histogram of wait seconds.
// The default (and what a nil mp means) is the global provider,
// otel.GetMeterProvider(), looked up when the Transport is made.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meterProvider = mp
		}
	})
}

// WithLogger makes the transport write one structured record per wait
// (level Info) and per stop (level Warn) to l, sanitized as spans are: no
// credential, query string or body. Requests that pass through are not
// logged. The default (and what a nil l means) is no logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// withClock replaces the clock and sleeper; tests only.
func withClock(clk clock.Clock) Option {
	return optionFunc(func(c *config) {
		if clk != nil {
			c.clock = clk
		}
	})
}
