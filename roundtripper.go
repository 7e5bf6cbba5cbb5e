package readrecovery

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/hashicorp/go-cleanhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/otelattr"
)

// Transport is an http.RoundTripper that recovers from HTTP 429 on reads,
// within the bounds of each request's [Budget]. Make one with [New] and use
// it as the Transport of an http.Client, an Azure SDK client's transport, or
// beneath otelhttp. It is safe for concurrent use.
//
// The zero Transport is usable and behaves as New(nil) does, but for its
// base: one go-cleanhttp pooled transport that every zero Transport shares.
// It traces with the global tracer provider, records no metrics and does
// not log.
type Transport struct {
	base    http.RoundTripper
	tracer  trace.Tracer
	metrics *instruments
	logger  *slog.Logger
	clock   clock.Clock
	cuts    cutoffs       // the totals of the sequences it started
	shared  *restrictions // WithSharedRestrictions or WithScopes, nil without (shared.go)
	roomCap int           // the cap of a scope's room for its requests (options.go, roomCap)

	guard repeatGuard // the throttled mutations (repeatguard.go)
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport that sends requests with base. A nil base means a
// pooled transport from go-cleanhttp (cleanhttp.DefaultPooledTransport).
func New(base http.RoundTripper, opts ...Option) *Transport {
	if base == nil {
		base = cleanhttp.DefaultPooledTransport()
	}
	c := newConfig(opts)
	if c.shared != nil && c.logger != nil {
		c.shared.logger.CompareAndSwap(nil, c.logger)
	}
	if c.shared != nil {
		meterScopes(c.shared, c.meterProvider)
		if c.store != nil {
			c.shared.share(c.store, c.clock.Now)
		}
	}
	return &Transport{
		base:    base,
		tracer:  c.tracerProvider.Tracer(otelattr.ScopeName),
		metrics: newInstruments(c.meterProvider),
		logger:  c.logger,
		clock:   c.clock,
		shared:  c.shared,
		roomCap: c.roomCap(base),
	}
}

// NewClient returns an http.Client over New(nil, opts...) that returns
// redirects to the caller instead of following them.
func NewClient(opts ...Option) *http.Client {
	return &http.Client{
		Transport: New(nil, opts...),
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// CloseIdleConnections closes the idle connections of the base transport,
// when it has that method (http.Client.CloseIdleConnections calls it).
func (t *Transport) CloseIdleConnections() {
	if t == nil {
		t = &nilTransport
	}
	if c, ok := t.baseRT().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) baseRT() http.RoundTripper {
	if t.base == nil {
		return zeroBase()
	}
	return t.base
}

// zeroBase is the base of the zero Transport.
var zeroBase = sync.OnceValue(func() http.RoundTripper { return cleanhttp.DefaultPooledTransport() })

func (t *Transport) clk() clock.Clock {
	if t.clock == nil {
		return clock.Real{}
	}
	return t.clock
}

func (t *Transport) tr() trace.Tracer {
	if t.tracer == nil {
		return otel.GetTracerProvider().Tracer(otelattr.ScopeName)
	}
	return t.tracer
}

// The errors of requests net/http would refuse too.
var (
	errNilRequest = errors.New("readrecovery: nil Request")
	errNilURL     = errors.New("readrecovery: nil Request.URL")
)

// nilTransport serves a nil *Transport as the zero Transport.
var nilTransport Transport

// RoundTrip sends req. A request produced by following a redirect is
// refused. A request without a Budget, a Journal or an operation mark
// ([WithOperation]) in its context passes through untouched (one marked
// [WithCallerRetry] is held at its scope's not-before and room first).
// Otherwise the policy of docs/policy.md applies.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t == nil {
		t = &nilTransport
	}
	if req == nil {
		return nil, errNilRequest
	}
	if req.Response != nil {
		closeRequestBody(req)
		return nil, &refusedError{method: methodOf(req), url: redact.URL(req.URL)}
	}
	s := stateFrom(req.Context())
	if t.guard.len() > 0 { // one atomic load while no mutation met 429
		if err := t.guard.refuse(req, s, httprule.IsMutation(methodOf(req))); err != nil {
			return nil, err
		}
	}
	if s == nil || (s.budget == nil && s.journal == nil && s.op == nil) {
		var resp *http.Response
		var err error
		switch {
		case t.shared != nil && req.URL != nil && callerRetries(req.Context()): // callerretry.go
			c := call{t: t, req: req, ctx: req.Context(), method: methodOf(req)}
			resp, err = c.passHeld()
		case t.shared != nil && req.URL != nil:
			resp, err = t.passShared(req)
		default:
			resp, err = t.sendBase(req)
		}
		if err == nil && resp != nil && resp.StatusCode == http.StatusTooManyRequests && httprule.IsMutation(methodOf(req)) && !callerRetries(req.Context()) {
			t.guard.enter(newMutationID(req, s), throttledBy{resp.StatusCode, redact.RequestID(resp.Header)}, nil)
		}
		return resp, err
	}
	if req.URL == nil {
		closeRequestBody(req)
		return nil, errNilURL
	}
	method := methodOf(req)
	c := call{t: t, req: req, ctx: req.Context(), s: s, b: s.budget, method: method, mutation: httprule.IsMutation(method)}
	return c.roundTrip()
}

// hostPort returns the request's host name without the port, and the port
// (the scheme's default when the URL has none).
func hostPort(req *http.Request) (string, string) {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		switch req.URL.Scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return host, port
}

func methodOf(req *http.Request) string {
	if req.Method == "" {
		return http.MethodGet
	}
	return req.Method
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// sendBase hands req to the base transport. A base that returns neither a
// response nor an error has failed (ErrNilResponse, as net/http's Client
// says).
func (t *Transport) sendBase(req *http.Request) (*http.Response, error) {
	base := t.baseRT()
	resp, err := base.RoundTrip(req)
	if resp == nil && err == nil {
		return nil, fmt.Errorf("%w (%T)", ErrNilResponse, base)
	}
	return resp, err
}

// passShared sends a request that carries nothing of the policy's: it is
// never held, but its 429 restricts its scope for the others.
func (t *Transport) passShared(req *http.Request) (*http.Response, error) {
	resp, err := t.sendBase(req)
	if err == nil && resp != nil && httprule.IsThrottled(resp.StatusCode) {
		t.noteThrottle(t.shared.scopeOf(req), req, resp, nil)
	}
	return resp, err
}

// noteThrottle records the 429 resp of req, received now, in the table of
// shared restrictions for scope (paced: the place it went from, if any)
// and returns the restriction's generation (0: none set).
func (t *Transport) noteThrottle(scope string, req *http.Request, resp *http.Response, paced *place) uint64 {
	receivedAt := t.clk().Now()
	var tm RetryAfterTiming
	w := parseWaitFieldsAt(resp.Header, receivedAt, &tm)
	var timing *RetryAfterTiming
	if w.hasTiming {
		timing = &tm
	}
	return t.shared.note(scope, req, receivedAt, w, timing, resp.StatusCode, redact.RequestID(resp.Header), paced)
}

// Scopes returns the table the Transport shares restrictions through, nil
// without shared restrictions.
func (t *Transport) Scopes() *Scopes {
	if t == nil || t.shared == nil {
		return nil
	}
	return t.shared.self
}
