package readrecovery

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/readrecovery/readrecovery/otelattr"
)

// This file is what a wait and a stop look like from outside: the sleep
// that a stop or the request's context ends, the wait's span, report record,
// metric and log record, and the stop's span event.

// sleepUntil waits until the given time. It ends at once when the
// sequence stops (with the stop), when its total runs out (total
// exhausted) or when the request's context ends (with its error). The
// request's claim is given back in each case.
func (c *call) sleepUntil(until time.Time) error {
	clk := c.t.clk()
	d := until.Sub(clk.Now())
	if d <= 0 {
		return nil
	}
	s := &c.b.s
	wctx, wake := context.WithCancelCause(c.ctx)
	defer wake(nil)
	id, ok := s.addWaiter(wake)
	if !ok {
		c.release()
		return s.stopped() // never nil once addWaiter refused
	}
	err := clk.Sleep(wctx, d)
	s.removeWaiter(id)
	if err == nil {
		return nil
	}
	c.release()
	now := clk.Now()
	switch { // what ended the wait
	case context.Cause(wctx) == error(errWokenByStop):
		return s.stopped() // set before the stop woke the wait
	case cutByTotal(c.ctx) != nil || s.expiredAt(now):
		return s.stopAt(now, StopTotalExhausted, detailTotal+" during a wait", 0, "", context.DeadlineExceeded)
	}
	return c.ctx.Err()
}

// waitSpan is one wait in progress: its span and what it records.
type waitSpan struct {
	span    trace.Span
	ctx     context.Context
	start   time.Time
	planned time.Duration
	plan    waitPlan
	resend  bool
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

func errorType(err error) string {
	var se *StopError
	switch {
	case errors.As(err, &se):
		return string(se.Reason)
	case errors.Is(err, context.Canceled):
		return "context.Canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "context.DeadlineExceeded"
	}
	return "error"
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
