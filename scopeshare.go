package readrecovery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/readrecovery/readrecovery/otelattr"
)

// This file is a table's exchange with its ScopeStore (docs/policy.md:
// scope-store): what a process learns of a scope's not-before goes to
// the store, and what the store holds comes back, so that the processes
// of a fleet send nothing before a not-before any of them received.
//
//   - A 429 that restricts a scope, or moves its not-before out, writes
//     the not-before to the store at once, in the background.
//   - A scope's first request in the process looks at the store's card
//     first, for at most storeFirstLook (the one wait on the store on the
//     request path; warm start), and a later request of the scope looks
//     again, in the background, once storeEvery has passed since the last
//     look: a not-before the card holds beyond the table's becomes the
//     table's restriction.
//   - Times cross through the store's clock (ScopeView.Now): a card's
//     not-before is the store's time, converted with the offset between
//     the store's clock and this process's as the last exchange measured
//     it: at its highest when written (the round trip's start, and the
//     store clock's resolution), at its lowest when read back (the round
//     trip's end), so that a process whose clock is skewed, or a store
//     whose clock reads to the second, sends nothing before it.
//   - A store that fails or hangs never holds a request beyond
//     storeFirstLook: the table goes on with what it knows, and says so
//     once per change (event store-failing, store-healthy).
//
// And the processes of a fleet share a scope's learnt rate (fair shares,
// warm start):
//
//   - Each exchange writes the process's member record: its demand (the
//     scope's asks per second, measured over measureOver at least: an
//     exchange sooner, on a 429, says the last measure again; a request
//     waiting for its place asks again) and its share, live for
//     memberLease.
//   - A rate the process learns from a paced 429 is written to the card
//     as the scope's rate: what it learnt over its part of the fleet's
//     rate when it learnt it (its share is its part of the card's rate).
//   - From a fresh card (learnt cardFresh or less ago), the live members
//     divide the card's rate by max-min fairness over their demands: no
//     member gets more than it asks, the rest is split evenly (Google
//     Doorman's fair share). A process paces the scope at its share
//     from its first look (warm start: a restriction at the card's
//     not-before, or at once, its release settled at the share), and
//     again whenever the card's rate is newer or its part moved by more
//     than shareMoved. A member whose lease ran out (killed, stopped)
//     is no longer counted: its share returns to the others at their
//     next exchange.
//   - A failing store: the last share holds; the pace goes on alone
//     from it, as without a store (held, then probed by the ramp),
//     never from the card's full rate.

// The store's timings.
const (
	storeFirstLook = 200 * time.Millisecond // a scope's first look, on its first request's path
	storeEvery     = time.Second            // a scope's card is looked at again after this
	storeDeadline  = 2 * time.Second        // every background exchange's own bound
	memberLease    = 3 * storeEvery         // a member record is live this long after its exchange
	measureOver    = storeEvery / 2         // a member record's demand is measured over this much at least
	cardFresh      = time.Minute            // a card's learnt rate is shared this long after it was learnt
	shareMoved     = 0.15                   // a part of the fleet's rate that moved more than this is paced anew
	maxDemand      = 1e6                    // a member's demand, at most (requests per second): all it can get
	offsetKept     = time.Minute            // the store clock's offset bounds are kept together this long
)

// scopeShare is a table's link to its store.
type scopeShare struct {
	t     *restrictions // the table it shares
	store ScopeStore
	now   func() time.Time // this process's clock (the first Transport's)
	mu    sync.Mutex
	// offset is the store's clock less this process's, as the last
	// exchange measured it, at its highest (what a time written to the
	// store is converted with: never early there); below, at its lowest
	// (what a time read from it is converted back with: never early
	// here). known once an exchange measured them.
	offset  time.Duration
	below   time.Duration
	since   time.Time // the bounds are kept from then (offsetKept)
	known   bool
	failing bool
	looks   map[string]*storeLook // per scope: its last look
	sweepAt int                   // looks holds this many when it forgets idle scopes next (addLookLocked)
	id      string                // this table's member ID: random, 16 hex digits
}

// lookIdle is how long a scope's look is kept without a request once the
// table holds MaxSharedScopes of them: then its card is a stale one
// (cardFresh), and a request of the scope looks first again.
const lookIdle = cardFresh

// addLookLocked keeps scope's new look l. At MaxSharedScopes looks or
// more, it first forgets those idle for lookIdle, no exchange under way,
// and next does so at twice the looks kept: a look costs O(1) amortized
// and the map stays within twice the active scopes (or MaxSharedScopes).
func (sh *scopeShare) addLookLocked(scope string, l *storeLook, now time.Time) {
	if len(sh.looks) >= max(sh.sweepAt, MaxSharedScopes) {
		for k, o := range sh.looks {
			if o.done == nil && now.Sub(o.at) >= lookIdle && now.Sub(o.seen) >= lookIdle {
				delete(sh.looks, k)
			}
		}
		sh.sweepAt = 2 * len(sh.looks)
	}
	sh.looks[scope] = l
}

// storeLook is one scope's looking at the store: at is when the last one
// began; done is closed when the one under way ends (nil: none).
type storeLook struct {
	at   time.Time
	done chan struct{}
	// asks: the scope's asks (looks) since since; demand: the member
	// record's, asks per second measured over measureOver at least
	// (maxDemand until the first measure: it asks for all it can get).
	asks   int
	since  time.Time
	demand float64
	// first: the scope's first look, closed when it ended (nil after);
	// began: when it began.
	first chan struct{}
	began time.Time
	// part: this process's part of the card's rate at the last view (0:
	// none known); share, the rate it was given then; learnt, the card's
	// Learnt it was given from (store time); seen, when the last
	// exchange answered (this process's clock).
	part, share float64
	learnt      time.Time
	seen        time.Time
	// nb: the latest not-before of the scope's card (store time) this
	// process wrote or applied: a card holding it again is no news (read
	// back at another offset bound it would move the restriction out).
	nb time.Time
}

// isZero reports whether the card knows nothing (an exchange of it reads).
func (c ScopeCard) isZero() bool { return c.NotBefore.IsZero() && c.Learnt.IsZero() }

// shifted returns the card with its times moved by d (this process's
// clock to the store's), in UTC.
func (c ScopeCard) shifted(d time.Duration) ScopeCard {
	if !c.NotBefore.IsZero() {
		c.NotBefore = c.NotBefore.Add(d).UTC()
	}
	if !c.Learnt.IsZero() {
		c.Learnt = c.Learnt.Add(d).UTC()
	}
	return c
}

// newMemberID returns a random member ID (no host name, no secret).
func newMemberID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// look makes sure the table has seen the store's card of scope at now:
// the scope's first look waits for the store (at most storeFirstLook, and
// ctx), a later one after storeEvery runs in the background. It returns at
// once when the table has no store.
func (sh *scopeShare) look(ctx context.Context, scope string, now time.Time) {
	if sh == nil {
		return
	}
	sh.mu.Lock()
	l := sh.looks[scope]
	if l != nil {
		l.asks++
	}
	switch {
	case l == nil:
		l = &storeLook{at: now, done: make(chan struct{}), asks: 1, since: now, began: now, demand: maxDemand}
		l.first = l.done
		sh.addLookLocked(scope, l, now)
		done := l.done
		sh.mu.Unlock()
		go sh.exchange(scope, ScopeCard{}, done)
		wait, cancel := context.WithTimeout(ctx, storeFirstLook)
		defer cancel()
		select {
		case <-done:
		case <-wait.Done():
		}
		return
	case l.first != nil && now.Before(l.began.Add(storeFirstLook)):
		// The scope's first look is under way: this request waits for it
		// too (warm start), until the first one stops waiting.
		first := l.first
		sh.mu.Unlock()
		wait, cancel := context.WithTimeout(ctx, l.began.Add(storeFirstLook).Sub(now))
		defer cancel()
		select {
		case <-first:
		case <-wait.Done():
		}
		return
	case l.done == nil && now.Sub(l.at) >= storeEvery:
		// The next look a jittered storeEvery on (±10 %), so that the
		// processes of a fleet do not look together.
		l.at, l.done = now.Add(time.Duration(mrand.Int64N(int64(storeEvery/5)))-storeEvery/10), make(chan struct{})
		go sh.exchange(scope, ScopeCard{}, l.done)
	}
	sh.mu.Unlock()
}

// publish writes scope's not-before until (this process's clock) and the
// 429's request ID to the store, in the background.
func (sh *scopeShare) publish(scope string, until time.Time, requestID string) {
	if sh == nil {
		return
	}
	go sh.exchange(scope, ScopeCard{NotBefore: until, RequestID: requestID}, nil)
}

// publishRate writes the rate and burst the process learnt for scope at
// now (its clock) to the store's card, in the background, as the scope's
// rate: over its part of the fleet's rate when it learnt them (alone: all
// of it).
func (sh *scopeShare) publishRate(scope string, now time.Time, rate, burst float64) {
	if sh == nil || rate <= 0 {
		return
	}
	sh.mu.Lock()
	part := 1.0
	if l := sh.looks[scope]; l != nil && l.part > 0 {
		part = l.part
	}
	sh.mu.Unlock()
	go sh.exchange(scope, ScopeCard{Rate: rate / part, Burst: burst / part, Learnt: now}, nil)
}

// exchange sends card (its times in this process's clock; a zero card
// reads) and the process's member record to the store, and takes back
// what its card holds: a later not-before than the table's becomes the
// scope's restriction, and a fresh learnt rate the process's share. done,
// when not nil, is the scope's look: it ends with the exchange.
func (sh *scopeShare) exchange(scope string, card ScopeCard, done chan struct{}) {
	if done != nil {
		defer sh.endLook(scope, done)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeDeadline)
	defer cancel()
	sh.mu.Lock()
	offset, known := sh.offset, sh.known
	sh.mu.Unlock()
	if !card.isZero() && !known {
		// The store's clock is not known yet: a read first, so that the
		// times written are the store's.
		sh.exchange(scope, ScopeCard{}, nil)
		sh.mu.Lock()
		offset, known = sh.offset, sh.known
		sh.mu.Unlock()
		if !known {
			return // the store failed: said already
		}
	}
	card = card.shifted(offset)
	if !card.NotBefore.IsZero() {
		// A store keeps times to the millisecond: up, never early.
		card.NotBefore = card.NotBefore.Add(time.Millisecond - 1).Truncate(time.Millisecond)
	}
	sent := sh.now()
	member := sh.member(scope, sent, offset)
	view, err := sh.store.Exchange(ctx, scope, card, member)
	back := sh.now()
	sh.state(err)
	if err != nil {
		return
	}
	below, news := sh.noteView(scope, card, view, sent, back)
	sh.apply(scope, view, back, below, news)
}

// endLook ends scope's look done: the exchange it waited for is over.
func (sh *scopeShare) endLook(scope string, done chan struct{}) {
	sh.mu.Lock()
	if l := sh.looks[scope]; l != nil && l.done == done {
		l.done = nil
		if l.first == done {
			l.first = nil
		}
	}
	sh.mu.Unlock()
	close(done)
}

// noteView takes what the exchange of card, sent at sent and answered at
// back (this process's clock), tells of the store's clock and of scope:
// the offset's lower bound, what a time read from the store is converted
// with, and whether the card's not-before is news to this process.
func (sh *scopeShare) noteView(scope string, card ScopeCard, view ScopeView, sent, back time.Time) (below time.Duration, news bool) {
	// The store's clock read view.Now (to within view.Resolution: Blob
	// Storage's Date is to the second) somewhere within the round trip:
	// the offset lies between what the latest and the earliest moments
	// give. A time written to the store is converted with the highest, a
	// time read from it with the lowest: neither sends early (R109).
	// Each exchange bounds the offset anew; the bounds of the last
	// offsetKept are kept together (a clock that reads to the second is
	// read at another fraction each time: together they narrow to the
	// round trip), and start again when they cross (a clock was set).
	hi, lo := view.Now.Add(max(view.Resolution, 0)).Sub(sent), view.Now.Sub(back)
	sh.mu.Lock()
	if !sh.known || back.Sub(sh.since) > offsetKept || lo > sh.offset || hi < sh.below {
		sh.offset, sh.below, sh.since = hi, lo, back
	} else {
		sh.offset, sh.below = min(sh.offset, hi), max(sh.below, lo)
	}
	sh.known = true
	below = sh.below
	l := sh.looks[scope]
	if l == nil && !card.isZero() {
		// A 429 of a request that never looked (no Budget): the scope's
		// entry keeps what this process wrote, so that reading it back
		// later is no news.
		l = &storeLook{at: back, since: back, demand: maxDemand}
		sh.addLookLocked(scope, l, back)
	}
	if l != nil {
		l.seen = back
		if card.NotBefore.After(l.nb) {
			l.nb = card.NotBefore // what it writes is no news to it
		}
		if news = view.Card.NotBefore.After(l.nb); news {
			l.nb = view.Card.NotBefore
		}
	}
	sh.mu.Unlock()
	return below, news // news: a not-before this process has not applied or written
}

// apply makes the store's view of scope, answered at back, the table's: a
// not-before that is news becomes the scope's restriction, and a fresh
// learnt rate the process's share.
func (sh *scopeShare) apply(scope string, view ScopeView, back time.Time, below time.Duration, news bool) {
	plan := &waitPlan{trigger: triggerShared, requestID: view.Card.RequestID, status: 429, fromStore: true}
	until := back
	if nb := view.Card.NotBefore; !nb.IsZero() && news {
		if local := nb.Add(-below); local.After(back) {
			until = local
			sh.t.record(scope, back, local, plan, nil)
		}
	}
	rate, burst, ok, part := sh.shared(scope, view)
	sh.t.notePart(scope, part)
	if ok {
		fresh := view.Card.Learnt.Add(cardFresh - below)
		sh.t.paceShare(scope, back, until, fresh, rate, burst, plan)
	}
}

// member is the process's member record of scope for an exchange sent at
// sent (this process's clock; offset: the store's clock less it): its
// demand (asks per second, measured over measureOver at least; maxDemand
// before the first measure) and the share it was given, live for
// memberLease. The zero record (none written) when the scope has no look.
func (sh *scopeShare) member(scope string, sent time.Time, offset time.Duration) ScopeMember {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.looks[scope]
	if l == nil {
		return ScopeMember{}
	}
	if d := sent.Sub(l.since); d >= measureOver {
		l.demand = min(float64(l.asks)/d.Seconds(), maxDemand)
		l.asks, l.since = 0, sent
	}
	return ScopeMember{ID: sh.id, Demand: l.demand, Share: l.share, Lease: sent.Add(offset + memberLease).UTC()}
}

// shared returns the rate (and burst) the process paces scope at from
// view, the store's answer to an exchange, and its part
// of the fleet's rate (whatever the card):
// its fair share of a fresh card's rate, when that is news (the card's
// rate is newer than the one it paces at, or its part of it moved by
// more than shareMoved). ok is false when there is nothing to pace anew.
func (sh *scopeShare) shared(scope string, view ScopeView) (rate, burst float64, ok bool, part float64) {
	// The others ask what their records say; this process asks for all
	// it can get: what it asked since its last exchange says nothing of
	// a burst it starts now (a process idle for a minute would be held
	// to its idle rate). Its record tells the others its demand.
	demands := make([]float64, 0, len(view.Members)+1)
	for _, m := range view.Members {
		if m.ID != sh.id {
			demands = append(demands, m.Demand)
		}
	}
	own := len(demands)
	demands = append(demands, math.Inf(1))
	// Its part of the fleet's rate: its fair share of a fresh card's
	// rate over that rate; with none, an even split among the members
	// that ask. A rate it learns is over it (publishRate).
	c := view.Card
	fresh := c.Rate > 0 && view.Now.Sub(c.Learnt) <= cardFresh
	if fresh {
		part = fairShare(c.Rate, demands, own) / c.Rate
	} else {
		asking := 0
		for _, d := range demands {
			if d > 0 {
				asking++
			}
		}
		part = 1 / float64(max(asking, 1))
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.looks[scope]
	if l == nil {
		return 0, 0, false, part
	}
	moved := math.Abs(part-l.part) > shareMoved*l.part
	if moved || !fresh {
		l.part = part
	}
	if !fresh || (c.Learnt.Equal(l.learnt) && !moved) {
		return 0, 0, false, part
	}
	l.share, l.learnt = c.Rate*part, c.Learnt
	return l.share, c.Burst * part, l.share > 0, part
}

// fairShare returns demands[own]'s part of rate by max-min fairness (Google
// Doorman's fair share): in the order of their demands, each member gets
// what it asks for, at most an even split of what is left.
func fairShare(rate float64, demands []float64, own int) float64 {
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case demands[a] < demands[b]:
			return -1
		case demands[a] > demands[b]:
			return 1
		}
		return 0
	})
	left := rate
	for n, i := range order {
		give := min(demands[i], left/float64(len(order)-n))
		if i == own {
			return give
		}
		left -= give
	}
	return 0
}

// state says once per change whether the store answers.
func (sh *scopeShare) state(err error) {
	sh.mu.Lock()
	changed := sh.failing != (err != nil)
	sh.failing = err != nil
	sh.mu.Unlock()
	if !changed {
		return
	}
	event := "store-healthy"
	if err != nil {
		event = "store-failing"
	}
	sh.t.logChange([]slog.Attr{slog.String(otelattr.LogEvent, event)})
}
