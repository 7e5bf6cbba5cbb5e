package readrecovery

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/otelattr"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// This file is the type call and its methods: one request's trip through
// the policy. It gathers the facts (facts429), asks the state machine
// (sequence.go), acts on the answer: admits, sends, waits (sleepUntil,
// sleepFor, the wait's span), re-sends, stops; it enters a throttled
// mutation in the repeat guard (repeatguard.go) and keeps the evidence in
// the Budget (budget.go). Only the methods that hold a request to its
// scope's room live beside the room, in shared.go.

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
	sentAt time.Time // when the request holding place was handed to the base
	room   roomHold  // its part in the scope's room (scope-room)
}

// admit asks the policy about the request now, and starts the total's
// cut-off at the sequence's first request.
func (c *call) admit(r request) admission {
	clk := c.t.clk()
	now := instant{clk: clk}
	if t := c.t.shared; t != nil {
		if t.sharing != nil {
			t.sharing.look(c.ctx, c.scopeOf(), now.get()) // the scope store's card (scopeshare.go)
		}
		// A place whose time has come stays the request's: asked again
		// (its journal first, or the held re-check), it still goes.
		if f, p, ok := t.take(c.scopeOf(), now.get(), c.place); ok {
			// Copied into new values here, so that f and p stay on the
			// stack when the scope is not restricted (most requests).
			fp, pp := new(restricted), new(place)
			*fp, *pp = f, p
			r.shared, c.place = fp, pp
		} else if p.went {
			// Its place's time came: kept, so that asked again (the held
			// re-check) it still goes at once.
			if c.place == nil || *c.place != p {
				pp := new(place)
				*pp = p
				c.place = pp
			}
		}
	}
	if c.t.shared != nil && !r.hold && c.room.n == 0 {
		// docs/policy.md: scope-room. The hand-off itself: a place in the
		// scope's room first, or a wait for one.
		if !c.enterRoom(&now) {
			if c.room.since.IsZero() {
				c.room.since = now.get()
			}
			host, port := hostPort(c.req)
			r.noRoom, r.roomSince, r.roomRenew = true, c.room.since, c.room.renew
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
			until := adm.until
			if !c.room.recheck.IsZero() && c.room.recheck.Before(until) {
				until = c.room.recheck // the room changes by itself: ask again then
			}
			err = c.sleepRoom(until)
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
	case c.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(cutByTotal(c.ctx) != nil && errors.As(err, &restricted) && !errors.As(err, &full))):
		// A restriction found once the total cut the context off is the
		// total's doing (a list or read it cut short is a finding to the
		// journal): the stop is the total's (journalhook.go).
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
	if c.place != nil {
		c.sentAt = c.t.clk().Now() // a paced request: its release learns from when it went
	}
	resp, err := c.handOver(out)
	if c.room.n != 0 && (err != nil || !httprule.IsThrottled(resp.StatusCode)) {
		c.leaveRoom(resp, false) // a 429 leaves once its restriction is noted (facts429)
	}
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
			c.t.shared.succeeded(c.t.clk().Now(), c.sentAt, *c.place)
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
		// Only now may the next request of the scope go: it finds the
		// restriction this 429 set.
		c.leaveRoom(resp, in.gen != 0)
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

// stop stops the sequence (or, without a budget, describes the journal's
// refusal), records the stop on the request's span, and returns the error
// to hand back.
func (c *call) stop(r StopReason, detail string, status int, id string, cause error) *StopError {
	if c.b == nil {
		return &StopError{Reason: r, Detail: detail, StatusCode: status, RequestID: id, Err: cause}
	}
	se := c.b.s.stopWith(r, detail, status, id, cause)
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

// sleepUntil waits until the given time. It ends at once when the
// sequence stops (with the stop), when its total runs out (total
// exhausted) or when the request's context ends (with its error). The
// request's claim is given back in each case.
func (c *call) sleepUntil(until time.Time) error {
	d := until.Sub(c.t.clk().Now())
	if d <= 0 {
		return nil
	}
	wctx, wake := context.WithCancelCause(c.ctx)
	defer wake(nil)
	return c.sleepFor(wctx, wake, d, nil)
}

// sleepFor sleeps d in wctx as one of the sequence's waiters, so that a
// stop wakes it through wake, and says what ended the sleep: nil when d ran
// out or when wctx was cancelled with the cause done (the waker's good
// news, such as the room's errRoomFree); else the request's claim is given
// back and the error is the stop, the total's end or the request's context
// error. sleepUntil and sleepRoom share it.
func (c *call) sleepFor(wctx context.Context, wake context.CancelCauseFunc, d time.Duration, done error) error {
	clk := c.t.clk()
	s := &c.b.s
	id, ok := s.addWaiter(wake)
	if !ok {
		c.release()
		return s.stopped() // never nil once addWaiter refused
	}
	err := clk.Sleep(wctx, d)
	s.removeWaiter(id)
	if err == nil || (done != nil && context.Cause(wctx) == done) {
		return nil
	}
	c.release()
	switch { // what ended the wait
	case context.Cause(wctx) == error(errWokenByStop):
		return s.stopped() // set before the stop woke the wait
	case cutByTotal(c.ctx) != nil || s.expiredAt(clk.Now()):
		return s.stopWith(StopTotalExhausted, detailTotal+" during a wait", 0, "", context.DeadlineExceeded)
	}
	return c.ctx.Err()
}

// startWait opens the span of a wait until until.
func (c *call) startWait(p waitPlan, until time.Time, resend bool) *waitSpan {
	start := c.t.clk().Now()
	planned := max(until.Sub(start), 0)
	var delay int64
	if p.timing != nil {
		delay = p.timing.ServerDelaySeconds
	}
	port, _ := strconv.Atoi(p.port)
	ctx, span := c.t.tr().Start(c.ctx, otelattr.WaitSpanName,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(start),
		trace.WithAttributes(otelattr.Wait(otelattr.WaitInfo{
			Sequence: c.name(), Trigger: p.trigger.String(),
			RetryAfterKind: string(p.ra.Kind), RetryAfterValue: p.ra.Value,
			ServerDelaySeconds: delay, PlannedSeconds: planned.Seconds(),
			RequestID: p.requestID, StatusCode: p.status, CauseMethod: p.method,
			Method: c.method, Resend: resend,
			ServerAddress: p.host, ServerPort: port, URL: p.url,
			FloorMs: p.floorMs, EventDigest: p.eventDigest,
		})...))
	return &waitSpan{span: span, ctx: ctx, start: start, planned: planned, plan: p, resend: resend}
}

// endWait closes a wait's span and records it: in the report, the metrics
// and the log. err is what ended it early, or nil.
func (c *call) endWait(w *waitSpan, err error) {
	if w == nil {
		return
	}
	end := c.t.clk().Now()
	actual := end.Sub(w.start)
	canceled := err != nil
	c.b.recordWait(WaitRecord{
		Trigger: w.plan.trigger.String(), Resend: w.resend, Method: c.method,
		RetryAfter: w.plan.ra, Timing: w.plan.timing, Planned: w.planned,
		Actual: actual, RequestID: w.plan.requestID, Canceled: canceled,
		Diagnostic: w.plan.diagnostic, FloorMs: w.plan.floorMs,
	})
	if c.t.metrics != nil {
		c.t.metrics.wait(c.ctx, w.plan.trigger.String(), actual, canceled)
	}
	if canceled {
		w.span.SetStatus(codes.Error, "wait ended early")
		w.span.SetAttributes(otelattr.ErrorType.String(errorType(err)))
	}
	w.span.End(trace.WithTimestamp(end))
	if l := c.t.logger; l != nil {
		l.LogAttrs(c.ctx, slog.LevelInfo, "readrecovery: wait",
			slog.String(otelattr.LogSequence, c.name()),
			slog.String(otelattr.LogTrigger, w.plan.trigger.String()),
			slog.String(otelattr.LogMethod, c.method),
			slog.Bool(otelattr.LogResend, w.resend),
			slog.String(otelattr.LogRetryAfterKind, string(w.plan.ra.Kind)),
			slog.Int64(otelattr.LogRetryAfterValue, w.plan.ra.Value),
			slog.Float64(otelattr.LogPlannedSeconds, w.planned.Seconds()),
			slog.Float64(otelattr.LogActualSeconds, actual.Seconds()),
			slog.Int64(otelattr.LogFloorMs, w.plan.floorMs),
			slog.String(otelattr.LogRequestID, w.plan.requestID),
			slog.String(otelattr.LogServerAddress, w.plan.host),
			slog.String(otelattr.LogURL, w.plan.url),
			slog.Bool(otelattr.LogCanceled, canceled))
	}
}

// recordStop records the sequence's stop, once per sequence: an event on the
// request's span, or on a short span of its own when the request's
// context has no recording span; and a log record.
func (c *call) recordStop() {
	if c.b == nil {
		return
	}
	se, sent, ok := c.b.s.takeStopEvent()
	if !ok {
		return
	}
	if c.t.metrics != nil {
		c.t.metrics.stop(c.ctx, se.Reason)
	}
	attrs := otelattr.Stop(c.b.s.name, string(se.Reason), se.Detail, sent)
	span := trace.SpanFromContext(c.ctx)
	if span.IsRecording() {
		span.AddEvent(otelattr.StopEventName, trace.WithAttributes(attrs...))
	} else {
		_, own := c.t.tr().Start(c.ctx, otelattr.StopSpanName, trace.WithSpanKind(trace.SpanKindInternal))
		own.AddEvent(otelattr.StopEventName, trace.WithAttributes(attrs...))
		own.SetStatus(codes.Error, string(se.Reason))
		own.End()
	}
	if l := c.t.logger; l != nil {
		l.LogAttrs(c.ctx, slog.LevelWarn, "readrecovery: sequence stopped",
			slog.String(otelattr.LogSequence, c.b.s.name),
			slog.String(otelattr.LogReason, string(se.Reason)),
			slog.String(otelattr.LogDetail, se.Detail),
			slog.Int(otelattr.LogStatus, se.StatusCode),
			slog.String(otelattr.LogRequestID, se.RequestID),
			slog.Int(otelattr.LogRequests, sent))
	}
}

// wrapBody puts the cut-off on resp's body (not on a missing or empty
// one), keeping the interfaces the base gave it (an io.Writer stays one).
func (c *call) wrapBody(resp *http.Response) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	cb := &cutBody{ReadCloser: resp.Body, ctx: c.ctx, t: c.t, b: c.b}
	if w, ok := resp.Body.(io.Writer); ok {
		resp.Body = cutWriteBody{cb, w}
		return
	}
	resp.Body = cb
}
