package readrecovery

import (
	"context"
	"net/http"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/otelattr"
)

// Transport is an http.RoundTripper that recovers from HTTP 429 on reads,
// within the bounds of each request's [Budget]. Make one with [New] and use
// it as the Transport of an http.Client, an Azure SDK client's transport, or
// beneath otelhttp. It is safe for concurrent use.
type Transport struct {
	base    http.RoundTripper
	tracer  trace.Tracer
	metrics *instruments
	clock   clock.Clock
}

var _ http.RoundTripper = (*Transport)(nil)

// config holds the options of [New].
type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
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

// withClock replaces the clock and sleeper; tests only (R41).
func withClock(clk clock.Clock) Option {
	return optionFunc(func(c *config) {
		if clk != nil {
			c.clock = clk
		}
	})
}

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
		clock:   c.clock,
	}
}

// NewClient returns an http.Client over New(nil, opts...) that returns
// redirects to the caller instead of following them (R11).
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
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req. A request produced by following a redirect is
// refused (R11). A request without a Budget or a Journal in its context
// passes through untouched (R5). Otherwise the policy of the package
// documentation applies.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Response != nil {
		closeRequestBody(req)
		return nil, &refusedError{method: methodOf(req), url: redact.URL(req.URL)}
	}
	s := stateFrom(req.Context())
	if s == nil || (s.budget == nil && s.journal == nil) {
		return t.base.RoundTrip(req)
	}
	return t.roundTrip(req, s)
}

// call is one request's trip through the policy.
type call struct {
	t      *Transport
	req    *http.Request
	ctx    context.Context
	s      *ctxState
	b      *Budget
	method string
	// sendCtx is what admit gave: the context to send with.
	sendCtx context.Context
}

func (t *Transport) roundTrip(req *http.Request, s *ctxState) (*http.Response, error) {
	c := &call{t: t, req: req, ctx: req.Context(), s: s, b: s.budget, method: methodOf(req)}
	pending, err := c.admitBudget()
	if err != nil {
		closeRequestBody(req)
		return nil, err
	}
	// Wait before readback: a write 429's Retry-After delays the next GET
	// of the sequence (R8). The journal is asked after the wait: the
	// restriction this GET waited for is its own sequence's.
	if pending != nil {
		if err := c.waitPending(pending); err != nil {
			closeRequestBody(req)
			return nil, err
		}
	}
	if err := c.admitJournal(); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	return c.sendAndHandle(req, 1, "")
}

// admitBudget checks, before any network access, that the sequence may
// send one more request (R4). For a GET it returns the pending write-429
// wait to take first, if any.
func (c *call) admitBudget() (*pendingWait, error) {
	if c.b == nil {
		return nil, nil
	}
	a, se := c.b.admit(c.t.clock, c.t.metrics, c.ctx, c.method == http.MethodGet)
	if se != nil {
		c.event(se)
		return nil, se
	}
	c.sendCtx = a.ctx
	return a.pending, nil
}

// admitJournal checks, before any network access, that the journal's
// status allows the request (R36). A refused request was not sent: it
// does not count against the sequence.
func (c *call) admitJournal() error {
	if c.s.journal == nil {
		return nil
	}
	if err := c.s.journal.Admit(c.ctx, c.t.clock.Now().UTC()); err != nil {
		if c.b != nil {
			c.b.unadmit()
		}
		return c.stop(StopJournalRestricted, "the journal's status forbids network access", 0, "", err)
	}
	return nil
}

// sendAndHandle sends req (attempt 1, or the one re-send) and applies the
// policy to what comes back.
func (c *call) sendAndHandle(req *http.Request, attempt int, resendOf string) (*http.Response, error) {
	var jr JournalRequest
	if c.s.journal != nil {
		jr = JournalRequest{Method: c.method, URLDigest: redact.URLDigest(req.URL), Attempt: attempt, ResendOf: resendOf}
		if err := c.s.journal.Begin(c.ctx, jr); err != nil {
			closeRequestBody(req)
			return nil, c.stop(StopPersistenceFailed, "the journal could not record the request before it was sent", 0, "", err)
		}
	}
	out := req
	if c.b != nil {
		out = req.WithContext(c.sendCtx)
	}
	resp, err := c.t.base.RoundTrip(out)
	if err != nil {
		return nil, c.onTransportError(jr, attempt, err)
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		return c.onResponse(resp, jr, attempt)
	}
	return c.on429(resp, jr, attempt)
}

// onTransportError keeps the evidence of a request that got no response
// and passes the error through (R15). When the sequence's total ran out
// during the request, the error is a stop that wraps it (R3).
func (c *call) onTransportError(jr JournalRequest, attempt int, err error) error {
	diag := redact.Text(err.Error())
	if c.b != nil && isMutation(c.method) {
		c.b.recordMutation(MutationOutcome{Method: c.method, Error: diag, Attempt: attempt})
	}
	if c.s.journal != nil {
		if jerr := c.s.journal.Complete(c.ctx, jr, JournalOutcome{TransportError: diag}); jerr != nil {
			c.stop(StopPersistenceFailed, "the journal could not record the request's outcome", 0, "", jerr)
		}
	}
	if c.b != nil && c.b.expired() {
		se, _ := c.b.stopNow(StopTotalExhausted, "the sequence's total time ran out during the request", 0, "", err)
		c.event(se)
		return se
	}
	return err
}

// onResponse keeps the evidence of a response other than 429 and hands it
// back untouched (R15, R24, R25, R39).
func (c *call) onResponse(resp *http.Response, jr JournalRequest, attempt int) (*http.Response, error) {
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if c.b != nil {
		c.record(resp, attempt)
	}
	if c.s.journal != nil {
		id := redact.RequestID(resp.Header)
		out := JournalOutcome{StatusCode: resp.StatusCode, RequestID: id, ETag: etagOf(resp.Header, ok)}
		if err := c.s.journal.Complete(c.ctx, jr, out); err != nil {
			if ok && isMutation(c.method) {
				// R39: the ACK goes back to the caller and stays in the
				// report; further requests stop.
				c.stop(StopReceiptFailed, "the upload was acknowledged but its receipt could not be written", resp.StatusCode, id, err)
			} else {
				c.stop(StopPersistenceFailed, "the journal could not record the request's outcome", resp.StatusCode, id, err)
			}
		}
	}
	return resp, nil
}

// record keeps a response's evidence in the budget.
func (c *call) record(resp *http.Response, attempt int) {
	if !isMutation(c.method) {
		c.b.recordRead(resp.StatusCode, resp.Header)
		return
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	c.b.recordMutation(MutationOutcome{
		Method: c.method, StatusCode: resp.StatusCode, RequestID: redact.RequestID(resp.Header),
		ETag: etagOf(resp.Header, ok), Acked: ok, Attempt: attempt,
	})
}

// on429 applies the recovery policy to a 429 (R7–R14).
func (c *call) on429(resp *http.Response, jr JournalRequest, attempt int) (*http.Response, error) {
	receivedAt := c.t.clock.Now()
	ra, timing, diag := ParseRetryAfter(resp.Header, receivedAt)
	id := redact.RequestID(resp.Header)
	if c.b != nil {
		c.record(resp, attempt)
	}
	var event string
	if c.s.journal != nil {
		ev, err := c.s.journal.Backoff(c.ctx, jr, JournalOutcome{StatusCode: resp.StatusCode, RequestID: id}, ra, timing)
		if err != nil {
			// R38: no wait, no re-send; the original 429 goes back.
			c.stop(StopPersistenceFailed, "the journal could not record the 429", resp.StatusCode, id, err)
			return resp, nil
		}
		event = ev
	}
	if c.b == nil {
		return resp, nil // R5: no budget, no recovery
	}
	if attempt > 1 {
		c.stop(StopPersistent429, "the re-sent request met 429 again", resp.StatusCode, id, nil)
		return resp, nil
	}
	trigger := c.trigger()
	if trigger == "" {
		return resp, nil // not a method the policy recovers (HEAD, OPTIONS, ...)
	}
	if !c.b.claimDelay() {
		c.stop(StopOpportunityUsed, "a 429 came after the sequence's one delay was used", resp.StatusCode, id, nil)
		return resp, nil
	}
	delay, ok := c.plan(ra, timing, resp.StatusCode, id)
	if !ok {
		return resp, nil
	}
	until := receivedAt.Add(delay)
	if !until.Before(c.b.deadlineAt()) {
		c.stop(StopWaitExceedsTotal, "the server's delay is longer than what remains of the sequence's total", resp.StatusCode, id, nil)
		return resp, nil
	}
	w := waitPlan{
		trigger: trigger, until: until, ra: ra, timing: timing, requestID: id,
		diagnostic: diag, status: resp.StatusCode, host: c.req.URL.Host, url: redact.URL(c.req.URL),
	}
	if trigger == otelattr.TriggerWrite429 {
		// R8: the 429 goes back untouched; the next GET waits first.
		c.b.setPending(&pendingWait{until: until, ra: ra, timing: timing, diagnostic: diag,
			requestID: id, method: c.method, status: resp.StatusCode, host: w.host, url: w.url})
		return resp, nil
	}
	if c.b.requestsLeft() < 1 {
		c.stop(StopRequestsExhausted, "no request is left for the re-send", resp.StatusCode, id, nil)
		return resp, nil
	}
	// R12: close the 429 body unread before the wait; a failed close
	// blocks recovery.
	if err := resp.Body.Close(); err != nil {
		return nil, c.stop(StopCleanupFailed, "closing the 429 response body failed: "+redact.Text(err.Error()), resp.StatusCode, id, nil)
	}
	if err := c.wait(w); err != nil {
		return nil, err
	}
	if _, err := c.admitBudget(); err != nil {
		return nil, err
	}
	if err := c.admitJournal(); err != nil {
		return nil, err
	}
	again := c.req
	if c.req.Body != nil && c.req.Body != http.NoBody {
		// R10: the same request, with the same body, once. (trigger made
		// sure GetBody is there.)
		body, err := c.req.GetBody()
		if err != nil {
			return nil, c.stop(StopUnreplayableBody, "the request body could not be read again", resp.StatusCode, id, nil)
		}
		again = c.req.Clone(c.ctx)
		again.Body = body
	}
	return c.sendAndHandle(again, 2, event)
}

// trigger says how the policy treats a 429 of this request: a GET is
// re-sent (read-429), a marked replayable upload is re-sent
// (queue-429), any other mutation keeps its delay for the next GET
// (write-429). "" means the policy leaves it alone.
func (c *call) trigger() string {
	switch {
	case c.method == http.MethodGet:
		if c.req.Body != nil && c.req.Body != http.NoBody && c.req.GetBody == nil {
			return "" // a GET whose body cannot be sent again
		}
		return otelattr.TriggerRead429
	case isMutation(c.method):
		if c.s.queueRetry && c.req.GetBody != nil {
			return otelattr.TriggerQueue429
		}
		return otelattr.TriggerWrite429
	default:
		return ""
	}
}

// plan turns a parsed Retry-After into the wait, or stops the sequence when
// it must not be waited: oversized (R21), unrepresentable or overlong
// (R22), above the budget's wait ceiling (R14).
func (c *call) plan(ra RetryAfter, timing *RetryAfterTiming, status int, id string) (time.Duration, bool) {
	switch {
	case ra.Kind == RetryAfterOversized:
		c.stop(StopOversized, "the Retry-After field is longer than the size bound", status, id, nil)
		return 0, false
	case timing == nil:
		c.stop(StopOverlong, "the Retry-After delay is not representable", status, id, nil)
		return 0, false
	case ra.Kind == RetryAfterOverlong:
		c.stop(StopOverlong, "the Retry-After delay is above the 30 s ceiling", status, id, nil)
		return 0, false
	}
	delay := time.Duration(timing.ServerDelaySeconds) * time.Second
	if delay > c.b.maxWait {
		c.stop(StopOverlong, "the Retry-After delay is above the sequence's wait ceiling", status, id, nil)
		return 0, false
	}
	return delay, true
}

// waitPlan is one wait to take.
type waitPlan struct {
	trigger    string
	until      time.Time
	ra         RetryAfter
	timing     *RetryAfterTiming
	diagnostic string
	requestID  string
	status     int
	method     string
	host, url  string
}

// waitPending takes a write 429's wait before a GET is sent.
func (c *call) waitPending(p *pendingWait) error {
	return c.wait(waitPlan{
		trigger: otelattr.TriggerWrite429, until: p.until, ra: p.ra, timing: p.timing,
		diagnostic: p.diagnostic, requestID: p.requestID, status: p.status, method: p.method, host: p.host, url: p.url,
	})
}

// wait sleeps until w.until in a span of its own, ending early only when
// the request context ends (R14, R28).
func (c *call) wait(w waitPlan) error {
	start := c.t.clock.Now()
	planned := max(w.until.Sub(start), 0)
	method := w.method
	if method == "" {
		method = c.method
	}
	var delay int64
	if w.timing != nil {
		delay = w.timing.ServerDelaySeconds
	}
	ctx, span := c.t.tracer.Start(c.ctx, otelattr.WaitSpanName,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(start),
		trace.WithAttributes(otelattr.Wait(otelattr.WaitInfo{
			Sequence: c.b.name, Trigger: w.trigger,
			RetryAfterKind: string(w.ra.Kind), RetryAfterValue: w.ra.Value,
			ServerDelaySeconds: delay, PlannedSeconds: planned.Seconds(),
			RequestID: w.requestID, Method: method, StatusCode: w.status,
			ServerAddress: w.host, URL: w.url,
		})...))
	err := c.t.clock.Sleep(ctx, planned)
	end := c.t.clock.Now()
	c.b.recordWait(WaitRecord{
		Trigger: w.trigger, RetryAfter: w.ra, Timing: w.timing, Planned: planned,
		Actual: end.Sub(start), RequestID: w.requestID, Canceled: err != nil,
		Diagnostic: w.diagnostic,
	})
	c.t.metrics.wait(w.trigger, end.Sub(start), err != nil)
	if err != nil {
		span.SetStatus(codes.Error, "wait canceled")
		span.SetAttributes(otelattr.ErrorType.String(errorType(err)))
		span.End(trace.WithTimestamp(end))
		return c.stop(StopWaitCanceled, "the request context ended during the wait", w.status, w.requestID, err)
	}
	span.End(trace.WithTimestamp(end))
	return nil
}

func errorType(err error) string {
	switch err {
	case context.Canceled:
		return "context.Canceled"
	case context.DeadlineExceeded:
		return "context.DeadlineExceeded"
	}
	return "error"
}

// stop stops the sequence (or, without a budget, describes the journal's
// refusal), records the stop event on the request's span, and returns the
// error to hand back.
func (c *call) stop(r StopReason, detail string, status int, id string, cause error) *StopError {
	if c.b == nil {
		return &StopError{Reason: r, Detail: detail, StatusCode: status, RequestID: id, Err: cause}
	}
	se, _ := c.b.stopNow(r, detail, status, id, cause)
	c.event(se)
	return se
}

// event records the sequence's stop as an event on the request's span,
// once per sequence (R29).
func (c *call) event(se *StopError) {
	if c.b == nil || !c.b.takeStopEvent() {
		return
	}
	span := trace.SpanFromContext(c.ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(otelattr.StopEventName, trace.WithAttributes(
		otelattr.Stop(c.b.name, string(se.Reason), se.Detail, c.b.sent())...))
}

func methodOf(req *http.Request) string {
	if req.Method == "" {
		return http.MethodGet
	}
	return req.Method
}

func isMutation(method string) bool {
	switch method {
	case http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
