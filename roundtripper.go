package readrecovery

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

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
	shared  *restrictions // WithSharedRestrictions, nil without (shared.go)

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
	return &Transport{
		base:    base,
		tracer:  c.tracerProvider.Tracer(otelattr.ScopeName),
		metrics: newInstruments(c.meterProvider),
		logger:  c.logger,
		clock:   c.clock,
		shared:  c.sharedFor(base),
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
// ([WithOperation]) in its context passes through untouched. Otherwise the
// policy of docs/policy.md applies.
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
		if t.shared != nil && req.URL != nil {
			resp, err = t.passShared(req)
		} else {
			resp, err = t.baseRT().RoundTrip(req)
		}
		if err == nil && resp != nil && resp.StatusCode == http.StatusTooManyRequests && httprule.IsMutation(methodOf(req)) {
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

// call is one request's trip through the policy: it gathers the facts the
// policy decides on and acts on its decisions.
type call struct {
	t        *Transport
	req      *http.Request
	ctx      context.Context
	s        *ctxState
	b        *Budget
	method   string
	mutation bool
	// What the policy said when the request was admitted: late (a window
	// existed then: a 429 finds the opportunity used), ordinal (its place
	// among the requests sent), held (admitted but not yet counted as
	// sent: its journal must allow it first).
	late    bool
	ordinal int
	held    bool
	// mutationNo and attempt number the request among the sequence's
	// mutations (0: not a mutation, or no budget).
	mutationNo, attempt int
	// sent is the body of the first send of a mutation in a sequence,
	// closed by net/http when it is done with it; nil otherwise.
	sent *sentBody
	// With shared restrictions: the request's scope (scoped: known), and
	// its place in the scope's release while it holds one.
	scope  string
	scoped bool
	place  *place
	room   roomHold // its part in the scope's room (scope-room)
}

// admit asks the policy about the request now, and starts the total's
// cut-off at the sequence's first request.
func (c *call) admit(r request) admission {
	clk := c.t.clk()
	now := instant{clk: clk}
	if t := c.t.shared; t != nil {
		// A place whose time has come stays the request's: asked again
		// (its journal first, or the held re-check), it still goes.
		if f, p, ok := t.take(c.scopeOf(), now.get(), c.place); ok {
			// Copied into new values here, so that f and p stay on the
			// stack when the scope is not restricted (most requests).
			fp, pp := new(restricted), new(place)
			*fp, *pp = f, p
			r.shared, c.place = fp, pp
		}
	}
	if c.t.shared != nil && !r.hold && c.room.n == 0 {
		// docs/policy.md: scope-room. The hand-off itself: a place in the
		// scope's room first, or a wait for one.
		if !c.enterRoom() {
			if c.room.since.IsZero() {
				c.room.since = now.get()
			}
			host, port := hostPort(c.req)
			r.noRoom, r.roomSince = true, c.room.since
			r.roomPlan = &waitPlan{trigger: triggerRoom, method: c.method, host: host, port: port, url: redact.URL(c.req.URL)}
		} else {
			c.room.since = time.Time{}
		}
	}
	a := c.b.s.admitAt(&now, r)
	if a.started {
		c.b.startCut(&c.t.cuts, clk)
	}
	if a.step == stepRefuse {
		c.givePlaceBack()
	}
	if c.t.shared != nil && !(a.step == stepWait && a.room) {
		c.leaveQueue()
		if a.step != stepSend {
			c.giveRoomBack()
		}
	}
	return a
}

// scopeOf returns the request's scope of shared restrictions.
func (c *call) scopeOf() string {
	if !c.scoped {
		c.scope, c.scoped = c.t.shared.scopeOf(c.req), true
	}
	return c.scope
}

// givePlaceBack returns the request's place in its scope's release when
// it will not use it.
func (c *call) givePlaceBack() {
	if c.place != nil {
		c.t.shared.giveBack(*c.place)
		c.place = nil
	}
}

// await carries out an admission: waits in the window as long as the
// policy says, and returns the refusal when it refuses. own is the 429 of
// a request waiting to be re-sent: a refusal then carries its evidence.
func (c *call) await(adm admission, own *waitPlan) error {
	var span *waitSpan
	for {
		switch adm.step {
		case stepSend:
			c.late, c.ordinal, c.held = adm.late, adm.ordinal, adm.ordinal == 0
			c.endWait(span, nil)
			return nil
		case stepRefuse:
			err := c.refusal(adm.err, own)
			c.endWait(span, err)
			return err
		}
		if span != nil && (span.plan.trigger == triggerRoom) != adm.room {
			c.endWait(span, nil) // from the room to a window, or back
			span = nil
		}
		if span == nil {
			span = c.startWait(*adm.plan, adm.until, own != nil)
		}
		var err error
		if adm.room {
			err = c.sleepRoom(adm.until)
		} else {
			err = c.sleepUntil(c.wakeAt(adm.until))
		}
		if err != nil {
			var se *StopError
			switch {
			case errors.As(err, &se):
				err = c.refusal(se, own)
			case own != nil:
				// The request's own re-send wait: its context ending stops
				// the sequence.
				err = c.stop(StopWaitCanceled, "the request context ended during the wait", own.status, own.requestID, err)
			}
			c.givePlaceBack()
			c.leaveQueue()
			c.endWait(span, err)
			return err
		}
		adm = c.admit(request{mutation: c.mutation, claimed: true, hold: own != nil || c.s.journal != nil})
	}
}

// refusal turns the policy's refusal into the error to return: the stop
// recorded on the request's span once per sequence, and a re-send's own
// 429 evidence kept.
func (c *call) refusal(se *StopError, own *waitPlan) error {
	c.recordStop()
	if own != nil && (se.StatusCode != own.status || se.RequestID != own.requestID) {
		cp := *se
		cp.StatusCode, cp.RequestID = own.status, own.requestID
		return &cp
	}
	return se
}

// release gives back the claim of a request that will not be sent.
func (c *call) release() {
	if c.b != nil {
		c.b.s.releaseAt(c.t.clk().Now())
	}
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
