package readrecovery

import (
	"log/slog"
	"net/http"

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
	shared         *restrictions
	scopeInFlight  int        // WithScopeInFlight, 0: the default
	store          ScopeStore // WithScopeStore, nil: none
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

// WithSharedRestrictions makes the Transport share what a 429 says among
// all the sequences it carries (docs/policy.md: shared-restriction,
// paced-release). A 429 with a usable delay (a valid Retry-After in
// seconds or as a date, or a valid Azure millisecond field; never the 1 s
// fallback of a missing or malformed field), received by any request of
// the Transport, restricts the request's scope until the 429's not-before
// time T, the latest such T winning. Until T, no request that carries a
// [Budget] is sent in that scope: it waits until T as its sequence's one
// window (a readrecovery.wait span with trigger "shared-restriction", the
// scope's host and the request ID of the 429 that set T), and from T on
// the waiters go one by one at a pace that slows on every further 429 and
// quickens on every 2xx. A sequence whose place lies beyond its wait
// ceiling or what remains of its total stops before any network access
// with reason [StopRestricted]. Requests without a Budget are never held.
//
// scope names the restriction a request belongs to; nil means the
// request's scheme and host ("https://acct.blob.core.windows.net"). Use
// the unit the server throttles by: for Azure Storage, the account (its
// blob and queue hosts share one limit). At most [MaxSharedScopes] scopes
// are remembered.
//
// Turn it on when many sequences of one process talk to one throttled
// account or deployment (a parallel download, many workers): without it
// each sequence learns of a throttle only from its own 429.
//
// The Transport's table is its own: WithSharedRestrictions(scope) is
// WithScopes(NewScopes(scope)). To share one table among several
// Transports (several SDK clients of one process), give each the same
// [Scopes].
func WithSharedRestrictions(scope func(*http.Request) string) Option {
	return optionFunc(func(c *config) {
		c.shared = newRestrictions(scope)
	})
}

// WithoutSharedRestrictions turns [WithSharedRestrictions] off again: the
// wirings that turn shared restrictions on by default (rrazure's
// ClientOptions, rropenai's default transport) take it after their own
// options, so that rrazure.ClientOptions(readrecovery.WithoutSharedRestrictions())
// is the transport of readrecovery.New without them. Options apply in
// order: a WithSharedRestrictions after it turns them on again.
func WithoutSharedRestrictions() Option {
	return optionFunc(func(c *config) { c.shared = nil })
}

// WithScopeInFlight sets the cap of a scope's room under
// [WithSharedRestrictions] (docs/policy.md: scope-room): at most n of a
// scope's requests that carry a Budget are in flight at once, however
// fast the server answers. n <= 0 means the default: the base's
// MaxConnsPerHost when the base is an *http.Transport that sets it (a
// room grown to it then holds nothing back: the base's pool queues the
// rest, as without the room), else [DefaultScopeInFlight]. Without shared
// restrictions it does nothing.
func WithScopeInFlight(n int) Option {
	return optionFunc(func(c *config) { c.scopeInFlight = n })
}

// WithScopeStore makes the Transport's table of shared restrictions
// share each scope's not-before with the other processes that use s
// (docs/fleets.md; docs/policy.md: scope-store): a 429's restriction is
// written to s in the background, and a scope's first request in the
// process reads s's card first (a short, bounded look), so that a process
// started after another met "Retry-After: 4" does not send before that
// not-before. It takes effect with [WithSharedRestrictions] or
// [WithScopes] only (without them the Transport keeps no scopes to share),
// and binds to the table: every Transport of the table shares through the
// first store given. The default (and what a nil s means) is no store.
func WithScopeStore(s ScopeStore) Option {
	return optionFunc(func(c *config) {
		if s != nil {
			c.store = s
		}
	})
}

// roomCap returns the cap of a scope's room for the requests of a
// Transport over base (WithScopeInFlight, else the base's soft one, else
// DefaultScopeInFlight): negative for a soft cap, the base's
// MaxConnsPerHost (room.go, hasRoom).
func (c config) roomCap(base http.RoundTripper) int {
	n := c.scopeInFlight
	if ht, ok := base.(*http.Transport); ok && n <= 0 && ht.MaxConnsPerHost > 0 {
		// A soft cap: once grown to the base's own limit, the base's pool
		// queues what is beyond it.
		n = -ht.MaxConnsPerHost
	}
	if n == 0 {
		n = DefaultScopeInFlight
	}
	return n
}

// withClock replaces the clock and sleeper; tests only.
func withClock(clk clock.Clock) Option {
	return optionFunc(func(c *config) {
		if clk != nil {
			c.clock = clk
		}
	})
}
