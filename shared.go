package readrecovery

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
)

// This file is the Transport's table of shared restrictions
// (docs/policy.md: shared-restriction, paced-release): a scope (by
// default the request's scheme and host) that answered a 429 with a usable
// delay is restricted until that 429's not-before T, for every sequence of
// the Transport. The table only keeps the facts and hands out places in
// the release; what a request does with them is the policy's
// (sequence.go, admitAt).

// MaxSharedScopes is how many restricted scopes a Transport made with
// [WithSharedRestrictions] remembers at once. A scope is forgotten when
// its restriction and its paced release have ended (at the next request
// or 429 the Transport sees after that). When a 429 would restrict a new
// scope while MaxSharedScopes are restricted, the restriction that ends
// soonest is forgotten to make room: its scope's later requests are sent
// as if it had none (each sequence then meets the server's 429 itself).
const MaxSharedScopes = 4096

// The pace of a release (docs/policy.md: paced-release, release-ramp) is
// the spacing of the places handed out from T on: the release hands
// requests over no faster than the rate the scope's server is known to
// let through, and ramps up while it answers 2xx.
//
//   - Nothing known (no request of the scope passed before its first 429:
//     a closed window): the spacing starts at paceStart and halves with
//     every 2xx of a paced request, as fast as the server accepts; below
//     paceMin it is 0, and the release ends as soon as its places are
//     handed out (a server whose window has closed is not made to wait).
//   - A rate known (requests passed before the 429, or a paced 429 after
//     a ramp): the spacing starts at 1/rate and the rate doubles every
//     paceDouble of paced 2xx (a ramp, not a burst).
//   - A paced 429 ends a cycle: the rate the server let through is
//     learnt from it (pace.learn, with the burst that rate gives the
//     cycle before the ramp: burstAt), the spacing becomes 1/rate, and
//     from then on the rate doubles only every paceSettled (it settles).
//     A settled pace spends at most 1/paceSpend of the burst beyond its
//     rate, at twice the rate: from T when the penalty refilled the
//     bucket, and to catch up when it lagged (succeeded, settle).
//
// Always within [paceMin, paceMax], or 0.
const (
	paceStart   = 10 * time.Millisecond
	paceMin     = 100 * time.Microsecond
	paceMax     = time.Second
	paceDouble  = 500 * time.Millisecond // a known rate's ramp: doubled in this much paced time
	paceSettled = time.Hour              // a learnt rate's: doubled in this much
	paceTimes   = 4096                   // the 2xx of a cycle kept for learning (a bounded memory)
	paceSpend   = 4                      // a settled pace spends at most 1/paceSpend of the burst beyond its rate
)

// The modes of a pace.
const (
	paceUnknown uint8 = iota // nothing known: slow start
	paceRamp                 // a rate known, not yet met the limit: the ramp
	paceSettle               // a rate learnt from a paced 429: settled
)

// pace is a release's spacing and what it learned in its current cycle
// (from T, the release's latest start, to the next paced 429).
type pace struct {
	interval time.Duration
	mode     uint8
	burst    float64     // what the server lets through at once, as far as known (0: unknown)
	since    time.Time   // the cycle began then: T
	ok       int         // 2xx of paced requests since then
	times    []time.Time // their arrivals (the first paceTimes)
	cutK     uint64      // a 429 of a ticket before it was in flight at the last slow-down
	// settled: the learnt spacing of a settled pace (paceSettle); owed:
	// the 2xx that spacing accounts for from T to last, the latest send
	// counted, never more than the 2xx there were (a lag beyond is not
	// caught up). A settled pace whose 2xx are fewer than owed and a
	// quarter of the burst goes at twice its rate (succeeded).
	settled time.Duration
	owed    float64
	last    time.Time
	// stragglers: the burst is the room's history, without the requests
	// then in flight that passed later (restrictions.record adds them).
	stragglers bool
	// passed and span: the cycle before the ramp, passed 2xx over span
	// up to its 429. Until a rate is learnt, the burst is what of them a
	// bucket of that rate did not refill: passed - rate*span (burstAt).
	passed float64
	span   time.Duration
}

// history is what a scope's room saw before its first 429: ok requests
// passed since first (zero: none).
type history struct {
	ok    int
	first time.Time
}

// newPace is the pace of a release that starts at T = t, after the
// scope's history h up to the 429 received at now: nothing passed, the
// slow start; else the rate it let through, penalty included (the ok
// requests over the time from the first to T), as the start of a ramp,
// and the part of them beyond that rate as the server's burst.
func newPace(now, t time.Time, h history) pace {
	p := pace{interval: paceStart, since: t}
	if h.ok <= 0 || !t.After(h.first) {
		return p
	}
	rate := float64(h.ok) / t.Sub(h.first).Seconds()
	p.mode, p.stragglers = paceRamp, true
	p.interval = intervalOf(rate)
	p.passed, p.span = float64(h.ok), max(now.Sub(h.first), 0)
	p.burst = p.burstAt(rate)
	return p
}

// burstAt is the burst of a bucket that refills at rate and passed what
// the cycle before the ramp passed (the burst is known once a rate is
// learnt: passed 0).
func (p *pace) burstAt(rate float64) float64 {
	if p.passed <= 0 {
		return p.burst
	}
	return max(p.passed-rate*p.span.Seconds(), 1)
}

// intervalOf is the spacing of rate requests per second, within [paceMin,
// paceMax].
func intervalOf(rate float64) time.Duration {
	if rate <= 0 {
		return paceMax
	}
	return min(max(time.Duration(math.Round(float64(time.Second)/rate)), paceMin), paceMax)
}

// succeeded counts the 2xx of a paced request sent at sent, and ramps
// the pace up.
func (p *pace) succeeded(sent time.Time) {
	p.ok++
	if len(p.times) < paceTimes {
		p.times = append(p.times, sent)
	}
	switch p.mode {
	case paceUnknown:
		if p.interval /= 2; p.interval < paceMin {
			p.interval = 0
		}
	case paceRamp:
		p.interval = grown(p.interval, paceDouble)
	case paceSettle:
		p.settled = grown(p.settled, paceSettled)
		if sent.After(p.last) {
			p.owed = min(p.owed+float64(sent.Sub(p.last))/float64(p.settled), float64(p.ok))
			p.last = sent
		}
		p.interval = p.settled
		if float64(p.ok) < p.owed+p.burst/paceSpend {
			// Behind the bucket the server was learnt to be: it refilled
			// while the release lagged (its waiters woke late), or it is
			// full at T. Twice the pace, until a quarter of the burst is
			// spent.
			p.interval = max(p.settled/2, paceMin)
		}
	}
}

// grown is the spacing iv after one more 2xx when the rate doubles in d
// of paced time: each 2xx is one spacing of it.
func grown(iv, d time.Duration) time.Duration {
	if iv == 0 {
		return 0
	}
	return max(time.Duration(float64(iv)*math.Exp2(-float64(iv)/float64(d))), paceMin)
}

// settle makes the pace settled at spacing iv from until (the new T).
// full: the bucket the server was learnt to be is full again at T (it
// refilled the burst over the penalty), so the release starts at twice the
// rate, until a quarter of the burst is spent (succeeded); else it owes
// that quarter already and goes at the rate.
func (p *pace) settle(iv time.Duration, until time.Time, full bool) {
	p.mode, p.settled, p.owed, p.last = paceSettle, iv, 0, until
	p.interval = iv
	switch {
	case !full:
		p.owed = -p.burst / paceSpend
	case p.burst >= paceSpend:
		p.interval = max(iv/2, paceMin)
	}
}

// throttled ends the cycle at a 429 received at now of a paced request,
// the release restarting at until (the new T). (The table asks only for
// a ticket issued after the last slow-down: one due before it was in
// flight then and says nothing new.)
func (p *pace) throttled(now, until time.Time) {
	switch {
	case p.ok == 0 && p.mode == paceSettle:
		// Nothing passed since T: still closed; slower.
		p.settle(min(max(2*p.settled, paceStart), paceMax), until, false)
	case p.ok == 0:
		// Nothing passed since T: the server is still closed; slower.
		p.interval = min(max(2*p.interval, paceStart), paceMax)
	case p.mode == paceUnknown:
		// The first cycle that let some through: its rate (penalty
		// included) starts a ramp, and what passed beyond it is the
		// burst.
		*p = newPace(now, until, history{ok: p.ok, first: p.since})
		p.stragglers = false // every one of them was paced
		return
	default:
		rate := p.learn(now, until)
		p.burst, p.passed, p.span = p.burstAt(rate), 0, 0
		iv := intervalOf(rate)
		p.settle(iv, until, float64(until.Sub(now))/float64(iv) >= p.burst)
	}
	p.since, p.ok, p.times = until, 0, p.times[:0]
}

// learn returns the rate the server let through in the cycle that a 429
// received at now ends, with its penalty until until: the least refill
// rate of a token bucket, full at T, that passes every 2xx of the cycle at
// its time (as a bucket server does), at least the cycle's own rate with
// its penalty (what passed over the time from T to until) and at most the
// rate the pace sent at. The bucket's burst is the known one, or, at the
// end of a ramp, the one that rate gives the cycle before (burstAt): a
// burst taken from a rate with its penalty is too large by the refill a
// faster bucket gave in that cycle.
func (p *pace) learn(now, until time.Time) float64 {
	floor := float64(p.ok) / until.Sub(p.since).Seconds()
	ceil := float64(time.Second) / float64(max(p.interval, paceMin))
	if p.ok > len(p.times) || p.burst < 1 || ceil <= floor {
		return floor
	}
	lo, hi := floor, ceil
	if !bucketPasses(p.times, p.since, p.burstAt(hi), hi) {
		return hi
	}
	for range 40 {
		mid := (lo + hi) / 2
		if bucketPasses(p.times, p.since, p.burstAt(mid), mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// bucketPasses reports whether a token bucket of burst tokens, full at
// start and refilled at rate per second, has a token for a request at
// every one of times.
func bucketPasses(times []time.Time, start time.Time, burst, rate float64) bool {
	tokens, last := burst, start
	for _, t := range times {
		if t.After(last) {
			tokens = min(burst, tokens+rate*t.Sub(last).Seconds())
			last = t
		}
		if tokens < 1-1e-9 {
			return false
		}
		tokens--
	}
	return true
}

// restrictions is the table of one Transport. The zero value is not
// used: a Transport without the option has a nil table.
type restrictions struct {
	scope func(*http.Request) string
	rooms rooms // the scopes' rooms (scope-room)

	mu       sync.Mutex
	m        map[string]*restriction
	peak     int       // the most entries m held since it was made (a map never shrinks)
	gens     uint64    // the last generation handed out
	earliest time.Time // no entry ends before it (when a sweep is due)
}

// restriction is one scope's: until T no request of a sequence goes, and
// from T on they go one by one, in the order they asked: each waiter
// holds a ticket, and ticket k is due pace.interval after ticket k-1.
// When the pace changes, the tickets not yet due are spaced anew from
// where the release is (base, baseK), so that a waiter's place follows
// what the release has learned since it asked.
type restriction struct {
	gen    uint64    // a new one each time the scope is restricted after a release ended
	until  time.Time // T, the latest not-before a 429 of the scope gave
	issued uint64    // tickets handed out: the next one is issued
	base   time.Time // ticket baseK is due at base (never before until)
	baseK  uint64
	pace   pace      // the release's spacing
	plan   *waitPlan // the 429 that set until: what the waits record (never changed, replaced)
	goneAt time.Time // the last ticket went then: the next goes a spacing after it
	done   uint64    // tickets that went or were given back
}

// due is when ticket k may go: never before T.
func (r *restriction) due(k uint64) time.Time {
	at := r.base
	if k >= r.baseK {
		at = at.Add(time.Duration(k-r.baseK) * r.pace.interval)
	}
	if at.Before(r.until) {
		return r.until
	}
	return at
}

// end is when the restriction is over: T passed and every ticket handed
// out is due, and has had its spacing after the one that went last.
func (r *restriction) end() time.Time {
	e := r.due(r.issued)
	if held := r.issued - min(r.done, r.issued); held > 0 && r.pace.interval > 0 {
		// Tickets that have not gone yet are still held: each goes at
		// least half a spacing after the one before, and its waiter
		// comes within paceRecheck of its place.
		if g := r.goneAt.Add(time.Duration(held)*r.pace.interval/2 + paceRecheck); g.After(e) {
			e = g
		}
	}
	return e
}

// rebase makes the first ticket not yet due at now the base, due when it
// was, or at from when that is later (a new T): the pace may change after.
func (r *restriction) rebase(now, from time.Time) {
	k := r.baseK
	if now.After(r.base) && r.pace.interval > 0 {
		k += uint64((now.Sub(r.base) + r.pace.interval - 1) / r.pace.interval)
	}
	k = min(k, r.issued)
	at := r.due(k)
	if from.After(at) {
		at = from
	}
	r.base, r.baseK = at, k
}

// place is one request's place in a scope's release: its ticket.
type place struct {
	scope string
	gen   uint64
	k     uint64
	went  bool // its time came (take said so): asked again, it goes
}

// restricted is the fact the policy decides on: the request's scope is
// restricted until t (T), and the request may be sent at until (its
// place, never before T) at the earliest, as far as the release knows
// now; gen tells one restriction of the scope from the next; plan is the
// 429 that set T (its request ID, the scope's host).
type restricted struct {
	t, until time.Time
	gen      uint64
	plan     *waitPlan
}

func newRestrictions(scope func(*http.Request) string) *restrictions {
	if scope == nil {
		scope = schemeHost
	}
	return &restrictions{scope: scope, m: make(map[string]*restriction), rooms: rooms{m: make(map[string]*room)}}
}

// schemeHost is the default scope: the request's scheme and host (with
// its port, when the URL has one).
func schemeHost(req *http.Request) string {
	return req.URL.Scheme + "://" + req.URL.Host
}

// scopeOf returns the request's scope; a scope function that panics is
// the caller's bug and is not recovered.
func (t *restrictions) scopeOf(req *http.Request) string {
	return t.scope(req)
}

// record keeps a 429's restriction of scope until until, received at now,
// and returns the restriction's generation. Within a restriction or its
// release, a later until wins (the tickets not yet due start again from
// it, in order), and a 429 of a request sent from a place (paced) slows
// the release down: the pace was too fast. (The 429s of requests already
// in flight when the restriction began say nothing of the pace.) After a
// release ended, the 429 starts a new one.
func (t *restrictions) record(scope string, now, until time.Time, plan *waitPlan, paced *place) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	if r := t.m[scope]; r != nil {
		if until.After(r.until) {
			r.rebase(now, until)
			r.until, r.plan = until, plan
			if r.pace.ok == 0 {
				r.pace.since = until // nothing went yet: the release starts at the new T
			}
		}
		if paced != nil && paced.gen == r.gen && paced.k >= r.pace.cutK {
			r.rebase(now, r.until)
			if r.pace.stragglers {
				// The requests in flight at the first 429 that passed
				// after it: the burst too.
				n := float64(t.rooms.takeStragglers(scope))
				r.pace.burst += n
				r.pace.passed += n
				r.pace.stragglers = false
			}
			r.pace.throttled(now, r.until)
			r.pace.cutK = r.baseK
		}
		t.noteEndLocked(r)
		return r.gen
	}
	// The sweep above forgot every restriction that ended: this scope has
	// none, and a new one starts at the first pace.
	if len(t.m) >= MaxSharedScopes {
		t.evictLocked()
	}
	t.gens++
	r := &restriction{gen: t.gens, until: until, base: until, pace: newPace(now, until, t.rooms.takeHistory(scope)), plan: plan}
	t.m[scope] = r
	t.peak = max(t.peak, len(t.m))
	t.noteEndLocked(r)
	return r.gen
}

// take returns the request's restriction at now: held is the place it
// holds already (nil for none). A held ticket of the scope's current
// restriction stays the request's; otherwise the request gets the next
// ticket. ok is false when the scope is not restricted at now for it
// (its ticket is due, or the release is over).
func (t *restrictions) take(scope string, now time.Time, held *place) (restricted, place, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	r := t.m[scope]
	if r == nil {
		return restricted{}, place{}, false
	}
	if !now.Before(r.end()) {
		delete(t.m, scope)
		return restricted{}, place{}, false
	}
	p := place{scope: scope, gen: r.gen, k: r.issued}
	if held != nil && held.scope == scope && held.gen == r.gen {
		if held.went {
			return restricted{}, *held, false // its time came: it still goes
		}
		p = *held
	} else {
		r.issued++
		t.noteEndLocked(r)
	}
	at := r.due(p.k)
	if r.pace.interval > 0 {
		// One by one in fact, not only on paper: a ticket whose waiter
		// woke late does not go with the next one; they catch up at no
		// more than twice the pace.
		if next := r.goneAt.Add(r.pace.interval / 2); next.After(at) {
			at = next
		}
	}
	if !now.Before(at) {
		if iv := r.pace.interval; iv > 0 && now.Sub(at) > 2*iv && p.k >= r.baseK {
			// The release fell behind its places (its waiters woke late):
			// it goes on from now, a spacing apart, and does not burst to
			// catch up.
			r.base, r.baseK = now, p.k
		}
		p.went = true
		r.goneAt, r.done = now, r.done+1
		return restricted{}, p, false
	}
	return restricted{t: r.until, until: at, gen: r.gen, plan: r.plan}, p, true
}

// giveBack returns a place that will not be used (its sequence stopped,
// or it was refused), when it is the last one handed out, so that refused
// waiters leave no gap in the release.
func (t *restrictions) giveBack(p place) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[p.scope]
	switch {
	case r == nil || r.gen != p.gen || p.went:
	case p.k+1 == r.issued && p.k >= r.baseK:
		r.issued--
	default:
		r.done++ // a gap: no one holds it
	}
}

// succeeded tells the scope's release at now that the request sent at
// sent from the place p got a 2xx: the pace ramps up.
func (t *restrictions) succeeded(now, sent time.Time, p place) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.m[p.scope]; r != nil && r.gen == p.gen {
		r.rebase(now, r.until)
		r.pace.succeeded(sent)
	}
}

// len returns how many scopes the table holds.
func (t *restrictions) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// noteEndLocked keeps earliest at or before every entry's end.
func (t *restrictions) noteEndLocked(r *restriction) {
	if e := r.end(); t.earliest.IsZero() || e.Before(t.earliest) {
		t.earliest = e
	}
}

// sweepLocked forgets every restriction that has ended at now, once the
// earliest end has come (at most one pass over the table per end).
func (t *restrictions) sweepLocked(now time.Time) {
	if t.earliest.IsZero() || now.Before(t.earliest) {
		return
	}
	t.earliest = time.Time{}
	for k, r := range t.m {
		if !now.Before(r.end()) {
			delete(t.m, k)
			continue
		}
		t.noteEndLocked(r)
	}
	if len(t.m) < t.peak/4 {
		// A Go map keeps its buckets when entries are deleted: a table
		// that shrank to a quarter is copied, so that its memory returns.
		m := make(map[string]*restriction, len(t.m))
		for k, r := range t.m {
			m[k] = r
		}
		t.m, t.peak = m, len(m)
	}
}

// evictLocked forgets the restriction that ends soonest.
func (t *restrictions) evictLocked() {
	var victim string
	var end time.Time
	for k, r := range t.m {
		if e := r.end(); victim == "" || e.Before(end) {
			victim, end = k, e
		}
	}
	delete(t.m, victim)
}

// note records the restriction a 429 of req sets on its scope, when its
// delay is usable: a valid Retry-After (seconds or date) with the
// millisecond floor it carries, or else a valid millisecond field alone;
// never a fallback, never a delay the policy refuses (oversized,
// overlong), never 0. It returns the restriction's generation, 0 when the
// 429 sets none.
func (t *restrictions) note(scope string, req *http.Request, receivedAt time.Time, w waitFields, timing *RetryAfterTiming, status int, requestID string, paced *place) uint64 {
	delay, floorMs, refuse, _ := waitOf(w.ra, timing, w.ms, w.msKind)
	switch {
	case refuse != "":
		return 0
	case w.ra.Kind != RetryAfterSeconds && w.ra.Kind != RetryAfterDate:
		if w.ms <= 0 {
			return 0 // only the 1 s fallback
		}
		delay, floorMs = time.Duration(w.ms)*time.Millisecond, w.ms
	}
	if delay <= 0 {
		return 0
	}
	host, port := hostPort(req)
	return t.record(scope, receivedAt, receivedAt.Add(delay), &waitPlan{
		trigger: triggerShared, ra: w.ra, timing: timing, floorMs: floorMs, requestID: requestID,
		status: status, method: methodOf(req), host: host, port: port, url: redact.URL(req.URL),
	}, paced)
}

// paceRecheck is how long a request holding a place sleeps at most
// before it asks again: its place follows the pace the release learns
// meanwhile (earlier when it quickened, later when T moved).
const paceRecheck = 50 * time.Millisecond

// wakeAt returns when a request waiting until until asks the policy
// again: until, or sooner while it holds a place in a release.
func (c *call) wakeAt(until time.Time) time.Time {
	if c.place == nil {
		return until
	}
	if soon := c.t.clk().Now().Add(paceRecheck); soon.Before(until) {
		return soon
	}
	return until
}

// The room of a scope (docs/policy.md: scope-room): under shared
// restrictions, a scope's requests that carry a Budget are handed to the
// base only while the scope has room, so that a process that has not yet
// heard the server's pace sends one request, not a burst, into a window
// it does not know of. The room is an in-flight limit per scope: 1 for a
// scope not heard from, one more for each 2xx (at most doubling per round
// trip, as every request in flight adds at most one), halved on a 429 of
// a request handed over after the last halving (once per round trip),
// never above the cap. A server that says how much quota remains
// (docs/policy.md: quota-headers) bounds it further: no more requests are
// handed over than it said remain, less those in flight; at 0, one at a
// time. The room keeps no time: its decisions are steps on events, tested
// as a step table (shared_room_test.go).

// DefaultScopeInFlight is the cap of a scope's room when neither
// [WithScopeInFlight] nor the base's MaxConnsPerHost sets it.
const DefaultScopeInFlight = 64

// room is one scope's in-flight limit and what it learned.
type room struct {
	inflight int
	limit    int
	handed   uint64 // requests handed over so far: the last one's number
	cutAt    uint64 // a 429 of a request handed at or before it says nothing new
	quota    int    // what the server said remains, less what went since; -1 unknown
	queue    []*roomWaiter
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
	// quota a reset renews.
	quotaUntil time.Time
	quotaPeak  int
	quotaN     uint64 // the requests handed over when the quota was said
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

// renew ends a quota's hold at its reset, at now or after: the quota is
// what it was at its most (the server resets it to its initial state;
// the next answers say it exactly). It returns when the hold ends, zero
// when there is none (any more).
func (r *room) renew(now time.Time) time.Time {
	if !r.quotaUntil.IsZero() && !now.Before(r.quotaUntil) {
		r.quotaUntil, r.quota, r.quotaN = time.Time{}, max(r.quotaPeak, 1), r.handed
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

// enter hands a request over when there is room and no one waits before
// it (w, when it waits already, must be the first); it returns the
// request's hand-off number, 0 when it must wait.
func (r *room) enter(cap int, w *roomWaiter) uint64 {
	if !r.hasRoom(cap) || (len(r.queue) > 0 && r.queue[0] != w) {
		return 0
	}
	if w != nil {
		r.dequeue(w)
	}
	r.inflight++
	r.handed++
	if r.quota > 0 {
		r.quota--
	}
	return r.handed
}

// leave is the response (or error) of the request handed over as number
// n: status 0 for a transport error; remaining is the quota its headers
// said, -1 unknown. What it says is that many less the requests still in
// flight; the answers of requests in flight together may have reached
// the server in any order, so a higher quota than the one known is taken
// only from a request handed over after the known one was said (newer
// news: a renewal), a lower or equal one always. leave reports whether it
// took the quota.
func (r *room) leave(cap int, n uint64, status, remaining int) bool {
	r.inflight--
	switch {
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		if n > r.cutAt {
			r.limit = max(r.limit/2, 1)
			r.cutAt = r.handed
		}
	case status >= 200 && status < 300:
		r.limit = min(r.limit+1, max(cap, -cap))
		if n <= r.cut0 {
			r.late0++
		} else {
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
	r.quota, r.quotaN = q, r.handed
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
}

func (w *roomWaiter) wakeLocked() {
	w.woken = true
	if w.wake != nil {
		w.wake(errRoomFree)
	}
}

// errRoomFree is the cause that ends a wait for room: there is some.
var errRoomFree = errors.New("readrecovery: the scope has room")

// rooms is the Transport's table of rooms, beside its restrictions.
type rooms struct {
	cap int // the rooms' cap; negative: a soft cap, the base's MaxConnsPerHost (hasRoom)
	mu  sync.Mutex
	m   map[string]*room
}

// roomHold is a call's part in its scope's room: waiting (w), or handed
// over (n, its hand-off number).
type roomHold struct {
	w     *roomWaiter
	n     uint64
	since time.Time // it began to wait for room
	renew time.Time // the scope's quota renews then: the wait ends no later (zero: none)
}

// enterRoom tries to hand the call's request over in its scope's room;
// false: it waits (queued, in order).
func (c *call) enterRoom() bool {
	t := c.t.shared
	scope := c.scopeOf()
	rs := &t.rooms
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.m[scope]
	if r == nil {
		if len(rs.m) >= MaxSharedScopes {
			rs.forgetIdleLocked()
		}
		r = newRoom()
		rs.m[scope] = r
	}
	c.room.renew = time.Time{}
	if !r.quotaUntil.IsZero() {
		// A quota at 0 until its reset (quota-headers): the clock is read
		// only while one is held.
		c.room.renew = r.renew(c.t.clk().Now())
	}
	if n := r.enter(rs.cap, c.room.w); n != 0 {
		c.room.w, c.room.n = nil, n
		r.wakeHead(rs.cap) // room for the next one too
		return true
	}
	if c.room.w == nil {
		c.room.w = &roomWaiter{}
		r.queue = append(r.queue, c.room.w)
	}
	c.room.w.woken = false
	return false
}

// forgetIdleLocked forgets the rooms nothing is in or waits for: a scope
// then starts again at 1.
func (rs *rooms) forgetIdleLocked() {
	for k, r := range rs.m {
		if r.inflight == 0 && len(r.queue) == 0 {
			delete(rs.m, k)
		}
	}
}

// leaveRoom tells the scope's room that the call's request came back:
// with resp (nil for a transport error).
// restricted says whether a 429 restricted the scope (a usable delay):
// only such a 429 halves the room, as one that says "retry now" tells
// nothing of the server's pace.
func (c *call) leaveRoom(resp *http.Response, restricted bool) {
	if c.room.n == 0 {
		return
	}
	n := c.room.n
	c.room.n = 0
	status, remaining, reset := 0, -1, time.Duration(-1)
	if resp != nil {
		status, remaining = resp.StatusCode, remainingQuota(resp.Header)
		if remaining == 0 {
			reset = quotaReset(resp.Header)
		}
		if httprule.IsThrottled(status) && !restricted {
			status = 0 // neither growth nor halving
		}
	}
	rs := &c.t.shared.rooms
	rs.mu.Lock()
	if r := rs.m[c.scopeOf()]; r != nil {
		if r.okN == 0 && httprule.IsSuccess(status) && n > r.cut0 {
			r.okFirst = c.t.clk().Now() // once per restriction: the clock is read rarely
		}
		if r.leave(rs.cap, n, status, remaining) && (r.quota > 0 || reset > 0) {
			held := r.quotaUntil
			r.noteReset(c.t.clk().Now(), r.quota, reset)
			if r.quotaUntil.After(held) {
				// A new hold: every waiter asks again, to learn when it
				// ends (it sleeps until then, not until its ceiling).
				for _, w := range r.queue {
					w.wakeLocked()
				}
			}
		}
		r.wakeHead(rs.cap)
	}
	rs.mu.Unlock()
}

// takeHistory returns what the scope's room saw pass since its last
// restriction and starts counting again: a 429 restricts it now.
func (rs *rooms) takeHistory(scope string) history {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.m[scope]
	if r == nil {
		return history{}
	}
	h := history{ok: r.okN, first: r.okFirst}
	r.okN, r.okFirst, r.cut0, r.late0 = 0, time.Time{}, r.handed, 0
	return h
}

// takeStragglers returns how many requests handed over before the scope's
// last restriction passed after it.
func (rs *rooms) takeStragglers(scope string) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.m[scope]
	if r == nil {
		return 0
	}
	n := r.late0
	r.late0 = 0
	return n
}

// leaveQueue takes the call out of its scope's queue (it waits for
// something else now, or stopped), waking the next one.
func (c *call) leaveQueue() {
	if c.room.w == nil {
		return
	}
	rs := &c.t.shared.rooms
	rs.mu.Lock()
	if r := rs.m[c.scopeOf()]; r != nil {
		r.dequeue(c.room.w)
		r.wakeHead(rs.cap)
	}
	rs.mu.Unlock()
	c.room.w = nil
}

// sleepRoom waits until the scope has room for the call, or until until
// (the wait ceiling or the total), or a stop.
func (c *call) sleepRoom(until time.Time) error {
	d := until.Sub(c.t.clk().Now())
	if d <= 0 {
		return nil
	}
	wctx, wake := context.WithCancelCause(c.ctx)
	defer wake(nil)
	unregister, waiting := c.onRoomWake(wake)
	if !waiting {
		return nil
	}
	defer unregister()
	return c.sleepFor(wctx, wake, d, errRoomFree)
}

// onRoomWake makes wake the wake-up of the call's place in its scope's
// room queue (the room calls it with errRoomFree when the place's turn
// comes). waiting is false when the call has no place in the queue or its
// turn came already: then nothing is registered. unregister undoes it.
func (c *call) onRoomWake(wake context.CancelCauseFunc) (unregister func(), waiting bool) {
	rs := &c.t.shared.rooms
	rs.mu.Lock()
	defer rs.mu.Unlock()
	w := c.room.w
	if w == nil || w.woken {
		return nil, false
	}
	w.wake = wake
	return func() {
		rs.mu.Lock()
		w.wake = nil
		rs.mu.Unlock()
	}, true
}

// The quota headers (docs/policy.md: quota-headers), canonical.
const (
	quotaPrefixOpenAI = "X-Ratelimit-Remaining-"    // -Requests, -Tokens (Azure OpenAI)
	quotaPrefixARM    = "X-Ms-Ratelimit-Remaining-" // -Subscription-Reads, ... (Resource Manager)
)

// remainingQuota returns the least quota a response's headers say
// remains, -1 when none says it: a missing, negative or malformed value
// (not a decimal integer) is unknown.
func remainingQuota(h http.Header) int {
	least := -1
	for k, vs := range h {
		if len(k) < len(quotaPrefixOpenAI) || k[0] != 'X' || len(vs) == 0 {
			continue
		}
		if !strings.HasPrefix(k, quotaPrefixOpenAI) && !strings.HasPrefix(k, quotaPrefixARM) {
			continue
		}
		if n, ok := quotaValue(vs[0]); ok && (least < 0 || n < least) {
			least = n
		}
	}
	return least
}

// The reset headers of the quota (Azure OpenAI, OpenAI), canonical: the
// time until the requests' or the tokens' quota is renewed.
var quotaResets = [...]string{"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens"}

// maxQuotaPeak bounds the quota a reset renews.
const maxQuotaPeak = 1 << 20

// maxQuotaReset bounds a reset header's value: a longer one is unknown.
const maxQuotaReset = time.Hour

// quotaReset returns the longest valid reset a response's headers give,
// -1 when none does. A value is a duration as OpenAI writes it ("1s",
// "6m0s", "12ms", "1.5s") or a decimal number of seconds ("1", "0.5"),
// above 0 and at most maxQuotaReset; anything else is unknown.
func quotaReset(h http.Header) time.Duration {
	longest := time.Duration(-1)
	for _, k := range quotaResets {
		vs := h[k]
		if len(vs) == 0 {
			continue
		}
		if d, ok := resetValue(vs[0]); ok && d > longest {
			longest = d
		}
	}
	return longest
}

// resetValue parses one reset value (see quotaReset).
func resetValue(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 32 {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || math.IsNaN(f) || f > maxQuotaReset.Seconds() {
			return 0, false
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 || d > maxQuotaReset {
		return 0, false
	}
	return d, true
}

// quotaValue parses a non-negative decimal integer (at most 9 digits).
func quotaValue(v string) (int, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int(v[i]-'0')
	}
	return n, true
}

// giveRoomBack returns a place in the room the call took but will not
// use now (it waits for a window first, or stopped).
func (c *call) giveRoomBack() {
	if c.room.n == 0 {
		return
	}
	c.room.n = 0
	rs := &c.t.shared.rooms
	rs.mu.Lock()
	if r := rs.m[c.scopeOf()]; r != nil {
		r.inflight--
		r.wakeHead(rs.cap)
	}
	rs.mu.Unlock()
}
