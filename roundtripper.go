package readrecovery

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
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
// The zero Transport is usable: it sends with http.DefaultTransport, traces
// with the global tracer provider, records no metrics and does not log.
type Transport struct {
	base      http.RoundTripper
	tracer    trace.Tracer
	metrics   *instruments
	logger    *slog.Logger
	clock     clock.Clock
	deadlines deadlines // the totals of the sequences it started
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
	if c, ok := t.baseRT().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) baseRT() http.RoundTripper {
	if t.base == nil {
		return http.DefaultTransport
	}
	return t.base
}

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

// RoundTrip sends req. A request produced by following a redirect is
// refused. A request without a Budget or a Journal in its context passes
// through untouched. Otherwise the policy of the package documentation
// applies.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Response != nil {
		closeRequestBody(req)
		return nil, &refusedError{method: methodOf(req), url: redact.URL(req.URL)}
	}
	s := stateFrom(req.Context())
	if s == nil || (s.budget == nil && s.journal == nil && s.op == nil) {
		return t.baseRT().RoundTrip(req)
	}
	if s.op != nil {
		if throttled, status, id := s.op.throttledBy(); throttled {
			closeRequestBody(req)
			name := ""
			if s.budget != nil {
				name = s.budget.name
			}
			return nil, &StopError{Sequence: name, Reason: StopRepeatRefused,
				Detail: "a mutation of this operation already met 429; its later tries are never sent", StatusCode: status, RequestID: id}
		}
	}
	c := call{t: t, req: req, ctx: req.Context(), s: s, b: s.budget, method: methodOf(req)}
	return c.roundTrip()
}

// call is one request's trip through the policy.
type call struct {
	t      *Transport
	req    *http.Request
	ctx    context.Context
	s      *ctxState
	b      *Budget
	method string
	// late is what the policy said when the request was sent: a window
	// existed then, so a 429 finds the opportunity used.
	late bool
	// mutation numbers the request among the sequence's mutations (0: not
	// a mutation, or no budget).
	mutation int
}

func (c *call) roundTrip() (*http.Response, error) {
	if err := c.ctx.Err(); err != nil && (c.b == nil || !c.b.isExpired()) {
		// Nothing to send for a caller that has given up; the sequence
		// goes on. (A context the total ended is the policy's to refuse.)
		closeRequestBody(c.req)
		return nil, err
	}
	if c.b != nil {
		final := c.s.journal == nil
		adm := c.b.admitAt(c.t, &lazyNow{clk: c.t.clk()}, c.req, httprule.IsMutation(c.method), final)
		if err := c.follow(adm, final, nil); err != nil {
			closeRequestBody(c.req)
			return nil, err
		}
	}
	if c.s.journal != nil {
		if err := c.admitJournal(); err != nil {
			closeRequestBody(c.req)
			return nil, err
		}
	}
	return c.send(c.req, 1, "")
}

// follow carries out an admission: waits in the window as long as the
// policy says, and returns the refusal when it refuses. own is the 429 of
// a request waiting to be re-sent: a refusal then carries its evidence.
func (c *call) follow(adm admission, final bool, own *waitPlan) error {
	var span *waitSpan
	for {
		switch adm.step {
		case stepSend:
			c.late = adm.late
			c.endWait(span, nil)
			return nil
		case stepRefuse:
			err := c.refusal(adm.err, own)
			c.endWait(span, err)
			return err
		}
		if span == nil {
			span = c.startWait(adm.plan, adm.until, own != nil)
		}
		if err := c.sleepUntil(adm.until); err != nil {
			var se *StopError
			switch {
			case errors.As(err, &se):
				err = c.refusal(se, own)
			case own != nil:
				// The request's own re-send wait: its context ending stops
				// the sequence.
				err = c.stop(StopWaitCanceled, "the request context ended during the wait", own.status, own.requestID, err)
			}
			c.endWait(span, err)
			return err
		}
		adm = c.b.proceedAt(&lazyNow{clk: c.t.clk()}, final)
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

// admitJournal checks, before any network access, that the journal's
// status allows the request.
func (c *call) admitJournal() error {
	if err := c.s.journal.Admit(c.ctx, c.t.clk().Now().UTC()); err != nil {
		return c.journalRefusal(err, StopJournalRestricted, "the journal's status forbids network access")
	}
	return nil
}

// journalRefusal maps a journal's refusal: a replay of an upload on
// record refuses this request only; the caller's own context ending
// returns its error (and the sequence's total running out stops it as
// such); a restriction (an error with a JournalRestricted method) stops it
// as journal-restricted; anything else stops the sequence with reason
// (persistence-failed for Begin).
func (c *call) journalRefusal(err error, reason StopReason, detail string) error {
	if c.b != nil {
		c.b.release()
	}
	var restricted interface{ JournalRestricted() }
	switch {
	case errors.Is(err, ErrReplayRefused):
		return &StopError{Sequence: c.name(), Reason: StopReplayRefused,
			Detail: "the journal holds this upload's outcome: it is never sent again", Err: err}
	case c.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		if c.b != nil && c.b.isExpired() {
			return c.stop(StopTotalExhausted, "the sequence's total time ran out waiting for the journal", 0, "", err)
		}
		return c.ctx.Err()
	case errors.As(err, &restricted):
		// A restriction found under the claim (another worker's marker,
		// a 429 written meanwhile): the journal's status, not a failed
		// write.
		return c.stop(StopJournalRestricted, "the journal's status forbids network access", 0, "", err)
	}
	return c.stop(reason, detail, 0, "", err)
}

// send sends req (attempt 1, or the one re-send) and applies the policy to
// what comes back.
func (c *call) send(req *http.Request, attempt int, resendOf string) (*http.Response, error) {
	var jr JournalRequest
	if c.s.journal != nil {
		jr = JournalRequest{Method: c.method, URLDigest: redact.URLDigest(req.URL), Attempt: attempt, ResendOf: resendOf}
		if err := c.s.journal.Begin(c.ctx, jr); err != nil {
			closeRequestBody(req)
			return nil, c.journalRefusal(err, StopPersistenceFailed, "the journal could not record the request before it was sent")
		}
		if c.b != nil {
			// The journal's slot may have taken a while: a window that
			// opened meanwhile holds this request back too.
			adm := c.b.proceedAt(&lazyNow{clk: c.t.clk()}, true)
			if err := c.follow(adm, true, nil); err != nil {
				closeRequestBody(req)
				// Nothing was sent; the journal keeps it as attempted
				// with an unknown outcome, never as never-attempted.
				_ = c.s.journal.Complete(c.ctx, jr, JournalOutcome{TransportError: "not sent: " + err.Error()})
				return nil, err
			}
		}
	}
	if c.b != nil && attempt == 1 && httprule.IsMutation(c.method) {
		c.mutation = c.b.newMutation()
	}
	resp, err := c.t.baseRT().RoundTrip(req)
	if err != nil {
		return nil, c.onTransportError(jr, attempt, err)
	}
	if !httprule.IsThrottled(resp.StatusCode) {
		return c.onResponse(resp, jr, attempt)
	}
	return c.on429(resp, jr, attempt)
}

// onTransportError keeps the evidence of a request that got no response
// and passes the error through. When the sequence's total ran out during
// the request, the error is a stop that wraps it.
func (c *call) onTransportError(jr JournalRequest, attempt int, err error) error {
	diag := redact.Text(err.Error())
	if c.mutation > 0 {
		c.b.recordMutation(MutationOutcome{Request: c.mutation, Method: c.method, Error: diag, Attempt: attempt})
	}
	if c.s.journal != nil {
		if jerr := c.s.journal.Complete(c.ctx, jr, JournalOutcome{TransportError: diag}); jerr != nil {
			c.stop(StopPersistenceFailed, "the journal could not record the request's outcome", 0, "", jerr)
		}
	}
	if c.b != nil && c.b.isExpired() {
		return c.stop(StopTotalExhausted, "the sequence's total time ran out during the request", 0, "", err)
	}
	return err
}

// onResponse keeps the evidence of a response other than 429 and hands it
// back untouched.
func (c *call) onResponse(resp *http.Response, jr JournalRequest, attempt int) (*http.Response, error) {
	ok := httprule.IsSuccess(resp.StatusCode)
	if c.b != nil {
		c.record(resp, attempt)
	}
	if c.s.journal != nil {
		id := redact.RequestID(resp.Header)
		out := JournalOutcome{StatusCode: resp.StatusCode, RequestID: id, ETag: etagOf(resp.Header, ok)}
		if err := c.s.journal.Complete(c.ctx, jr, out); err != nil {
			if ok && httprule.IsMutation(c.method) {
				// The ACK goes back to the caller and stays in the report;
				// further requests stop.
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
	if c.mutation == 0 {
		if c.method == http.MethodGet {
			c.b.recordRead(resp.StatusCode, resp.Header)
		}
		return
	}
	ok := httprule.IsSuccess(resp.StatusCode)
	c.b.recordMutation(MutationOutcome{
		Request: c.mutation, Method: c.method, StatusCode: resp.StatusCode, RequestID: redact.RequestID(resp.Header),
		ETag: etagOf(resp.Header, ok), Acked: ok, Attempt: attempt,
	})
}

// on429 applies the recovery policy to a 429.
func (c *call) on429(resp *http.Response, jr JournalRequest, attempt int) (*http.Response, error) {
	receivedAt := c.t.clk().Now()
	var tm RetryAfterTiming
	w := parseWaitFieldsAt(resp.Header, receivedAt, &tm)
	ra, diag, ms, msKind := w.ra, w.diag, w.ms, w.msKind
	var timing *RetryAfterTiming
	if w.hasTiming {
		timing = &tm
	}
	if w.msDiag != "" {
		diag = joinDiag(diag, w.msDiag)
	}
	id := redact.RequestID(resp.Header)
	if c.s.op != nil && httprule.IsMutation(c.method) {
		c.s.op.markThrottled(resp.StatusCode, id)
	}
	if c.b != nil {
		c.record(resp, attempt)
	}
	var event string
	if c.s.journal != nil {
		ev, err := c.s.journal.Backoff(c.ctx, jr, JournalOutcome{StatusCode: resp.StatusCode, RequestID: id}, ra, withFloor(timing, receivedAt, ms, msKind))
		if err != nil {
			// Terminal before recovery: no wait, no re-send; the original
			// 429 goes back.
			c.stop(StopPersistenceFailed, "the journal could not record the 429", resp.StatusCode, id, err)
			return resp, nil
		}
		event = ev
	}
	if c.b == nil {
		return resp, nil // no budget, no recovery
	}
	trig := c.trigger()
	if trig == triggerNone {
		return resp, nil // not a method the policy recovers (HEAD, OPTIONS, ...)
	}
	host, port := hostPort(c.req)
	in := in429{
		trigger: trig, attempt: attempt, late: c.late, received: receivedAt,
		plan: waitPlan{
			trigger: trig, ra: ra, timing: timing, diagnostic: diag, requestID: id,
			status: resp.StatusCode, method: c.method, host: host, port: port, url: redact.URL(c.req.URL),
		},
	}
	in.delay, in.plan.floorMs, in.refuse, in.detail = c.plan(ra, timing, ms, msKind)
	if httprule.IsMutation(c.method) {
		if k, ok := repeatKeyOf(c.req); ok {
			in.repeat = &k
		}
	}
	d := c.b.on429At(receivedAt, in)
	if d.err != nil {
		c.recordStop()
		return resp, nil // not recovered: the 429 goes back untouched
	}
	if !d.resend {
		return resp, nil // a write 429: its delay holds the sequence's other requests
	}
	// Close the 429 body unread before the wait; a failed close blocks
	// recovery.
	if resp.Body != nil {
		if err := resp.Body.Close(); err != nil {
			c.b.release()
			return nil, c.stop(StopCleanupFailed, "closing the 429 response body failed: "+redact.Text(err.Error()), resp.StatusCode, id, nil)
		}
	}
	return c.resend(in.plan, d.until, event)
}

// resend waits until the re-send's not-before (and the window's end), then
// sends the same request once more.
func (c *call) resend(own waitPlan, until time.Time, event string) (*http.Response, error) {
	own.eventDigest = event
	final := c.s.journal == nil
	adm := admission{step: stepWait, until: until, plan: own}
	if err := c.follow(adm, final, &own); err != nil {
		return nil, err
	}
	if c.s.journal != nil {
		if err := c.admitJournal(); err != nil {
			return nil, c.withOwn(err, &own)
		}
	}
	again := c.req
	if c.req.Body != nil && c.req.Body != http.NoBody {
		// The same request, with the same body, once. (trigger made sure
		// GetBody is there.)
		body, err := c.req.GetBody()
		if err != nil {
			if final {
				c.b.unsend()
			} else {
				c.b.release()
			}
			return nil, c.stop(StopUnreplayableBody, "the request body could not be read again", own.status, own.requestID, nil)
		}
		again = c.req.Clone(c.ctx)
		again.Body = body
	}
	return c.send(again, 2, event)
}

// withOwn adds a re-send's own 429 evidence to a stop error.
func (c *call) withOwn(err error, own *waitPlan) error {
	var se *StopError
	if errors.As(err, &se) && se.StatusCode == 0 {
		cp := *se
		cp.StatusCode, cp.RequestID = own.status, own.requestID
		return &cp
	}
	return err
}

// trigger says how the policy treats a 429 of this request: a GET is
// re-sent (read-429), a marked replayable upload is re-sent (queue-429),
// any other mutation keeps its delay for the sequence's other requests
// (write-429). triggerNone means the policy leaves it alone.
func (c *call) trigger() trigger {
	switch {
	case c.method == http.MethodGet:
		if c.req.Body != nil && c.req.Body != http.NoBody && c.req.GetBody == nil {
			return triggerNone // a GET whose body cannot be sent again
		}
		return triggerRead429
	case httprule.IsMutation(c.method):
		if c.s.queueRetry && c.req.GetBody != nil {
			return triggerQueue429
		}
		return triggerWrite429
	}
	return triggerNone
}

// plan turns a parsed Retry-After and Azure's millisecond floor into the
// delay, or says why it must not be waited: oversized, unrepresentable or
// overlong, above the budget's wait ceiling. The floor (retry-after-ms,
// x-ms-retry-after-ms) only ever lengthens the wait; floorMs is non-zero
// when it did.
func (c *call) plan(ra RetryAfter, timing *RetryAfterTiming, ms int64, msKind RetryAfterKind) (delay time.Duration, floorMs int64, refuse StopReason, detail string) {
	_, _, maxWait := c.b.limits()
	ceiling := strconv.Itoa(int(MaxServerWait/time.Second)) + " s ceiling"
	switch {
	case ra.Kind == RetryAfterOversized:
		return 0, 0, StopOversized, "the Retry-After field is longer than the size bound"
	case msKind == RetryAfterOversized:
		return 0, 0, StopOversized, "the retry-after-ms field is longer than the size bound"
	case timing == nil:
		return 0, 0, StopOverlong, "the Retry-After delay is not representable"
	case ra.Kind == RetryAfterOverlong:
		return 0, 0, StopOverlong, "the Retry-After delay is above the " + ceiling
	case msKind == RetryAfterOverlong:
		return 0, 0, StopOverlong, "the retry-after-ms floor is above the " + ceiling
	}
	delay = time.Duration(timing.ServerDelaySeconds) * time.Second
	if msKind == RetryAfterSeconds && time.Duration(ms)*time.Millisecond > delay {
		delay, floorMs = time.Duration(ms)*time.Millisecond, ms
	}
	if delay > maxWait {
		return 0, 0, StopOverlong, "the server's delay is above the sequence's wait ceiling"
	}
	return delay, floorMs, "", ""
}

// withFloor returns the timing a journal keeps for a 429: the Retry-After
// field's, with its not-before moved out to a longer millisecond floor,
// rounded up to the whole second (the journal keeps whole seconds).
func withFloor(t *RetryAfterTiming, receivedAt time.Time, ms int64, kind RetryAfterKind) *RetryAfterTiming {
	if t == nil || kind != RetryAfterSeconds {
		return t
	}
	end := receivedAt.Add(time.Duration(ms) * time.Millisecond)
	nb := end.Unix()
	if end.After(time.Unix(nb, 0)) {
		nb++
	}
	if nb <= t.NotBeforeUTC {
		return t
	}
	f := *t
	f.NotBeforeUTC, f.ServerDelaySeconds = nb, nb-t.ReceivedAtUTC
	return &f
}

// joinDiag joins two diagnostics.
func joinDiag(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// stop stops the sequence (or, without a budget, describes the journal's
// refusal), records the stop on the request's span, and returns the error
// to hand back.
func (c *call) stop(r StopReason, detail string, status int, id string, cause error) *StopError {
	if c.b == nil {
		return &StopError{Reason: r, Detail: detail, StatusCode: status, RequestID: id, Err: cause}
	}
	se := c.b.stopAt(r, detail, status, id, cause)
	c.recordStop()
	return se
}

func (c *call) name() string {
	if c.b == nil {
		return ""
	}
	return c.b.name
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
