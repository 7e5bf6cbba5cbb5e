package readrecovery

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// The room of a scope (docs/policy.md: scope-room, room-acceptance):
// under shared restrictions, a scope's requests that carry a Budget (or
// its caller's retry mark) are handed to the base only while the scope
// has room, so that a process that has not yet heard the server's pace
// sends one request, not a burst, into a window it does not know of. The
// room is an in-flight limit per scope: 1 for a scope not heard from, one
// more for each 2xx (at most doubling per round trip, as every request in
// flight adds at most one), halved on a restricting 429 of a request
// handed over after the last halving (once per round trip), never above
// the cap. A request the server keeps longer than a 429 takes to come
// back was accepted (room-acceptance): it no longer counts in flight and
// the limit doubles, so a server that answers slowly and never throttles
// sees the concurrency it would see without the room. A server that says
// how much quota remains (docs/policy.md: quota-headers) bounds it
// further, for as long as that news is fresh: no more requests are handed
// over than it said remain, less those in flight; at 0, one at a time.
// The room's decisions are steps on events at a given now, tested as a
// step table (shared_room_test.go); it reads no clock.

// DefaultScopeInFlight is the cap of a scope's room when neither
// [WithScopeInFlight] nor the base's MaxConnsPerHost sets it.
const DefaultScopeInFlight = 64

// The acceptance time (docs/policy.md: room-acceptance): a request still
// unanswered this long after its hand-off was accepted by the server. It
// is twice the time the scope's latest 429 took to come back, within
// [acceptMin, acceptMax], and acceptMin while the scope has sent none: a
// throttling gateway answers at once, so only the 429s tell how long a
// refusal takes (the other answers tell how long the work takes).
const (
	acceptMin = 50 * time.Millisecond
	acceptMax = time.Second
)

// room is one scope's in-flight limit and what it learned.
type room struct {
	inflight int // handed over, neither answered nor accepted yet
	limit    int
	handed   uint64 // requests handed over so far: the last one's number
	cutAt    uint64 // a 429 of a request handed at or before it says nothing new
	quota    int    // what the server said remains, less what went since; -1 unknown
	queue    []*roomWaiter
	// open: the hand-offs counted in flight, oldest first (at most as
	// many as are in flight; handoffs.go); refusal: how long the scope's
	// latest 429 took to come back (0: none yet).
	open    handoffs
	refusal time.Duration
	// The 2xx since the scope's last restriction (okFirst: the first's
	// arrival): what a new restriction's pace starts from (newPace); and
	// the 2xx of the requests handed over before it (numbers up to cut0)
	// that came back after it (late0).
	okN     int
	okFirst time.Time
	cut0    uint64
	late0   int
	// quotaUntil: the quota is 0 until then, as the server's reset
	// headers said (quota-headers); zero when none said it. quotaPeak is
	// the most the server ever said remain, plus the one that asked: the
	// quota a reset renews. quotaStale: a known quota binds until then
	// (quotaFresh after the answer that said it), unknown after.
	quotaUntil time.Time
	quotaPeak  int
	quotaN     uint64 // the requests handed over when the quota was said
	quotaStale time.Time
	throttled  uint64 // the 429s answered to requests handed over (ScopeState.Throttled)
}

func newRoom() *room { return &room{limit: 1, quota: -1} }

// hasRoom reports whether one more request may be handed over now. A
// negative cap is a soft one (the base's own connection limit): once the
// limit has grown to it and no quota is known, the room holds nothing back
// and the base's pool queues what is beyond it, as without the room.
func (r *room) hasRoom(cap int) bool {
	if cap < 0 {
		if r.limit >= -cap && r.quota < 0 {
			return true
		}
		cap = -cap
	}
	if r.inflight >= min(r.limit, cap) {
		return false
	}
	return r.quota != 0 || (r.inflight == 0 && r.quotaUntil.IsZero())
}

// acceptAfter is the scope's acceptance time.
func (r *room) acceptAfter() time.Duration {
	return min(max(2*r.refusal, acceptMin), acceptMax)
}

// tick applies what time changes at now: the requests in flight for the
// acceptance time were accepted (each doubles the limit, within the cap;
// not while the server says no quota remains),
// a quota whose news went stale is unknown again, and a quota held at 0
// renews at its reset.
func (r *room) tick(now *instant, cap int) {
	for r.quota != 0 && r.open.len() > 0 {
		if at := r.open.all()[0].at; at.IsZero() || now.get().Sub(at) < r.acceptAfter() {
			break
		}
		r.open.popOldest()
		r.inflight--
		r.limit = min(2*r.limit, max(cap, -cap))
	}
	if r.quota >= 0 && r.quotaUntil.IsZero() && !now.get().Before(r.quotaStale) {
		r.quota = -1
	}
	if !r.quotaUntil.IsZero() {
		r.renew(now.get())
	}
}

// stamp gives the requests in flight whose hand-off time is not known yet
// the time now: they were handed over by then at the latest. A room reads
// the time of a hand-off only once someone waits for it (acceptance
// counts from then, never earlier), so that a request that finds room
// reads no clock.
func (r *room) stamp(now *instant) {
	open := r.open.all()
	for i := len(open) - 1; i >= 0 && open[i].at.IsZero(); i-- {
		open[i].at = now.get()
	}
}

// recheck returns when the room changes by itself after now, zero when it
// changes only with an answer: a waiter asks again then.
func (r *room) recheck() time.Time {
	var at time.Time
	if r.open.len() > 0 && r.quota != 0 {
		at = r.open.all()[0].at.Add(r.acceptAfter())
	}
	for _, t := range [...]time.Time{r.quotaUntil, r.quotaStale} {
		if r.quota >= 0 && !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	return at
}

// renew ends a quota's hold at its reset, at now or after: the quota is
// what it was at its most (the server resets it to its initial state;
// the next answers say it exactly). It returns when the hold ends, zero
// when there is none (any more).
func (r *room) renew(now time.Time) time.Time {
	if !r.quotaUntil.IsZero() && !now.Before(r.quotaUntil) {
		r.quotaUntil, r.quota, r.quotaN = time.Time{}, max(r.quotaPeak, 1), r.handed
		r.quotaStale = now.Add(quotaFresh)
	}
	return r.quotaUntil
}

// noteReset keeps, for the quota the room now knows (remaining), when a
// quota of 0 renews: now + reset (the latest such time wins); a quota
// above 0 ends the hold.
func (r *room) noteReset(now time.Time, remaining int, reset time.Duration) {
	switch {
	case remaining > 0:
		r.quotaUntil = time.Time{}
	case remaining == 0 && reset > 0:
		if until := now.Add(reset); until.After(r.quotaUntil) {
			r.quotaUntil = until
		}
	}
}

// enter hands a request over at now when there is room and no one waits
// before it (w, when it waits already, must be the first); it returns the
// request's hand-off number, 0 when it must wait.
func (r *room) enter(now *instant, cap int, w *roomWaiter) uint64 {
	r.tick(now, cap)
	if !r.hasRoom(cap) || (len(r.queue) > 0 && r.queue[0] != w) {
		r.stamp(now)
		return 0
	}
	if w != nil {
		r.dequeue(w)
	}
	r.inflight++
	r.handed++
	r.open.push(handoff{n: r.handed}) // its time: stamp
	if r.quota > 0 {
		r.quota--
	}
	return r.handed
}

// forget takes the request handed over as number n out of the requests in
// flight, answered at now with status (0: not answered): false when it was
// accepted already (it no longer counted).
func (r *room) forget(now time.Time, n uint64, status int) bool {
	h, ok := r.open.take(n)
	if !ok {
		return false
	}
	r.inflight--
	if status == http.StatusTooManyRequests && !h.at.IsZero() {
		if d := now.Sub(h.at); d > 0 {
			r.refusal = d
		}
	}
	return true
}

// leave is the response (or error) at now of the request handed over as
// number n: status 0 for a transport error or a 429 that restricted
// nothing (only a restricting 429 halves the limit); remaining is the
// quota its headers said, -1 unknown. What it says is that many less the
// requests still in flight; the answers of requests in flight together
// may have reached the server in any order, so a higher quota than the
// one known is taken only from a request handed over after the known one
// was said (newer news: a renewal), a lower or equal one always. leave
// reports whether it took the quota.
func (r *room) leave(now *instant, cap int, n uint64, status, remaining int) bool {
	var at time.Time // the answer's time: read for a 429, quota news or a restriction's first 2xx only
	if status == http.StatusTooManyRequests {
		at = now.get()
	}
	counted := r.forget(at, n, status)
	switch {
	case status == http.StatusTooManyRequests:
		if n > r.cutAt {
			r.limit = max(r.limit/2, 1)
			r.cutAt = r.handed
		}
	case status >= 200 && status < 300:
		if counted {
			r.limit = min(r.limit+1, max(cap, -cap)) // an accepted one grew it already
		}
		switch {
		case n <= r.cut0:
			r.late0++ // handed over before the restriction: its burst
		case r.okN == 0:
			r.okN, r.okFirst = 1, now.get() // the next restriction's history starts
		default:
			r.okN++
		}
	}
	if remaining < 0 {
		return false
	}
	r.quotaPeak = max(r.quotaPeak, min(remaining, maxQuotaPeak-1)+1)
	q := max(remaining-r.inflight, 0)
	if r.quota >= 0 && n <= r.quotaN && q > r.quota {
		return false
	}
	r.quota, r.quotaN, r.quotaStale = q, r.handed, now.get().Add(quotaFresh)
	return true
}

// dequeue removes w from the queue.
func (r *room) dequeue(w *roomWaiter) {
	for i, q := range r.queue {
		if q == w {
			r.queue = append(r.queue[:i], r.queue[i+1:]...)
			return
		}
	}
}

// wakeHead wakes the first waiter when there is room for it.
func (r *room) wakeHead(cap int) {
	if len(r.queue) > 0 && r.hasRoom(cap) {
		r.queue[0].wakeLocked()
	}
}

// roomWaiter is a request waiting for its scope's room.
type roomWaiter struct {
	woken bool
	wake  context.CancelCauseFunc // set while it sleeps
	// timed: it sleeps until the room changes by itself (a hand-off's
	// acceptance, a quota's renewal or staleness), not only until an
	// answer or its ceiling.
	timed bool
}

func (w *roomWaiter) wakeLocked() {
	w.woken = true
	if w.wake != nil {
		w.wake(errRoomFree)
	}
}

// errRoomFree is the cause that ends a wait for room: there is some.
var errRoomFree = errors.New("readrecovery: the scope has room")

// idle reports whether nothing is in the room or waits for it (a nil room
// is idle).
func (r *room) idle() bool {
	return r == nil || (r.inflight == 0 && r.open.len() == 0 && len(r.queue) == 0)
}

// roomHold is a call's part in its scope's room: waiting (w), or handed
// over (n, its hand-off number).
type roomHold struct {
	w       *roomWaiter
	n       uint64
	since   time.Time // it began to wait for room
	renew   time.Time // the scope's quota renews then (zero: none)
	recheck time.Time // the room changes by itself then (acceptance, a quota's renewal or staleness): the wait ends no later (zero: none)
}

// enterRoom tries to hand the call's request over in its scope's room;

// takeHistory returns what the room saw pass since the scope's last
// restriction and starts counting again: a 429 restricts it now. A nil
// room saw nothing.
func (r *room) takeHistory() history {
	if r == nil {
		return history{}
	}
	h := history{ok: r.okN, first: r.okFirst}
	r.okN, r.okFirst, r.cut0, r.late0 = 0, time.Time{}, r.handed, 0
	return h
}

// takeStragglers returns how many requests handed over before the scope's
// last restriction passed after it.
func (r *room) takeStragglers() int {
	if r == nil {
		return 0
	}
	n := r.late0
	r.late0 = 0
	return n
}
