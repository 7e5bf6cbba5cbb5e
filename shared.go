package readrecovery

import (
	"net/http"
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

// The pace of a release: the spacing of the places handed out from T on.
// It starts at paceStart, halves its rate (doubles) on every 429 the scope
// answers while restricted or releasing, and shrinks by 1/paceShrink on
// every 2xx a paced request gets, within [paceMin, paceMax].
const (
	paceStart  = 10 * time.Millisecond
	paceMin    = time.Millisecond
	paceMax    = time.Second
	paceShrink = 64
)

// restrictions is the table of one Transport. The zero value is not
// used: a Transport without the option has a nil table.
type restrictions struct {
	scope func(*http.Request) string

	mu       sync.Mutex
	m        map[string]*restriction
	peak     int       // the most entries m held since it was made (a map never shrinks)
	gens     uint64    // the last generation handed out
	earliest time.Time // no entry ends before it (when a sweep is due)
}

// restriction is one scope's: until T no request of a sequence goes, and
// from T on they go one by one, interval apart, in the order they asked.
type restriction struct {
	gen      uint64        // a new one each time the scope is restricted after a release ended
	until    time.Time     // T, the latest not-before a 429 of the scope gave
	next     time.Time     // the next free place of the release (never before until)
	interval time.Duration // the release's spacing
	plan     waitPlan      // the 429 that set until: what the waits record
}

// end is when the restriction is over: T passed and no place handed out
// lies ahead.
func (r *restriction) end() time.Time {
	if r.next.After(r.until) {
		return r.next
	}
	return r.until
}

// place is one request's place in a scope's release.
type place struct {
	scope string
	gen   uint64
	at    time.Time
}

// restricted is the fact the policy decides on: the request's scope is
// restricted, and the request may be sent at until (its place, never
// before T) at the earliest; gen tells one restriction of the scope from
// the next; plan is the 429 that set T (its request ID, the scope's host).
type restricted struct {
	until time.Time
	gen   uint64
	plan  waitPlan
}

func newRestrictions(scope func(*http.Request) string) *restrictions {
	if scope == nil {
		scope = schemeHost
	}
	return &restrictions{scope: scope, m: make(map[string]*restriction)}
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
// release, a later until wins and the release slows down; after it ended,
// the 429 starts a new one.
func (t *restrictions) record(scope string, now, until time.Time, plan waitPlan) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	if r := t.m[scope]; r != nil {
		if until.After(r.until) {
			r.until, r.plan = until, plan
		}
		if r.next.Before(r.until) {
			r.next = r.until
		}
		r.interval = min(max(2*r.interval, paceMin), paceMax)
		t.noteEndLocked(r)
		return r.gen
	}
	// The sweep above forgot every restriction that ended: this scope has
	// none, and a new one starts at the first pace.
	if len(t.m) >= MaxSharedScopes {
		t.evictLocked()
	}
	t.gens++
	r := &restriction{gen: t.gens, until: until, next: until, interval: paceStart, plan: plan}
	t.m[scope] = r
	t.peak = max(t.peak, len(t.m))
	t.noteEndLocked(r)
	return r.gen
}

// take returns the request's restriction at now: held is the place it
// holds already (nil for none). A held place of the scope's current
// restriction that T has not passed stays the request's; otherwise the
// request gets the next free place. ok is false when the scope is not
// restricted at now (held's time has come, or the release is over).
func (t *restrictions) take(scope string, now time.Time, held *place) (restricted, place, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	r := t.m[scope]
	if r == nil || !now.Before(r.end()) {
		return restricted{}, place{}, false
	}
	if held != nil && held.scope == scope && held.gen == r.gen && !held.at.Before(r.until) {
		if !now.Before(held.at) {
			return restricted{}, place{}, false
		}
		return restricted{until: held.at, gen: r.gen, plan: r.plan}, *held, true
	}
	at := r.next
	if at.Before(r.until) {
		at = r.until
	}
	r.next = at.Add(r.interval)
	t.noteEndLocked(r)
	return restricted{until: at, gen: r.gen, plan: r.plan}, place{scope: scope, gen: r.gen, at: at}, true
}

// giveBack returns a place that will not be used (its sequence stopped,
// or it was refused), when it is the last one handed out, so that refused
// waiters leave no gap in the release.
func (t *restrictions) giveBack(p place) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[p.scope]
	if r != nil && r.gen == p.gen && r.next.Equal(p.at.Add(r.interval)) {
		r.next = p.at
	}
}

// succeeded tells the scope's release that a paced request got a 2xx:
// the pace quickens a little.
func (t *restrictions) succeeded(scope string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.m[scope]; r != nil {
		r.interval = max(r.interval-r.interval/paceShrink, paceMin)
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
func (t *restrictions) note(scope string, req *http.Request, receivedAt time.Time, w waitFields, timing *RetryAfterTiming, status int, requestID string) uint64 {
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
	return t.record(scope, receivedAt, receivedAt.Add(delay), waitPlan{
		trigger: triggerShared, ra: w.ra, timing: timing, floorMs: floorMs, requestID: requestID,
		status: status, method: methodOf(req), host: host, port: port, url: redact.URL(req.URL),
	})
}

// passShared sends a request that carries nothing of the policy's: it is
// never held, but its 429 restricts its scope for the others.
func (t *Transport) passShared(req *http.Request) (*http.Response, error) {
	resp, err := t.baseRT().RoundTrip(req)
	if err == nil && resp != nil && httprule.IsThrottled(resp.StatusCode) {
		receivedAt := t.clk().Now()
		var tm RetryAfterTiming
		w := parseWaitFieldsAt(resp.Header, receivedAt, &tm)
		var timing *RetryAfterTiming
		if w.hasTiming {
			timing = &tm
		}
		t.shared.note(t.shared.scopeOf(req), req, receivedAt, w, timing, resp.StatusCode, redact.RequestID(resp.Header))
	}
	return resp, err
}
