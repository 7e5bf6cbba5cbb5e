package readrecovery

import (
	"context"
	"log/slog"
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
//     the store's clock and this process's, as the last exchange measured
//     it (half its round trip either way), so that a process whose clock
//     is skewed sends nothing before it.
//   - A store that fails or hangs never holds a request beyond
//     storeFirstLook: the table goes on with what it knows, and says so
//     once per change (event store-failing, store-healthy).

// The store's timings.
const (
	storeFirstLook = 200 * time.Millisecond // a scope's first look, on its first request's path
	storeEvery     = time.Second            // a scope's card is looked at again after this
	storeDeadline  = 2 * time.Second        // every background exchange's own bound
)

// scopeShare is a table's link to its store.
type scopeShare struct {
	t     *restrictions // the table it shares
	store ScopeStore
	now   func() time.Time // this process's clock (the first Transport's)
	mu    sync.Mutex
	// offset is the store's clock less this process's, as the last
	// exchange measured it; known once one did.
	offset  time.Duration
	known   bool
	failing bool
	looks   map[string]*storeLook // per scope: its last look
}

// storeLook is one scope's looking at the store: at is when the last one
// began; done is closed when the one under way ends (nil: none).
type storeLook struct {
	at   time.Time
	done chan struct{}
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
	switch {
	case l == nil:
		l = &storeLook{at: now, done: make(chan struct{})}
		sh.looks[scope] = l
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
	case l.done == nil && now.Sub(l.at) >= storeEvery:
		l.at, l.done = now, make(chan struct{})
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

// exchange sends card (its not-before in this process's clock; a zero
// card reads) to the store and takes back what its card holds: a later
// not-before than the table's becomes the scope's restriction. done, when
// not nil, is the scope's look: it ends with the exchange.
func (sh *scopeShare) exchange(scope string, card ScopeCard, done chan struct{}) {
	defer func() {
		if done != nil {
			sh.mu.Lock()
			if l := sh.looks[scope]; l != nil && l.done == done {
				l.done = nil
			}
			sh.mu.Unlock()
			close(done)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), storeDeadline)
	defer cancel()
	sh.mu.Lock()
	offset, known := sh.offset, sh.known
	sh.mu.Unlock()
	if !card.NotBefore.IsZero() && !known {
		// The store's clock is not known yet: a read first, so that the
		// not-before written is the store's time.
		sh.exchange(scope, ScopeCard{}, nil)
		sh.mu.Lock()
		offset, known = sh.offset, sh.known
		sh.mu.Unlock()
		if !known {
			return // the store failed: said already
		}
	}
	if !card.NotBefore.IsZero() {
		card.NotBefore = card.NotBefore.Add(offset).UTC()
	}
	sent := sh.now()
	view, err := sh.store.Exchange(ctx, scope, card, ScopeMember{})
	back := sh.now()
	sh.state(err)
	if err != nil {
		return
	}
	// The store's clock stands at view.Now somewhere within the round
	// trip: its middle.
	offset = view.Now.Sub(sent.Add(back.Sub(sent) / 2))
	sh.mu.Lock()
	sh.offset, sh.known = offset, true
	sh.mu.Unlock()
	if nb := view.Card.NotBefore; !nb.IsZero() {
		local := nb.Add(-offset)
		if local.After(back) {
			sh.t.record(scope, back, local, &waitPlan{trigger: triggerShared, requestID: view.Card.RequestID, status: 429, fromStore: true}, nil)
		}
	}
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
