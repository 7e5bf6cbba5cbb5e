package readrecovery

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/otelattr"
	"go.opentelemetry.io/otel/metric"
)

// This file is the table of shared restrictions
// (docs/policy.md: shared-restriction, paced-release): a scope (by
// default the request's scheme and host) that answered a 429 with a usable
// delay is restricted until that 429's not-before T, for every sequence of
// the Transport. The table only keeps the facts and hands out places in
// the release; what a request does with them is the policy's
// (sequence.go, admitAt).

// MaxSharedScopes is how many scopes a table of shared restrictions
// ([WithSharedRestrictions], [Scopes]) remembers at once: the restricted
// ones and those whose room learnt something. A restriction is forgotten
// when it and its paced release have ended (at the next request or 429
// the table sees after that); a scope with neither a restriction nor a
// room goes with it. When a new scope would pass MaxSharedScopes, the
// scopes with no restriction and nothing in their room are forgotten
// first (their rooms start again at 1), then the restriction that ends
// soonest: its scope's later requests are sent as if it had none (each
// sequence then meets the server's 429 itself).
const MaxSharedScopes = 4096

// restrictions is the table of one Transport. The zero value is not
// used: a Transport without the option has a nil table.
type restrictions struct {
	scope     func(*http.Request) string
	byHost    *hostMemo                   // the default scope's memo (scopememo.go); nil for a scope function given
	self      *Scopes                     // the table as its users name it
	logger    atomic.Pointer[slog.Logger] // the first of its Transports' loggers: one line per change of state
	shareOnce sync.Once                   // links a store, once (scopeshare.go)
	sharing   *scopeShare                 // the store's link; nil without a store
	metered   sync.Mutex                  // guards meters
	meters    []metric.MeterProvider      // the providers its instruments are registered with (metrics.go, meterScopes)

	// mu guards m and every scope's restriction and room: one table, one
	// lock (learning a pace runs outside it: learnLater).
	mu   sync.Mutex
	m    map[string]*scopeEntry
	peak int      // the most entries m held since it was made (a map never shrinks)
	gens uint64   // the last generation handed out
	ends endQueue // the restrictions by end (at or before it): the sweep's queue
}

// scopeEntry is one scope's state: its restriction (nil when it has none)
// and its room (nil until a request of the scope went through one; it
// keeps what it learnt after the restriction ends).
type scopeEntry struct {
	r     *restriction
	room  *room
	share fleetShare // the fleet's share of the scope, while fresh (zero: none; scopeshare.go)
	part  float64    // this process's part of its fleet's rate (0: unknown; scopeshare.go)
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
	// least: the release lasts until then at least (a fleet's share
	// paced from now: its first requests come just after; paceShare).
	least time.Time
	// queued: the end it is queued at in the table's ends (zero: not).
	queued time.Time
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
	if r.least.After(e) {
		e = r.least
	}
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

// expect is when ticket k is expected to go: due(k) while the pace holds
// its spacing; on a ramp sooner, as its rate doubles every paceDouble of
// paced 2xx (r(t) = r0·2^(t/d): n tickets in d·log2(1 + n·ln2/(r0·d))).
// The wait ceiling prices a place at it (docs/policy.md: release-ramp): a
// place is refused when it is not expected within the ceiling, and its
// waiter, who asks again every paceRecheck, is refused then when the ramp
// stopped short of it.
func (r *restriction) expect(k uint64) time.Time {
	at := r.due(k)
	iv := r.pace.interval
	if r.pace.mode != paceRamp || iv <= 0 || k <= r.baseK {
		return at
	}
	d := paceDouble.Seconds()
	n := float64(k - r.baseK)
	t := d * math.Log2(1+n*math.Ln2*iv.Seconds()/d)
	e := r.base.Add(time.Duration(t * float64(time.Second)))
	if e.Before(r.until) {
		e = r.until
	}
	if e.After(at) {
		return at
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
	expect   time.Time // when the place is expected to go: until, or sooner on a ramp (restriction.expect)
	gen      uint64
	plan     *waitPlan
}

func newRestrictions(scope func(*http.Request) string) *restrictions {
	var byHost *hostMemo
	if scope == nil {
		scope, byHost = schemeHost, &hostMemo{}
	}
	t := &restrictions{scope: scope, byHost: byHost, m: make(map[string]*scopeEntry)}
	t.self = &Scopes{t: t}
	return t
}

// scopeOf returns the request's scope; a scope function that panics is
// the caller's bug and is not recovered.
func (t *restrictions) scopeOf(req *http.Request) string {
	if t.byHost != nil {
		return t.byHost.scopeOf(req)
	}
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
	var change []slog.Attr // logged once the lock is given back
	var learn *learning    // a rate to learn once the lock is given back
	var learner *restriction
	published := false // until is news for the store (scopeshare.go)
	defer func() {
		if learn != nil {
			t.learnLater(scope, learner, learn)
		}
		if published && !plan.fromStore {
			t.sharing.publish(scope, until, plan.requestID)
		}
		t.logChange(change)
	}()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	e := t.m[scope]
	if r := e.restriction(); r != nil {
		learner = r
		if until.After(r.until) {
			r.rebase(now, until)
			r.until, r.plan = until, plan
			published = true
			if r.pace.ok == 0 {
				r.pace.since = until // nothing went yet: the release starts at the new T
			}
		}
		if paced != nil && paced.gen == r.gen && paced.k >= r.pace.cutK {
			r.rebase(now, r.until)
			if r.pace.stragglers {
				// The requests in flight at the first 429 that passed
				// after it: the burst too.
				n := float64(e.room.takeStragglers())
				r.pace.burst += n
				r.pace.passed += n
				r.pace.stragglers = false
			}
			if l := r.pace.endCycle(now, r.until); l != nil {
				// The bisection runs once the lock is given back
				// (learnLater): no other scope waits for it.
				learn = l
			}
			r.pace.cutK = r.baseK
		}
		t.noteEndLocked(scope, r)
		return r.gen
	}
	// The sweep above forgot every restriction that ended: this scope has
	// none, and a new one starts at the first pace.
	if e == nil {
		e = t.addLocked(scope)
	}
	r := t.restrictLocked(e, now, until, plan)
	published = true
	t.noteEndLocked(scope, r)
	change = []slog.Attr{slog.String(otelattr.LogEvent, "restricted"), slog.String(otelattr.LogScope, scope),
		slog.Time(otelattr.LogNotBefore, until.UTC()), slog.String(otelattr.LogRequestID, plan.requestID)}
	return r.gen
}

// restrictLocked gives e a new restriction until until, at now: its pace
// starts from the room's history, or at the fleet's share of a rate
// learnt lately (a fleet's slow start as one of it: pace.fleetStart).
func (t *restrictions) restrictLocked(e *scopeEntry, now, until time.Time, plan *waitPlan) *restriction {
	t.gens++
	r := &restriction{gen: t.gens, until: until, base: until, pace: newPace(now, until, e.room.takeHistory()), plan: plan}
	if e.share.at(now) {
		// The fleet gave this process a share of a rate learnt lately:
		// the release goes at it, not at what this process alone saw.
		r.pace = e.share.pace(until, r.pace)
	}
	r.pace.fleetStart(e.part)
	e.r = r
	return r
}

// learnLater learns l's rate outside the table's lock, then settles r's
// pace at it when r is still the scope's restriction and its pace still in
// the cycle l ended (a later 429 that ended that cycle first wins).
func (t *restrictions) learnLater(scope string, r *restriction, l *learning) {
	rate := l.rate()
	t.mu.Lock()
	applied := t.m[scope].restriction() == r && r.pace.cycle == l.cycle
	if applied {
		r.pace.learnt(l, rate)
	}
	t.mu.Unlock()
	if applied {
		burst := l.p.burstAt(rate)
		t.sharing.publishRate(scope, l.now, rate, burst)
		t.logChange([]slog.Attr{slog.String(otelattr.LogEvent, "pace-learnt"), slog.String(otelattr.LogScope, scope),
			slog.Float64(otelattr.LogRate, rate), slog.Float64(otelattr.LogBurst, burst)})
	}
}

// paceShare paces scope at rate (burst: its part of the server's burst)
// from now on, the fleet's share of it (scopeshare.go), while the card it
// came from is fresh (until fresh): the scope's release settles at rate
// from until (its not-before, or now), held for paceHold, then probed as
// a learnt rate is; a restriction the scope gets while the share is fresh
// starts at it too (record). A scope with no restriction gets one at
// until, whose release ends as soon as its requests come slower than
// rate (warm start: no 429 of its own needed). plan is the card's 429,
// the waits' evidence.
func (t *restrictions) paceShare(scope string, now, until, fresh time.Time, rate, burst float64, plan *waitPlan) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	e := t.m[scope]
	if e == nil {
		e = t.addLocked(scope)
	}
	e.share = fleetShare{rate: rate, burst: burst, fresh: fresh, plan: plan}
	t.paceShareLocked(scope, e, now, until)
}

// notePart keeps this process's part of its fleet's rate for scope (the
// store's members say it: scopeshare.go); a slow start of the scope goes
// at it (pace.fleetStart).
func (t *restrictions) notePart(scope string, part float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[scope]; e != nil {
		e.part = part
	}
}

// paceShareLocked paces scope's release (a new one at until when it has
// none) at its entry e's share from now (until when later), and returns it.
func (t *restrictions) paceShareLocked(scope string, e *scopeEntry, now, until time.Time) *restriction {
	if t.m[scope] != e {
		t.m[scope] = e // ended and forgotten a moment ago (endLocked)
	}
	r := e.r
	if r == nil {
		t.gens++
		r = &restriction{gen: t.gens, until: until, base: until, plan: e.share.plan}
		e.r = r
	} else {
		r.rebase(now, r.until)
	}
	from := r.until
	if until.After(from) {
		from = until
	}
	r.pace = e.share.pace(from, r.pace)
	r.least = from.Add(max(r.pace.interval, paceRecheck))
	t.noteEndLocked(scope, r)
	return r
}

// fleetShare is the rate (and burst) the fleet gives this process for a
// scope, while the card it came from is fresh (scopeshare.go).
type fleetShare struct {
	rate, burst float64
	fresh       time.Time
	plan        *waitPlan // the card's 429: the waits' evidence
}

// at reports whether the share holds at now.
func (s fleetShare) at(now time.Time) bool { return s.rate > 0 && now.Before(s.fresh) }

// pace is a release's pace settled at the share from from (T), in old's
// cycle count. The fastest a ramp passed is forgotten: a process paced at
// its share is not squeezed by others it does not know of (the short hold
// is for fleets without a store); when members go, the share grows.
func (s fleetShare) pace(from time.Time, old pace) pace {
	p := pace{since: from, burst: s.burst, cycle: old.cycle}
	p.settle(intervalOf(s.rate), from, false)
	return p
}

// share links the table to s, once (scopeshare.go): the first store
// given wins; now is the process's clock.
func (t *restrictions) share(s ScopeStore, now func() time.Time) {
	t.shareOnce.Do(func() {
		t.sharing = &scopeShare{t: t, store: s, now: now, looks: map[string]*storeLook{}, id: newMemberID()}
	})
}

// logChange writes one record of a change of a scope's state (a new
// restriction, a learnt pace, a halved room: docs/policy.md: scope-state)
// with the table's logger, when it has one and there is a change.
func (t *restrictions) logChange(attrs []slog.Attr) {
	if l := t.logger.Load(); l != nil && len(attrs) > 0 {
		l.LogAttrs(context.Background(), slog.LevelInfo, "readrecovery: scope", attrs...)
	}
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
	e := t.m[scope]
	r := e.restriction()
	if r != nil && !now.Before(r.end()) {
		t.endLocked(scope, e)
		r = nil
	}
	if r == nil {
		if e == nil || !e.share.at(now) {
			return restricted{}, place{}, false
		}
		// The fleet's share of a rate learnt lately paces the scope while
		// it is fresh, restricted or not: a release at the share from now
		// (it ends again as soon as the requests come slower than it).
		r = t.paceShareLocked(scope, e, now, now)
	}
	p := place{scope: scope, gen: r.gen, k: r.issued}
	if held != nil && held.scope == scope && held.gen == r.gen {
		if held.went {
			return restricted{}, *held, false // its time came: it still goes
		}
		p = *held
	} else {
		r.issued++
		t.noteEndLocked(scope, r)
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
	exp := r.expect(p.k)
	if exp.After(at) {
		exp = at
	}
	return restricted{t: r.until, until: at, expect: exp, gen: r.gen, plan: r.plan}, p, true
}

// giveBack returns a place that will not be used (its sequence stopped,
// or it was refused), when it is the last one handed out, so that refused
// waiters leave no gap in the release.
func (t *restrictions) giveBack(p place) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[p.scope].restriction()
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
	if r := t.m[p.scope].restriction(); r != nil && r.gen == p.gen {
		r.rebase(now, r.until)
		r.pace.succeeded(sent)
	}
}

// len returns how many scopes of the table are restricted.
func (t *restrictions) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, e := range t.m {
		if e.r != nil {
			n++
		}
	}
	return n
}

// restriction returns the entry's restriction; nil for none (or no entry).
func (e *scopeEntry) restriction() *restriction {
	if e == nil {
		return nil
	}
	return e.r
}

// addLocked makes scope's entry. At MaxSharedScopes entries, the scopes
// with neither a restriction nor a request in their room are forgotten
// first (a forgotten room starts again at 1), then, if none was, the
// restriction that ends soonest.
func (t *restrictions) addLocked(scope string) *scopeEntry {
	if len(t.m) >= MaxSharedScopes {
		for k, e := range t.m {
			if e.r == nil && e.room.idle() {
				delete(t.m, k)
			}
		}
		if len(t.m) >= MaxSharedScopes {
			t.evictLocked()
		}
	}
	e := &scopeEntry{}
	t.m[scope] = e
	t.peak = max(t.peak, len(t.m))
	return e
}

// endLocked ends scope's restriction; an entry that keeps no room goes.
func (t *restrictions) endLocked(scope string, e *scopeEntry) {
	e.r = nil
	if e.room == nil {
		delete(t.m, scope)
	}
}

// noteEndLocked keeps r (scope's restriction) in the table's ends at or
// before its end: a restriction is queued again only when its end comes
// sooner than the one it is queued at (an end mostly grows: its release
// hands out more places), so each has about one entry.
func (t *restrictions) noteEndLocked(scope string, r *restriction) {
	if e := r.end(); r.queued.IsZero() || e.Before(r.queued) {
		r.queued = e
		t.ends.push(endAt{at: e, scope: scope, r: r})
	}
}

// sweepLocked forgets every restriction that has ended at now: the ends
// due at now come off the table's queue (O(log n) each; nothing is done
// for the scopes whose end has not come); one that has not ended after all
// (its release handed out more places since) is queued again at its end.
func (t *restrictions) sweepLocked(now time.Time) {
	ended := false
	for len(t.ends) > 0 && !now.Before(t.ends[0].at) {
		q := t.ends.pop()
		e := t.m[q.scope]
		if e == nil || e.r != q.r || !q.r.queued.Equal(q.at) {
			continue // ended, replaced or queued again since
		}
		q.r.queued = time.Time{}
		if !now.Before(q.r.end()) {
			t.endLocked(q.scope, e)
			ended = true
		} else {
			t.noteEndLocked(q.scope, q.r)
		}
	}
	if ended && len(t.m) < t.peak/4 {
		// A Go map keeps its buckets when entries are deleted: a table
		// that shrank to a quarter is copied, so that its memory returns.
		m := make(map[string]*scopeEntry, len(t.m))
		for k, r := range t.m {
			m[k] = r
		}
		t.m, t.peak = m, len(m)
	}
	if c := cap(t.ends); c > 64 && len(t.ends) < c/4 {
		t.ends = slices.Clone(t.ends) // its memory returns too
	}
}

// endAt is a restriction queued at (at or before) its end.
type endAt struct {
	at    time.Time
	scope string
	r     *restriction
}

// endQueue is a min-heap of endAt by at (written out, not
// container/heap: that boxes every entry it pushes or pops).
type endQueue []endAt

// push adds x.
func (q *endQueue) push(x endAt) {
	*q = append(*q, x)
	h := *q
	for i := len(h) - 1; i > 0; {
		up := (i - 1) / 2
		if !h[i].at.Before(h[up].at) {
			break
		}
		h[i], h[up] = h[up], h[i]
		i = up
	}
}

// pop removes and returns the earliest entry; q is not empty.
func (q *endQueue) pop() endAt {
	h := *q
	x, n := h[0], len(h)-1
	h[0], h[n] = h[n], endAt{}
	h = h[:n]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < n && h[l].at.Before(h[least].at) {
			least = l
		}
		if r < n && h[r].at.Before(h[least].at) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return x
}

// evictLocked forgets the restriction that ends soonest (and its entry,
// when its room is idle too): the head of the table's ends, once entries
// no longer current are dropped and one queued before its end is queued
// again at it.
func (t *restrictions) evictLocked() {
	for len(t.ends) > 0 {
		q := t.ends.pop()
		e := t.m[q.scope]
		if e == nil || e.r != q.r || !q.r.queued.Equal(q.at) {
			continue
		}
		q.r.queued = time.Time{}
		if end := q.r.end(); end.After(q.at) {
			t.noteEndLocked(q.scope, q.r) // not the soonest after all, maybe
			continue
		}
		e.r = nil
		if e.room.idle() {
			delete(t.m, q.scope)
		}
		return
	}
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

// enterRoom tries to hand the call's request over in its scope's room;
// false: it waits (queued, in order).
func (c *call) enterRoom(now *instant) bool {
	t := c.t.shared
	scope := c.scopeOf()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[scope]
	if e == nil {
		e = t.addLocked(scope)
	}
	if e.room == nil {
		e.room = newRoom()
	}
	r := e.room
	if n := r.enter(now, c.t.roomCap, c.room.w); n != 0 {
		c.room.w, c.room.n, c.room.renew, c.room.recheck = nil, n, time.Time{}, time.Time{}
		if len(r.queue) > 0 && (r.hasRoom(c.t.roomCap) || !r.queue[0].timed) {
			// The next one asks now: it goes too if there is room, and
			// learns when the room changes by itself if its last look
			// found nothing in flight that could be accepted.
			r.queue[0].wakeLocked()
		}
		return true
	}
	c.room.renew, c.room.recheck = r.quotaUntil, r.recheck()
	if c.room.w == nil {
		c.room.w = &roomWaiter{}
		r.queue = append(r.queue, c.room.w)
	}
	c.room.w.woken, c.room.w.timed = false, !c.room.recheck.IsZero()
	r.wakeHead(c.t.roomCap) // the room may have grown by itself for the one before
	return false
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
	throttled := resp != nil && httprule.IsThrottled(resp.StatusCode)
	if resp != nil {
		status, remaining = resp.StatusCode, remainingQuota(resp.Header)
		if remaining == 0 {
			reset = quotaReset(resp.Header)
		}
		if httprule.IsThrottled(status) && !restricted {
			status = 0 // neither growth nor halving
		}
	}
	now := instant{clk: c.t.clk()} // read only for a 429, quota news or a restriction's first 2xx
	t := c.t.shared
	var change []slog.Attr
	t.mu.Lock()
	if r := t.roomLocked(c.scopeOf()); r != nil {
		limit := r.limit
		if throttled {
			r.throttled++
		}
		if r.leave(&now, c.t.roomCap, n, status, remaining) && (r.quota > 0 || reset > 0) {
			held := r.quotaUntil
			r.noteReset(now.get(), r.quota, reset)
			if r.quotaUntil.After(held) {
				// A new hold: every waiter asks again, to learn when it
				// ends (it sleeps until then, not until its ceiling).
				for _, w := range r.queue {
					w.wakeLocked()
				}
			}
		}
		r.wakeHead(c.t.roomCap)
		if r.limit < limit {
			change = []slog.Attr{slog.String(otelattr.LogEvent, "room-halved"), slog.String(otelattr.LogScope, c.scopeOf()), slog.Int(otelattr.LogRoom, r.limit)}
		}
	}
	t.mu.Unlock()
	t.logChange(change)
}

// roomLocked returns scope's room, nil when it has none.
func (t *restrictions) roomLocked(scope string) *room {
	if e := t.m[scope]; e != nil {
		return e.room
	}
	return nil
}

// leaveQueue takes the call out of its scope's queue (it waits for
// something else now, or stopped), waking the next one.
func (c *call) leaveQueue() {
	if c.room.w == nil {
		return
	}
	t := c.t.shared
	t.mu.Lock()
	if r := t.roomLocked(c.scopeOf()); r != nil {
		r.dequeue(c.room.w)
		r.wakeHead(c.t.roomCap)
	}
	t.mu.Unlock()
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
	t := c.t.shared
	t.mu.Lock()
	defer t.mu.Unlock()
	w := c.room.w
	if w == nil || w.woken {
		return nil, false
	}
	w.wake = wake
	return func() {
		t.mu.Lock()
		w.wake = nil
		t.mu.Unlock()
	}, true
}

// handOver hands req to the base. Whatever the base does, the call's
// permits come back (docs/policy.md: scope-room): a panic of the base
// gives back its place in the room and in the release before it goes on
// up to the caller.
func (c *call) handOver(req *http.Request) (resp *http.Response, err error) {
	returned := false
	defer func() {
		if !returned {
			c.leaveRoom(nil, false)
			c.givePlaceBack()
		}
	}()
	resp, err = c.t.sendBase(req)
	returned = true
	return resp, err
}

// giveRoomBack returns a place in the room the call took but will not
// use now (it waits for a window first, or stopped).
func (c *call) giveRoomBack() {
	if c.room.n == 0 {
		return
	}
	n := c.room.n
	c.room.n = 0
	t := c.t.shared
	t.mu.Lock()
	if r := t.roomLocked(c.scopeOf()); r != nil {
		r.forget(time.Time{}, n, 0) // not answered: nothing learnt
		r.wakeHead(c.t.roomCap)
	}
	t.mu.Unlock()
}
