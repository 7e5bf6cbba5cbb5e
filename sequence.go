package readrecovery

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/otelattr"
)

// This file is the policy's state machine. Every decision about a request
// of a sequence is taken here, under the sequence's one lock, from facts
// the transport gathered and a time it passes in (the ...At(now) style of
// golang.org/x/time/rate): may the request be sent now, must it wait for
// the window, does it repeat a throttled mutation, what does its 429 do.
// Nothing here knows net/http or the Transport; the transport acts on the
// decision values (roundtripper.go) and the evidence is kept beside
// (budget.go).

// sequence is the state of one Budget. The zero value is a sequence with
// the default limits that has not started.
type sequence struct {
	mu sync.Mutex

	name   string
	limits limits

	started  bool
	deadline time.Time // the total's end, from the first request
	claimed  int       // requests admitted and not given back (the request limit holds against it)
	sent     int       // requests handed to the network (Report.Requests)

	win     *window    // the one wait window, nil before it opens
	stop    *StopError // the first stop, nil while the sequence runs
	evented bool       // the stop was recorded on a span

	rare *sequenceRare // what few sequences need, made when one does

	ev evidence // what Report returns (budget.go)

	// The total's cut-off (deadline.go): the cancel functions of the
	// contexts WithBudget made (cut, the first; cuts, the others), those
	// made from a cancelable parent (pinned), the transport's timer the
	// sequence went to at its first request, and whether it fired.
	cut     context.CancelCauseFunc
	cutoffs *cutoffs
	expired bool
}

// sequenceRare is the part of a sequence's state that most sequences never
// use (no throttled mutation, no wait, one context): kept behind a pointer,
// made at first use, so that a live sequence stays small (bench:
// TestHeapPerLiveBudget).
type sequenceRare struct {
	waiters    map[uint64]context.CancelCauseFunc // waits a stop ends at once
	nextWaiter uint64

	cuts   []context.CancelCauseFunc // the cut-offs of WithBudget's later contexts
	pinned *pinnedCuts               // those made from a cancelable parent
}

// rareLocked returns the sequence's rare state, making it.
func (s *sequence) rareLocked() *sequenceRare {
	if s.rare == nil {
		s.rare = &sequenceRare{}
	}
	return s.rare
}

// limits are a sequence's ceilings; zero fields mean the defaults.
type limits struct {
	requests int           // 0: MaxSequenceRequests
	total    time.Duration // 0: MaxSequenceTotal
	wait     time.Duration
	waitSet  bool // wait was set (0 is a valid ceiling: no wait at all)
}

func (l limits) maxRequests() int {
	if l.requests <= 0 {
		return MaxSequenceRequests
	}
	return l.requests
}

func (l limits) maxTotal() time.Duration {
	if l.total <= 0 {
		return MaxSequenceTotal
	}
	return l.total
}

func (l limits) maxWait() time.Duration {
	if !l.waitSet {
		return MaxServerWait
	}
	return l.wait
}

// window is the sequence's one wait window: no request of the sequence is
// sent from its opening until until (the server's not-before time T).
type window struct {
	opened time.Time
	until  time.Time
	plan   *waitPlan // the 429 that set until: what the waits record
	rec    WindowRecord
	// gen is the shared restriction the window belongs to (shared.go),
	// 0 for none: a window opened by a 429 of a restricted scope, or by
	// the restriction itself. The requests of its sequence keep taking
	// places in that restriction's release within the one window.
	gen uint64
}

// trigger is what a request's 429 does. The policy compares these; the
// table below says everything else about each.
type trigger uint8

const (
	triggerNone trigger = iota // the policy leaves the 429 alone (HEAD, OPTIONS, ...)
	triggerRead429
	triggerQueue429
	triggerWrite429
	triggerShared // no 429 of the request's own: its scope is restricted (shared.go)
	triggerRoom   // no 429 at all: the scope has no room for one more request (shared.go)
)

// triggerFacts is what decides a request's trigger.
type triggerFacts struct {
	get        bool // the method is GET
	mutation   bool // the method may change server state
	replayable bool // the body can be produced again (no body, or GetBody)
	queue      bool // marked WithQueueRetry
}

// triggers is the one table of triggers, in the order they are tried:
// the first whose applies holds is the request's. Adding a trigger is a row
// here (and its otelattr value); the policy reads resend from it.
var triggers = [...]struct {
	trigger trigger
	name    string // the span, metric and report value
	resend  bool   // the request itself is re-sent once after the wait
	applies func(triggerFacts) bool
}{
	{triggerRead429, otelattr.TriggerRead429, true, func(f triggerFacts) bool { return f.get && f.replayable }},
	{triggerQueue429, otelattr.TriggerQueue429, true, func(f triggerFacts) bool { return f.mutation && f.queue && f.replayable }},
	{triggerWrite429, otelattr.TriggerWrite429, false, func(f triggerFacts) bool { return f.mutation }},
	// Set by the scope's restriction at admission, never by a 429.
	{triggerShared, otelattr.TriggerSharedRestriction, false, func(triggerFacts) bool { return false }},
	// Set by the scope's room at hand-off, never by a 429.
	{triggerRoom, otelattr.TriggerScopeRoom, false, func(triggerFacts) bool { return false }},
}

// triggerOf returns the trigger of a request's 429.
func triggerOf(f triggerFacts) trigger {
	for _, row := range triggers {
		if row.applies(f) {
			return row.trigger
		}
	}
	return triggerNone
}

// String returns the trigger's attribute value ("read-429", ...).
func (t trigger) String() string {
	for _, row := range triggers {
		if row.trigger == t {
			return row.name
		}
	}
	return ""
}

func (t trigger) resends() bool {
	for _, row := range triggers {
		if row.trigger == t {
			return row.resend
		}
	}
	return false
}

// waitPlan is what a wait records about the 429 that set its end. The
// policy carries it; only the edges (spans, logs, reports) read it.
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
	// fromStore: the restriction came from the scope store's card (another
	// process's 429), not from a 429 this process received.
	fromStore bool
}

// instant is the time of a decision: a fixed time (the step tables; a time
// the transport has read already), or the transport's clock, read at most
// once and only when the decision needs it. A started sequence without a
// window decides a request without the time: the total's end is then the
// timer's flag (sequence.expired). A clock read costs about 100 ns on this
// machine, a third of the transport's own cost per request
// (BenchmarkRoundTripPassThrough/budget), so most requests are spared it.
type instant struct {
	clk   clock.Clock
	t     time.Time
	known bool
}

// at is the fixed instant t.
func at(t time.Time) *instant { return &instant{t: t, known: true} }

// get returns the instant's time, reading the clock the first time.
func (i *instant) get() time.Time {
	if !i.known {
		i.t, i.known = i.clk.Now(), true
	}
	return i.t
}

// expiredLocked reports whether the total has run out at now: the timer
// said so, or now (when known) is at or after the deadline.
func (s *sequence) expiredLocked(now *instant) bool {
	return s.started && (s.expired || (now.known && !now.t.Before(s.deadline)))
}

// step is what the policy tells the transport to do with a request.
type step uint8

const (
	stepSend   step = iota // send it now
	stepWait               // wait until the admission's until, then ask again
	stepRefuse             // do not send it: err says why
)

// request is what the policy knows of a request about to be sent.
type request struct {
	mutation bool
	// claimed: the request holds its claim already (it waited, or it is a
	// re-send reserved by its 429, or its journal allowed it).
	claimed bool
	// hold: the request may go, but its journal must allow it first, so it
	// is not counted as sent yet; the transport asks again with claimed.
	hold bool
	// shared: the request's scope is restricted (WithSharedRestrictions);
	// nil when it is not, or the Transport shares no restrictions.
	shared *restricted
	// room: under shared restrictions, the scope's room (shared.go) has no
	// place for the request yet; it has waited for one since roomSince,
	// and roomPlan is what that wait records.
	noRoom    bool
	roomSince time.Time
	roomPlan  *waitPlan
	// roomRenew: the scope's quota is 0 until then (its reset headers);
	// zero when no reset is known.
	roomRenew time.Time
}

// admission is the policy's answer for a request about to be sent.
type admission struct {
	step  step
	until time.Time  // stepWait: the window's end
	plan  *waitPlan  // stepWait: what the wait records
	err   *StopError // stepRefuse
	// late: the request is sent while the sequence has a window (waiting
	// in it, or after it), so its 429 finds the opportunity used. A request
	// sent before the window opened was in flight with the 429 that opened
	// it, and its own 429 joins.
	late bool
	// ordinal numbers the requests handed to the network (1 for the first);
	// 0 unless stepSend counted this one.
	ordinal int
	// started: this admission started the sequence's clock; the transport
	// registers the total's cut-off (startCut).
	started bool
	// room: stepWait is a wait for the scope's room (until: the wait
	// ceiling or the total, whichever comes first), not a window.
	room bool
}

// admitAt decides whether r may be sent at now. A refused request that
// held a claim gives it back.
func (s *sequence) admitAt(now *instant, r request) admission {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a admission
	if !s.started {
		s.started, s.deadline, a.started = true, now.get().Add(s.limits.maxTotal()), true
	}
	if s.stop == nil && s.expiredLocked(now) {
		s.stopLocked(StopTotalExhausted, detailTotal, 0, "", context.DeadlineExceeded)
	}
	if s.stop != nil {
		if r.claimed {
			s.claimed--
		}
		return admission{step: stepRefuse, err: s.stop}
	}
	if !r.claimed {
		if s.claimed >= s.limits.maxRequests() {
			return admission{step: stepRefuse, err: s.stopLocked(StopRequestsExhausted, detailRequests, 0, "", nil)}
		}
		s.claimed++
	}
	if f := r.shared; f != nil && now.get().Before(f.until) {
		if err := s.restrictLocked(now.get(), f); err != nil {
			s.claimed-- // the claim this request holds, counted above or before
			return admission{step: stepRefuse, err: err}
		}
		if !f.until.Before(s.win.until) {
			a.step, a.until, a.plan = stepWait, earliest(f.until, now.get().Add(s.limits.maxWait())), f.plan
			return a
		}
	}
	if w := s.win; w != nil && now.get().Before(w.until) {
		a.step, a.until, a.plan = stepWait, w.until, w.plan
		return a
	}
	if r.noRoom {
		// docs/policy.md: scope-room. A wait like any other, against the
		// ceiling and the total, that opens no window: the sequence's one
		// opportunity to wait stays for the server's 429.
		end := r.roomSince.Add(s.limits.maxWait())
		renew := r.roomRenew
		switch {
		case !now.get().Before(end), renew.After(end):
			// (docs/policy.md: quota-headers) A quota that renews beyond
			// the ceiling stops the sequence now, not at the ceiling.
			s.claimed--
			return admission{step: stepRefuse, err: s.stopLocked(StopRestricted, detailRoomCeiling, 0, "", nil)}
		case !renew.Before(s.deadline):
			s.claimed--
			return admission{step: stepRefuse, err: s.stopLocked(StopRestricted, detailRoomTotal, 0, "", nil)}
		}
		if s.deadline.Before(end) {
			end = s.deadline
		}
		a.step, a.room, a.until, a.plan = stepWait, true, end, r.roomPlan
		return a
	}
	a.late = s.win != nil
	if !r.hold {
		s.sent++
		a.ordinal = s.sent
	}
	return a
}

// restrictLocked applies the scope's restriction f to the sequence at now
// (docs/policy.md: shared-restriction): the scope's T opens the
// sequence's one window, or moves out the window it has (one opened by
// the same restriction, or one still open); the request's place f.until
// (never before T) is where its wait ends, or the ceiling when it lies
// beyond (a ramp's place, expected sooner: it asks again then). It stops
// the sequence (restricted) when the place is not expected (f.expect)
// within the wait ceiling or the total,
// or when the sequence's window is over and was another's.
func (s *sequence) restrictLocked(now time.Time, f *restricted) *StopError {
	stop := func(detail string) *StopError {
		return s.stopLocked(StopRestricted, detail, f.plan.status, f.plan.requestID, nil)
	}
	w := s.win
	switch {
	case f.expect.Sub(now) > s.limits.maxWait():
		return stop(detailRestrictedCeiling)
	case !f.expect.Before(s.deadline):
		return stop(detailRestrictedTotal)
	case w == nil:
		s.win = &window{opened: now, until: f.t, plan: f.plan, gen: f.gen, rec: WindowRecord{
			Trigger: triggerShared.String(), RetryAfter: f.plan.ra, Timing: f.plan.timing,
			RequestID: f.plan.requestID, Length: f.t.Sub(now),
		}}
	case w.gen == f.gen || now.Before(w.until):
		if f.t.After(w.until) {
			w.until = f.t
			w.rec.Length = f.t.Sub(w.opened)
		}
		if w.gen == 0 {
			w.gen = f.gen
		}
	default:
		return stop(detailRestrictedUsed)
	}
	return nil
}

// releaseAt gives back the claim of a request that was admitted but is not
// sent after all (its journal refused it, its context ended, its body could
// not be produced again).
func (s *sequence) releaseAt(time.Time) {
	s.mu.Lock()
	s.claimed--
	s.mu.Unlock()
}

// response429 is what the policy knows of a 429.
type response429 struct {
	trigger  trigger   // what the request's 429 does (never triggerNone)
	resend   bool      // the request was itself a re-send
	late     bool      // it was sent while the sequence had a window (admission.late)
	received time.Time // when the 429 arrived
	// delay is the server's delay: the Retry-After's, or a longer
	// millisecond floor. notBefore, when later than received+delay, is
	// where a journal rounded its record up to (the wait ends no earlier).
	delay     time.Duration
	notBefore time.Time
	ms        int64 // the millisecond floor the fields asked for (the journal's record rounds it)
	// refuse is set when the parser says the delay must not be waited
	// (oversized, unrepresentable, above MaxServerWait).
	refuse StopReason
	detail string
	plan   waitPlan
	// gen is the shared restriction this 429 set or joined (shared.go), 0
	// for none: a window it opens belongs to that restriction's release.
	gen uint64
}

// verdict is the policy's answer to a 429.
type verdict struct {
	resend bool      // wait until until, then re-send (the claim is held)
	until  time.Time // the re-send's not-before
	err    *StopError
}

// on429At decides a 429 at now. Without resend, the 429 goes back to the
// caller untouched; err says when the sequence stopped because of it.
func (s *sequence) on429At(now time.Time, in response429) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, id := in.plan.status, in.plan.requestID
	stop := func(r StopReason, detail string) verdict {
		return verdict{err: s.stopLocked(r, detail, st, id, nil)}
	}
	end := in.received.Add(in.delay)
	if in.notBefore.After(end) {
		end = in.notBefore
	}
	switch {
	case s.stop != nil:
		return verdict{err: s.stop}
	case in.resend:
		return stop(StopPersistent429, detailPersistent)
	case in.late:
		return stop(StopOpportunityUsed, detailOpportunity)
	case in.refuse != "":
		return stop(in.refuse, in.detail)
	case in.delay > s.limits.maxWait():
		return stop(StopOverlong, detailWaitCeiling)
	case !end.Before(s.deadline):
		return stop(StopWaitExceedsTotal, detailExceedsTotal)
	}
	resend := in.trigger.resends()
	if resend && s.claimed >= s.limits.maxRequests() {
		return stop(StopRequestsExhausted, detailNoResend)
	}
	until := end
	if w := s.win; w == nil {
		plan := in.plan
		s.win = &window{opened: in.received, until: end, plan: &plan, rec: WindowRecord{
			Trigger: in.trigger.String(), RetryAfter: in.plan.ra, Timing: in.plan.timing,
			RequestID: id, Length: end.Sub(in.received),
		}, gen: in.gen}
	} else {
		// A request sent before the window opened: its 429 joins it. A
		// later end moves the window out for every request of the sequence
		// not yet sent (even when the first end had passed: the server has
		// asked for longer since).
		w.rec.Joined++
		if end.After(w.until) {
			plan := in.plan
			w.until, w.plan = end, &plan
			w.rec.Extended++
			w.rec.Length = end.Sub(w.opened)
		} else {
			until = w.until
		}
	}
	if !resend {
		return verdict{}
	}
	s.claimed++
	return verdict{resend: true, until: until}
}

// The details of the policy's stops and refusals.
const (
	detailTotal        = "the sequence's total time ran out"
	detailRequests     = "the sequence's request limit was reached"
	detailNoResend     = "no request is left for the re-send"
	detailPersistent   = "the re-sent request met 429 again"
	detailOpportunity  = "a 429 came after the sequence's one wait window: its one opportunity to wait is used"
	detailWaitCeiling  = "the server's delay is above the sequence's wait ceiling"
	detailExceedsTotal = "the server's delay is longer than what remains of the sequence's total"

	detailRestrictedCeiling = "the scope is restricted by another request's 429 beyond the sequence's wait ceiling"
	detailRestrictedTotal   = "the scope is restricted by another request's 429 beyond what remains of the sequence's total"
	detailRoomCeiling       = "the scope had no room for the request (its requests in flight at the limit the server allows) within the sequence's wait ceiling"
	detailRoomTotal         = "the scope's quota renews only after the sequence's total ends"
	detailRestrictedUsed    = "the scope is restricted again after the sequence's one wait window: its one opportunity to wait is used"
)

// stopWith stops the sequence (if it is not already) and returns the error
// to hand back: the sequence's first stop when it is this one, otherwise
// this request's own, with its status, ID and cause.
func (s *sequence) stopWith(r StopReason, detail string, status int, requestID string, cause error) *StopError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		return &StopError{Sequence: s.name, Reason: r, Detail: detail, StatusCode: status, RequestID: requestID, Err: cause}
	}
	return s.stopLocked(r, detail, status, requestID, cause)
}

// stopLocked records the first stop of the sequence, wakes every request
// waiting in its window (they end with the stop error before any network
// access), and returns the stop.
func (s *sequence) stopLocked(r StopReason, detail string, status int, requestID string, cause error) *StopError {
	if s.stop != nil {
		return s.stop
	}
	s.stop = &StopError{Sequence: s.name, Reason: r, Detail: detail, StatusCode: status, RequestID: requestID, Err: cause}
	if s.rare != nil {
		for id, wake := range s.rare.waiters {
			wake(errWokenByStop)
			delete(s.rare.waiters, id)
		}
	}
	return s.stop
}

// errWokenByStop is the cause with which a stop ends the waits of its
// sequence: the wait then returns the sequence's stop (wait.go). It is no
// StopError and never reaches a caller.
var errWokenByStop = errors.New("readrecovery: woken by the sequence's stop")

// addWaiter registers a wait that a stop ends; false when the sequence has
// stopped already.
func (s *sequence) addWaiter(wake context.CancelCauseFunc) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		return 0, false
	}
	r := s.rareLocked()
	if r.waiters == nil {
		r.waiters = make(map[uint64]context.CancelCauseFunc)
	}
	r.nextWaiter++
	r.waiters[r.nextWaiter] = wake
	return r.nextWaiter, true
}

func (s *sequence) removeWaiter(id uint64) {
	s.mu.Lock()
	if s.rare != nil {
		delete(s.rare.waiters, id)
	}
	s.mu.Unlock()
}

// stopped returns the sequence's stop, nil while it runs.
func (s *sequence) stopped() *StopError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop
}

// expiredAt reports whether the sequence's total has run out at now.
func (s *sequence) expiredAt(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expiredLocked(at(now))
}

// takeStopEvent reports, once, that the sequence's stop has not yet been
// recorded on a span, with the requests sent.
func (s *sequence) takeStopEvent() (*StopError, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop == nil || s.evented {
		return nil, 0, false
	}
	s.evented = true
	return s.stop, s.sent, true
}

// expire runs when the sequence's total runs out: it marks the sequence
// (the policy then refuses without reading the clock) and cuts off every
// context it made.
func (s *sequence) expire() {
	s.mu.Lock()
	s.expired = true
	first := s.cut
	var more []context.CancelCauseFunc
	if s.rare != nil {
		more, s.rare.cuts = s.rare.cuts, nil
	}
	s.cut = nil
	s.mu.Unlock()
	if first != nil {
		first(totalStop(s.name))
	}
	for _, f := range more {
		f(totalStop(s.name))
	}
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
