package readrecovery

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/internal/unixtime"
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
		shared:  c.shared,
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
	mutation := httprule.IsMutation(methodOf(req))
	if err := t.refuseRepeat(req, s, mutation); err != nil {
		return nil, err
	}
	if s == nil || (s.budget == nil && s.journal == nil && s.op == nil) {
		var resp *http.Response
		var err error
		if t.shared != nil && req.URL != nil {
			resp, err = t.passShared(req)
		} else {
			resp, err = t.baseRT().RoundTrip(req)
		}
		if err == nil && resp != nil && resp.StatusCode == http.StatusTooManyRequests && mutation {
			t.guard.enter(newMutationID(req, s), throttledBy{resp.StatusCode, redact.RequestID(resp.Header)}, nil)
		}
		return resp, err
	}
	if req.URL == nil {
		closeRequestBody(req)
		return nil, errNilURL
	}
	c := call{t: t, req: req, ctx: req.Context(), s: s, b: s.budget, method: methodOf(req), mutation: mutation}
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
}

// sentBody tells when the base transport has closed a request's body
// (http.RoundTripper: RoundTrip closes it, maybe after it returned).
type sentBody struct {
	io.ReadCloser
	once sync.Once
	done chan struct{}
}

func (b *sentBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { close(b.done) })
	return err
}

// closed is closed once the body is; nil for a nil body.
func (b *sentBody) closed() <-chan struct{} {
	if b == nil {
		return nil
	}
	return b.done
}

func (c *call) roundTrip() (*http.Response, error) {
	if err := c.ctx.Err(); err != nil && cutByTotal(c.ctx) == nil {
		// Nothing to send for a caller that has given up; the sequence
		// goes on. (A context the total ended is the policy's to refuse.)
		closeRequestBody(c.req)
		return nil, err
	}
	if c.b != nil {
		if err := c.await(c.admit(request{mutation: c.mutation, hold: c.s.journal != nil}), nil); err != nil {
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

// admit asks the policy about the request now, and starts the total's
// cut-off at the sequence's first request.
func (c *call) admit(r request) admission {
	clk := c.t.clk()
	now := instant{clk: clk}
	if t := c.t.shared; t != nil {
		// A place whose time has come stays the request's: asked again
		// (its journal first, or the held re-check), it still goes.
		if f, p, ok := t.take(c.scopeOf(), now.get(), c.place); ok {
			r.shared, c.place = &f, &p
		}
	}
	a := c.b.s.admitAt(&now, r)
	if a.started {
		c.b.startCut(&c.t.cuts, clk)
	}
	if a.step == stepRefuse {
		c.givePlaceBack()
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
		if span == nil {
			span = c.startWait(*adm.plan, adm.until, own != nil)
		}
		if err := c.sleepUntil(c.wakeAt(adm.until)); err != nil {
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

// admitJournal checks, before any network access, that the journal's
// status allows the request.
func (c *call) admitJournal() error {
	if err := c.s.journal.Admit(c.ctx, c.t.clk().Now().UTC()); err != nil {
		return c.journalRefusal(err, StopJournalRestricted, "the journal's status forbids network access")
	}
	return nil
}

// detailJournalFull is the detail of a journal-full stop.
const detailJournalFull = "the journal is full: the request could not be recorded, so it was not sent"

// journalRefusal maps a journal's refusal: a replay of an upload on
// record refuses this request only; the caller's own context ending
// returns its error (and the sequence's total running out stops it as
// such); a restriction (an error with a JournalRestricted method) stops it
// as journal-restricted; anything else stops the sequence with reason
// (persistence-failed for Begin).
func (c *call) journalRefusal(err error, reason StopReason, detail string) error {
	c.release()
	var restricted interface{ JournalRestricted() }
	var full interface{ JournalFull() }
	switch {
	case errors.Is(err, ErrReplayRefused):
		return &StopError{Sequence: c.name(), Reason: StopReplayRefused,
			Detail: "the journal holds this upload's outcome: it is not sent again", Err: err}
	case c.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		if c.b != nil && (cutByTotal(c.ctx) != nil || c.b.s.expiredAt(c.t.clk().Now())) {
			return c.stop(StopTotalExhausted, detailTotal+" waiting for the journal", 0, "", context.DeadlineExceeded)
		}
		return c.ctx.Err()
	case errors.As(err, &full):
		return c.stop(StopJournalFull, detailJournalFull, 0, "", err)
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
	}
	if c.b != nil && c.held {
		// The journal's slot may have taken a while: a window that opened
		// meanwhile holds this request back too.
		if err := c.await(c.admit(request{mutation: c.mutation, claimed: true}), nil); err != nil {
			closeRequestBody(req)
			if c.s.journal != nil {
				// Nothing was sent; the journal keeps it as attempted with
				// an unknown outcome, never as never-attempted.
				_ = c.s.journal.Complete(c.ctx, jr, JournalOutcome{TransportError: "not sent: " + err.Error()})
			}
			return nil, err
		}
	}
	if c.b != nil && c.mutation {
		c.mutationNo, c.attempt = c.b.mutationSent(c.mutationFacts(), c.mutationNo, c.ordinal)
	}
	out := req
	if attempt == 1 && c.b != nil && c.mutation && req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
		// Know when net/http is done with the body: only then may the
		// repeat guard read a throttled mutation's body through GetBody
		// (azcore's hands back the very stream being sent). A shallow
		// copy, as net/http's own client makes: the caller's request is
		// not changed.
		c.sent = &sentBody{ReadCloser: req.Body, done: make(chan struct{})}
		cp := *req
		cp.Body = c.sent
		out = &cp
	}
	resp, err := c.t.baseRT().RoundTrip(out)
	if resp != nil && out != req && resp.Request == out {
		resp.Request = req
	}
	if err != nil {
		return nil, c.onTransportError(jr, err)
	}
	if !httprule.IsThrottled(resp.StatusCode) {
		return c.onResponse(resp, jr)
	}
	return c.on429(resp, jr, attempt)
}

// onTransportError keeps the evidence of a request that got no response
// and passes the error through. When the sequence's total cut the request
// off, the error is the total's stop.
func (c *call) onTransportError(jr JournalRequest, err error) error {
	diag := redact.Text(err.Error())
	if c.mutationNo > 0 {
		c.b.recordMutation(MutationOutcome{Request: c.mutationNo, Method: c.method, Error: diag, Attempt: c.attempt})
	}
	if c.s.journal != nil {
		if jerr := c.s.journal.Complete(c.ctx, jr, JournalOutcome{TransportError: diag}); jerr != nil {
			c.stop(StopPersistenceFailed, "the journal could not record the request's outcome", 0, "", jerr)
		}
	}
	if c.b != nil && (cutByTotal(c.ctx) != nil || c.b.s.expiredAt(c.t.clk().Now())) {
		return c.stop(StopTotalExhausted, detailTotal+" during the request", 0, "", context.DeadlineExceeded)
	}
	return err
}

// onResponse keeps the evidence of a response other than 429 and hands it
// back, its body under the total's cut-off.
func (c *call) onResponse(resp *http.Response, jr JournalRequest) (*http.Response, error) {
	ok := httprule.IsSuccess(resp.StatusCode)
	if c.b != nil {
		c.record(resp)
		if ok && c.place != nil {
			c.t.shared.succeeded(c.t.clk().Now(), *c.place)
		}
	}
	if c.s.journal != nil {
		id := redact.RequestID(resp.Header)
		out := JournalOutcome{StatusCode: resp.StatusCode, RequestID: id, ETag: etagOf(resp.Header, ok)}
		if err := c.s.journal.Complete(c.ctx, jr, out); err != nil {
			if ok && c.mutation {
				// The ACK goes back to the caller and stays in the report;
				// further requests stop.
				c.stop(StopReceiptFailed, "the upload was acknowledged but its receipt could not be written", resp.StatusCode, id, err)
			} else {
				c.stop(StopPersistenceFailed, "the journal could not record the request's outcome", resp.StatusCode, id, err)
			}
		}
	}
	if c.b != nil {
		c.wrapBody(resp)
	}
	return resp, nil
}

// record keeps a response's evidence in the budget.
func (c *call) record(resp *http.Response) {
	if c.mutationNo == 0 {
		if c.method == http.MethodGet {
			c.b.recordRead(resp.StatusCode, resp.Header, c.ordinal)
		}
		return
	}
	ok := httprule.IsSuccess(resp.StatusCode)
	c.b.recordMutation(MutationOutcome{
		Request: c.mutationNo, Method: c.method, StatusCode: resp.StatusCode, RequestID: redact.RequestID(resp.Header),
		ETag: etagOf(resp.Header, ok), Acked: ok, Attempt: c.attempt,
	})
}

// on429 gathers the facts of a 429 and acts on the policy's verdict.
func (c *call) on429(resp *http.Response, jr JournalRequest, attempt int) (*http.Response, error) {
	in := c.facts429(resp, attempt)
	if c.mutation {
		c.t.guard.enter(newMutationID(c.req, c.s), throttledBy{resp.StatusCode, in.plan.requestID}, c.sent.closed())
	}
	if c.b != nil {
		c.record(resp)
	}
	if c.s.journal != nil {
		if err := c.backoff(resp, jr, &in); err != nil {
			// Terminal before recovery: no wait, no re-send; the original
			// 429 goes back.
			reason, detail := StopPersistenceFailed, "the journal could not record the 429"
			var full interface{ JournalFull() }
			if errors.As(err, &full) {
				reason, detail = StopJournalFull, detailJournalFull
			}
			c.stop(reason, detail, resp.StatusCode, in.plan.requestID, err)
			return resp, nil
		}
	}
	if c.b == nil || in.trigger == triggerNone {
		return resp, nil // no budget, or not a request the policy recovers (HEAD, OPTIONS, ...)
	}
	v := c.b.s.on429At(in.received, in)
	if v.err != nil {
		c.recordStop()
		return resp, nil // not recovered: the 429 goes back untouched
	}
	if !v.resend {
		return resp, nil // a write 429: its delay holds the sequence's other requests
	}
	// Close the 429 body unread before the wait; a failed close blocks
	// recovery.
	if resp.Body != nil {
		if err := resp.Body.Close(); err != nil {
			c.release()
			return nil, c.stop(StopCleanupFailed, "closing the 429 response body failed: "+redact.Text(err.Error()), resp.StatusCode, in.plan.requestID, nil)
		}
	}
	return c.resend(in.plan, v.until)
}

// facts429 reads what the policy decides a 429 on: its wait fields, what
// the request is, and what the waits will record.
func (c *call) facts429(resp *http.Response, attempt int) response429 {
	receivedAt := c.t.clk().Now()
	var tm RetryAfterTiming
	w := parseWaitFieldsAt(resp.Header, receivedAt, &tm)
	var timing *RetryAfterTiming
	if w.hasTiming {
		timing = &tm
	}
	trig := triggerOf(triggerFacts{
		get: c.method == http.MethodGet, mutation: c.mutation, queue: c.s.queueRetry,
		replayable: c.req.Body == nil || c.req.Body == http.NoBody || c.req.GetBody != nil,
	})
	host, port := hostPort(c.req)
	in := response429{
		trigger: trig, resend: attempt > 1, late: c.late, received: receivedAt, ms: w.ms,
		plan: waitPlan{
			trigger: trig, ra: w.ra, timing: timing, diagnostic: joinDiag(w.diag, w.msDiag),
			requestID: redact.RequestID(resp.Header), status: resp.StatusCode,
			method: c.method, host: host, port: port, url: redact.URL(c.req.URL),
		},
	}
	in.delay, in.plan.floorMs, in.refuse, in.detail = waitOf(w.ra, timing, w.ms, w.msKind)
	if c.t.shared != nil {
		in.gen = c.t.shared.note(c.scopeOf(), c.req, receivedAt, w, timing, resp.StatusCode, in.plan.requestID, c.place)
	}
	return in
}

// backoff writes the journal's backoff entry for a 429 and keeps in in
// what it recorded: the entry's event digest (a queue-429 re-send names
// it) and its not-before, whole seconds rounded up, which the wait does
// not end before, so that the journal allows the re-send.
func (c *call) backoff(resp *http.Response, jr JournalRequest, in *response429) error {
	jt := withFloor(in.plan.timing, in.received, in.ms)
	out := JournalOutcome{StatusCode: resp.StatusCode, RequestID: in.plan.requestID}
	ev, err := c.s.journal.Backoff(c.ctx, jr, out, in.plan.ra, jt)
	if err != nil {
		return err
	}
	in.plan.eventDigest = ev
	if jt != nil {
		in.notBefore = time.Unix(jt.NotBeforeUTC, 0)
	}
	return nil
}

// resend waits until the re-send's not-before (and the window's end), then
// sends the same request once more.
func (c *call) resend(own waitPlan, until time.Time) (*http.Response, error) {
	if err := c.await(admission{step: stepWait, until: until, plan: &own}, &own); err != nil {
		return nil, err
	}
	if c.s.journal != nil {
		if err := c.admitJournal(); err != nil {
			return nil, c.withOwn(err, &own)
		}
	}
	again := c.req
	if c.req.Body != nil && c.req.Body != http.NoBody {
		// The same request, with the same body, once (the trigger made
		// sure GetBody is there).
		body, err := c.req.GetBody()
		if err != nil {
			c.release()
			return nil, c.stop(StopUnreplayableBody, "the request body could not be read again", own.status, own.requestID, nil)
		}
		again = c.req.Clone(c.ctx)
		again.Body = body
	}
	return c.send(again, 2, own.eventDigest)
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

// waitOf turns a parsed Retry-After and Azure's millisecond floor into the
// server's delay, or says why it must not be waited: oversized,
// unrepresentable or above MaxServerWait (the Budget's own, lower ceiling
// is the policy's to apply). A valid millisecond field is a floor whatever
// the other fields hold (ms is the larger valid one: docs/policy.md:
// millisecond-floor); floorMs is non-zero when it made the wait longer.
func waitOf(ra RetryAfter, timing *RetryAfterTiming, ms int64, msKind RetryAfterKind) (delay time.Duration, floorMs int64, refuse StopReason, detail string) {
	switch {
	case ra.Kind == RetryAfterOversized:
		return 0, 0, StopOversized, detailOversized
	case msKind == RetryAfterOversized:
		return 0, 0, StopOversized, detailMsOversized
	case timing == nil:
		return 0, 0, StopOverlong, "the Retry-After delay is not representable"
	case ra.Kind == RetryAfterOverlong:
		return 0, 0, StopOverlong, detailOverlong
	case msKind == RetryAfterOverlong:
		return 0, 0, StopOverlong, detailMsOverlong
	}
	delay = time.Duration(timing.ServerDelaySeconds) * time.Second
	if f := time.Duration(ms) * time.Millisecond; f > delay {
		delay, floorMs = f, ms
	}
	return delay, floorMs, "", ""
}

// The parser-side details, formatted from the constants they name.
var (
	detailOversized   = "the Retry-After field is longer than " + strconv.Itoa(MaxRetryAfterBytes) + " bytes"
	detailMsOversized = "a millisecond wait field is longer than " + strconv.Itoa(MaxRetryAfterBytes) + " bytes"
	detailOverlong    = "the Retry-After delay is above the " + MaxServerWait.String() + " ceiling"
	detailMsOverlong  = "the millisecond floor is above the " + MaxServerWait.String() + " ceiling"
)

// withFloor returns the timing a journal keeps for a 429: the Retry-After
// field's, with its not-before moved out to a longer millisecond floor ms,
// rounded up to the whole second (the journal keeps whole seconds).
func withFloor(t *RetryAfterTiming, receivedAt time.Time, ms int64) *RetryAfterTiming {
	if t == nil || ms <= 0 {
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
	if nb > unixtime.Max {
		return nil // not representable: unresolved, never a failed write
	}
	f := *t
	f.NotBeforeUTC, f.ServerDelaySeconds = nb, nb-t.ReceivedAtUTC
	return &f
}

// joinDiag joins two diagnostics.
func joinDiag(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
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
	se := c.b.s.stopAt(c.t.clk().Now(), r, detail, status, id, cause)
	c.recordStop()
	return se
}

func (c *call) name() string {
	if c.b == nil {
		return ""
	}
	return c.b.s.name
}

// mutationFacts identify the request among the sequence's mutations.
func (c *call) mutationFacts() mutationFacts {
	return mutationFacts{op: c.s.op, requestID: clientRequestID(c.req.Header), method: c.method, url: c.req.URL.String()}
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
