package readrecovery

import (
	"context"
	"net/http"
	"reflect"
	"time"

	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/otelattr"
)

// This file is the policy's state machine: every decision about a request
// of a sequence (may it be sent now, must it wait for the window, what does
// its 429 do) is taken here, under the Budget's one lock, at a time the
// caller passes in (the ...At(now) style of golang.org/x/time/rate). The
// transport (roundtripper.go) acts on the decisions; it never changes the
// sequence's state itself.

// sequence is the policy's state of one Budget, guarded by Budget.mu.
type sequence struct {
	started  bool
	expired  bool // the total ran out (the deadline timer fired)
	deadline time.Time

	// The counts of claimed and sent requests are in Budget.n (see "The
	// admission word" below), where the admission fast path reads them
	// without the lock.

	win  *window // the sequence's one wait window, nil before it opens
	stop *StopError

	stopEvented bool // the stop was recorded on a span
}

// window is the sequence's one wait window: no request of the sequence is
// sent from its opening until until (the server's not-before time T).
type window struct {
	opened time.Time
	until  time.Time
	plan   waitPlan // the 429 that set until: what the waits record
}

// trigger is what opened a window; the policy compares these, and only the
// edges (spans, metrics, reports) turn them into otelattr values.
type trigger uint8

const (
	triggerNone trigger = iota
	triggerRead429
	triggerQueue429
	triggerWrite429
)

// String returns the trigger's attribute value ("read-429", ...).
func (t trigger) String() string {
	switch t {
	case triggerRead429:
		return otelattr.TriggerRead429
	case triggerQueue429:
		return otelattr.TriggerQueue429
	case triggerWrite429:
		return otelattr.TriggerWrite429
	}
	return ""
}

// waitPlan is what a wait records about the 429 that set its end.
type waitPlan struct {
	trigger    trigger
	ra         RetryAfter
	timing     *RetryAfterTiming
	floorMs    int64 // an Azure millisecond floor that applied, or 0
	diagnostic string
	requestID  string
	status     int
	method     string
	host, port string
	url        string
	// eventDigest is the journal entry that allowed a queue-429 re-send.
	eventDigest string
}

// repeatKey identifies a mutation for the repeat guard: the same method and
// URL, and the same x-ms-client-request-id (the ID azcore keeps across its
// own tries) or, without one, the same body object (azcore rewinds and
// sends again the body it was given; a new request has a body of its own).
type repeatKey struct {
	method, url, clientRequestID string
	body                         any // a pointer, compared by identity; nil without one
}

// step is what the policy tells the transport to do with a request.
type step uint8

const (
	stepSend   step = iota // send it now
	stepWait               // wait until the step's time, then ask again
	stepRefuse             // do not send it: the step's error says why
)

// admission is the policy's answer for a request about to be sent.
type admission struct {
	step  step
	until time.Time  // stepWait: the window's end
	plan  waitPlan   // stepWait: what the wait records
	err   *StopError // stepRefuse
	// late is true when the request was sent while the sequence had a
	// window (waiting in it, or after it): its 429 then finds the
	// opportunity used. A request sent before the window opened was in
	// flight with the 429 that opened it, and its own 429 joins.
	late bool
}

// lazyNow reads the clock once, and only when a decision needs the time:
// most admissions (no window, sequence already started) do not, and the
// clock is the costliest part of them on some virtual machines.
type lazyNow struct {
	clk clock.Clock
	t   time.Time
	ok  bool
}

func (n *lazyNow) get() time.Time {
	if !n.ok {
		n.t, n.ok = n.clk.Now(), true
	}
	return n.t
}

// startLocked starts the sequence's clock at its first request and
// registers its deadline with the transport's shared deadline timer.
func (b *Budget) startLocked(t *Transport, now time.Time) {
	_, total, _ := b.limits()
	b.seq.started = true
	b.seq.deadline = now.Add(total)
	b.cut.setDeadline(b, &t.deadlines, t.clk(), b.seq.deadline)
	if b.seq.stop == nil && !b.seq.expired && b.seq.win == nil {
		b.n.Or(nFast)
	}
}

// admitAt claims one request of the sequence at now. With final, a request
// that may go is counted as sent; without it (a journaled request, which
// asks its journal first), the transport calls proceedAt again just before
// sending.
func (b *Budget) admitAt(t *Transport, now *lazyNow, req *http.Request, mutation, final bool) admission {
	if !mutation && final && b.admitFast() {
		return admission{step: stepSend}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seq.stop != nil {
		return admission{step: stepRefuse, err: b.seq.stop}
	}
	if !b.seq.started {
		b.startLocked(t, now.get())
	}
	if b.seq.expired {
		return admission{step: stepRefuse, err: b.stopLocked(StopTotalExhausted, "the sequence's total time ran out", 0, "", context.DeadlineExceeded)}
	}
	if mutation && len(b.rareView().repeats) > 0 {
		if k, ok := repeatKeyOf(req); ok {
			for _, r := range b.x.repeats {
				if r == k {
					return admission{step: stepRefuse, err: &StopError{Sequence: b.name, Reason: StopRepeatRefused,
						Detail: "this mutation already met 429 in the sequence; it is never sent again"}}
				}
			}
		}
	}
	if !b.claim() {
		return admission{step: stepRefuse, err: b.stopLocked(StopRequestsExhausted, "the sequence's request limit was reached", 0, "", nil)}
	}
	return b.windowCheckLocked(now, final)
}

// proceedAt asks again for a request already admitted: after its wait, or
// (a journaled request) once its journal allowed it. A refused request
// gives its claim back.
func (b *Budget) proceedAt(now *lazyNow, final bool) admission {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seq.stop != nil {
		b.n.Add(^uint64(nClaimed - 1))
		return admission{step: stepRefuse, err: b.seq.stop}
	}
	if b.seq.expired {
		b.n.Add(^uint64(nClaimed - 1))
		return admission{step: stepRefuse, err: b.stopLocked(StopTotalExhausted, "the sequence's total time ran out", 0, "", context.DeadlineExceeded)}
	}
	return b.windowCheckLocked(now, final)
}

// The admission word, Budget.n: the requests claimed (admitted and not
// given back: sent, waiting to be sent, or re-sends reserved by a 429
// decision) in bits 0-31, what the request limit holds against; the
// requests handed to the network (Report.Requests) in bits 32-62; and
// nFast, set while a request may be admitted without the lock: the
// sequence has started, and has no window, no stop and no expiry. Every
// change of the counts is atomic, so the limit stays exact however many
// requests run at once, on either path.
const (
	nClaimed   = 1
	nSent      = 1 << 32
	nFast      = 1 << 63
	nCountMask = 1<<32 - 1
)

func claimedOf(w uint64) int { return int(w & nCountMask) }
func sentOf(w uint64) int    { return int(w >> 32 & (1<<31 - 1)) }

// admitFast admits a read without the lock when nFast is set and the limit
// allows: the common case of a sequence without a window. It claims and
// counts the request as sent in one step.
func (b *Budget) admitFast() bool { return b.claimIf(nFast, nClaimed+nSent) }

// claim claims one request if the limit allows.
func (b *Budget) claim() bool { return b.claimIf(0, nClaimed) }

// claimIf adds inc to the admission word if it has the bits of need and
// the limit allows one more claim.
func (b *Budget) claimIf(need, inc uint64) bool {
	maxRequests, _, _ := b.limits()
	for {
		w := b.n.Load()
		if w&need != need || claimedOf(w) >= maxRequests {
			return false
		}
		if b.n.CompareAndSwap(w, w+inc) {
			return true
		}
	}
}

// windowCheckLocked holds a request back until the window's end, or lets
// it go (counting it as sent when final).
func (b *Budget) windowCheckLocked(now *lazyNow, final bool) admission {
	if w := b.seq.win; w != nil && now.get().Before(w.until) {
		return admission{step: stepWait, until: w.until, plan: w.plan}
	}
	if final {
		b.n.Add(nSent)
	}
	return admission{step: stepSend, late: b.seq.win != nil}
}

// unsend takes back a request counted as sent that was not sent after all
// (its body could not be read again).
func (b *Budget) unsend() {
	b.n.Add(^uint64(nClaimed + nSent - 1))
}

// release gives back the claim of a request that was admitted but not
// sent (its journal refused it, its context ended).
func (b *Budget) release() {
	b.n.Add(^uint64(nClaimed - 1))
}

// in429 is what the policy needs to know of a 429.
type in429 struct {
	trigger  trigger   // what the request's 429 does (never triggerNone)
	attempt  int       // 2 for a re-send
	late     bool      // the request was sent while the sequence had a window
	received time.Time // when the 429 arrived
	delay    time.Duration
	// refuse is set when the delay must not be waited (oversized,
	// unrepresentable, overlong, above the wait ceiling).
	refuse StopReason
	detail string
	plan   waitPlan
	repeat *repeatKey // a mutation's key for the repeat guard
}

// decision is the policy's answer to a 429.
type decision struct {
	resend bool      // wait until until, then re-send (the claim is held)
	until  time.Time // the re-send's not-before
	err    *StopError
}

// on429At decides a 429 at now. Without resend, the 429 goes back to the
// caller untouched; err says when the sequence stopped because of it.
func (b *Budget) on429At(now time.Time, in in429) decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	if in.repeat != nil {
		x := b.rareLocked()
		x.repeats = append(x.repeats, *in.repeat)
	}
	st, id := in.plan.status, in.plan.requestID
	switch {
	case b.seq.stop != nil:
		return decision{err: b.seq.stop}
	case in.attempt > 1:
		return decision{err: b.stopLocked(StopPersistent429, "the re-sent request met 429 again", st, id, nil)}
	case in.late:
		return decision{err: b.stopLocked(StopOpportunityUsed, "a 429 came after the sequence's one wait window: its one opportunity to wait is used", st, id, nil)}
	case in.refuse != "":
		return decision{err: b.stopLocked(in.refuse, in.detail, st, id, nil)}
	}
	notBefore := in.received.Add(in.delay)
	resend := in.trigger != triggerWrite429
	w := b.seq.win
	if w == nil {
		if !notBefore.Before(b.seq.deadline) {
			return decision{err: b.stopLocked(StopWaitExceedsTotal, "the server's delay is longer than what remains of the sequence's total", st, id, nil)}
		}
		if resend && !b.claim() {
			return decision{err: b.stopLocked(StopRequestsExhausted, "no request is left for the re-send", st, id, nil)}
		}
		b.seq.win = &window{opened: in.received, until: notBefore, plan: in.plan}
		b.n.And(^uint64(nFast)) // every admission now asks the window
		b.rareLocked().window = &WindowRecord{
			Trigger: in.plan.trigger.String(), RetryAfter: in.plan.ra, Timing: in.plan.timing,
			RequestID: id, Length: notBefore.Sub(in.received),
		}
		if !resend {
			return decision{}
		}
		return decision{resend: true, until: notBefore}
	}
	// A request sent before the window opened: its 429 joins the window.
	rec := b.rareLocked().window
	rec.Joined++
	until := w.until
	if notBefore.After(until) {
		until = notBefore
	}
	if notBefore.After(w.until) {
		if !notBefore.Before(b.seq.deadline) {
			return decision{err: b.stopLocked(StopWaitExceedsTotal, "the server's delay is longer than what remains of the sequence's total", st, id, nil)}
		}
		// The window's end moves out to this request's own not-before, for
		// every request of the sequence not yet sent (even when the first
		// end had passed: the server has asked for longer since).
		w.until, w.plan = notBefore, in.plan
		rec.Extended++
		rec.Length = notBefore.Sub(w.opened)
	}
	if !resend {
		return decision{}
	}
	if !b.claim() {
		return decision{err: b.stopLocked(StopRequestsExhausted, "no request is left for the re-send", st, id, nil)}
	}
	return decision{resend: true, until: until}
}

// stopAt stops the sequence (if it is not already) and returns the error
// to hand back, carrying this request's status, ID and cause.
func (b *Budget) stopAt(r StopReason, detail string, status int, requestID string, cause error) *StopError {
	b.mu.Lock()
	defer b.mu.Unlock()
	first := b.seq.stop == nil
	se := b.stopLocked(r, detail, status, requestID, cause)
	if first {
		return se
	}
	return &StopError{Sequence: b.name, Reason: r, Detail: detail, StatusCode: status, RequestID: requestID, Err: cause}
}

// stopLocked records the first stop of the sequence, wakes every request
// waiting in its window (they end with the stop error before any network
// access), and returns the stop.
func (b *Budget) stopLocked(r StopReason, detail string, status int, requestID string, cause error) *StopError {
	if b.seq.stop != nil {
		return b.seq.stop
	}
	b.seq.stop = &StopError{Sequence: b.name, Reason: r, Detail: detail, StatusCode: status, RequestID: requestID, Err: cause}
	b.n.And(^uint64(nFast))
	for id, wake := range b.rareView().waiters {
		wake(errWokenByStop)
		delete(b.x.waiters, id)
	}
	return b.seq.stop
}

// errWokenByStop is the cause with which a stop ends the waits of its
// sequence.
var errWokenByStop = &StopError{Reason: "woken"}

// addWaiter registers a wait that a stop ends; false when the sequence has
// stopped already.
func (b *Budget) addWaiter(wake context.CancelCauseFunc) (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seq.stop != nil {
		return 0, false
	}
	x := b.rareLocked()
	if x.waiters == nil {
		x.waiters = make(map[uint64]context.CancelCauseFunc)
	}
	x.nextWaiter++
	x.waiters[x.nextWaiter] = wake
	return x.nextWaiter, true
}

func (b *Budget) removeWaiter(id uint64) {
	b.mu.Lock()
	delete(b.rareView().waiters, id)
	b.mu.Unlock()
}

// stopError returns the sequence's stop as an error; call it only when the
// sequence has stopped.
func (b *Budget) stopError() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq.stop
}

// isExpired reports whether the sequence's total has run out.
func (b *Budget) isExpired() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq.expired
}

// takeStopEvent reports, once, that the sequence's stop has not yet been
// recorded on a span.
func (b *Budget) takeStopEvent() (*StopError, int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seq.stop == nil || b.seq.stopEvented {
		return nil, 0, false
	}
	b.seq.stopEvented = true
	return b.seq.stop, sentOf(b.n.Load()), true
}

// repeatKeyOf returns a mutation's repeat-guard key. False when a retry
// cannot be told from a new request: no x-ms-client-request-id, and a body
// that is not a pointer (no identity to compare). A mutation without a
// body is identified by its method and URL alone.
func repeatKeyOf(req *http.Request) (repeatKey, bool) {
	k := repeatKey{method: req.Method, url: req.URL.String(), clientRequestID: req.Header.Get("x-ms-client-request-id")}
	if k.clientRequestID != "" || req.Body == nil || req.Body == http.NoBody {
		return k, true
	}
	if reflect.ValueOf(req.Body).Kind() != reflect.Pointer {
		return repeatKey{}, false
	}
	k.body = req.Body
	return k, true
}
