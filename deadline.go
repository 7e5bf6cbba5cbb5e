package readrecovery

import (
	"container/heap"
	"context"
	"errors"
	"io"
	"sync"
	"time"
	"weak"

	"github.com/readrecovery/readrecovery/internal/clock"
)

// This file owns a sequence's total (docs/policy.md: total-cuts-off): the
// context WithBudget (context.go) returns, which the total cuts off, the transport's one
// timer that cuts them all, and the body wrapper that turns a body read cut
// off by the total into the sequence's stop.
//
// Only standard contexts: WithBudget derives one context.WithCancelCause
// from the caller's and puts the package's state on it with
// context.WithValue. At the sequence's first request its cancel function
// goes to the transport's heap of cut-offs, behind one runtime timer; when
// the total runs out the timer cancels it with a cause that is the
// sequence's total-exhausted stop. The heap never holds the Budget (see
// cutoffs for what it holds).

// pinnedCuts are the cancel functions of a sequence's contexts made from a
// cancelable parent.
type pinnedCuts struct {
	mu   sync.Mutex
	name string
	fns  []context.CancelCauseFunc
	done bool
	// queued: an entry of the heap holds the list.
	queued bool
}

// add keeps f, or cancels it at once after the deadline. It reports
// whether the list needs an entry of its own in the heap (its first
// function after the sequence was queued without one).
func (l *pinnedCuts) add(f context.CancelCauseFunc) bool {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		f(totalStop(l.name))
		return false
	}
	l.fns = append(l.fns, f)
	need := !l.queued
	l.queued = true
	l.mu.Unlock()
	return need
}

func (l *pinnedCuts) cancelAll() {
	l.mu.Lock()
	fns := l.fns
	l.fns, l.done = nil, true
	l.mu.Unlock()
	for _, f := range fns {
		f(totalStop(l.name))
	}
}

// totalStop is the cause with which the total cuts off a sequence's
// contexts.
func totalStop(name string) *StopError {
	return &StopError{Sequence: name, Reason: StopTotalExhausted, Detail: detailTotal, Err: context.DeadlineExceeded}
}

// cutByTotal returns the total's stop when the total cut ctx off, or nil.
func cutByTotal(ctx context.Context) *StopError {
	if ctx.Err() == nil {
		return nil
	}
	var se *StopError
	if errors.As(context.Cause(ctx), &se) && se.Reason == StopTotalExhausted {
		return se
	}
	return nil
}

// cutoffs is a transport's one timer for the totals of its sequences: a
// heap of entries by deadline. The zero value is ready to use.
//
// An entry holds its Budget weakly: a finished sequence its caller dropped
// is freed at once, and its entry (24 bytes) goes at the next sweep
// (sweepLocked) or at its deadline, whichever comes first: about 0.4 B per
// finished sequence (BenchmarkFinishedSequences; 42 B without the sweep). Held
// strongly, a finished sequence's Budget, contexts and cut-off cost the
// garbage collector enough to make the set-up of a sequence about 60 %
// slower (BenchmarkRoundTripPassThrough/budget-each: 3.0-3.2 µs instead of
// 1.8-2.3 µs) and keep 165 B instead of 43 B per finished sequence. Only
// the cancel functions of contexts made from a cancelable parent are held
// strongly (pinnedCuts), so that the parent releases them at the deadline.
type cutoffs struct {
	mu    sync.Mutex
	clk   clock.Clock // the transport's, from the first add
	base  time.Time   // the origin of the entries' times
	h     cutHeap
	armed time.Duration // the entry time the timer is set for; -1 when unset
	stop  func() bool
	// sweepAt is the heap length at which add next drops the entries of
	// finished sequences (sweepLocked); 0 before the first sweep.
	sweepAt int
}

// cutEntry is one sequence's deadline: an offset from the heap's base (no
// pointer to scan), its Budget weakly, and its pinned contexts.
type cutEntry struct {
	at     time.Duration
	weak   weak.Pointer[Budget]
	pinned *pinnedCuts
}

// add queues e for deadline and sets the timer when it is the earliest.
// The heap's clock and base time come from clk at its first use (a
// sequence's first request always comes before its pinned contexts' add).
func (c *cutoffs) add(clk clock.Clock, deadline time.Time, e cutEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clk == nil {
		c.clk, c.base, c.armed = clk, clk.Now(), -1
	}
	e.at = deadline.Sub(c.base)
	if len(c.h) >= max(c.sweepAt, minSweep) {
		c.sweepLocked()
	}
	heap.Push(&c.h, e)
	c.armLocked()
}

// minSweep is the heap length below which add never sweeps.
const minSweep = 1024

// sweepLocked drops the entries whose Budget is gone and that hold no
// pinned contexts: their deadline would cut nothing off. Kept, a finished
// sequence's entry lives until its total would end, and a heap of them
// (a minute of sequences) is scanned by every garbage collection: over a
// stub, 20–30 % of the own cost per request (bench: BenchmarkOwnCost
// rr-budget, TestHeapPerFinishedBudget). Sweeping when the heap has
// doubled since the last sweep costs O(1) per add, amortized.
func (c *cutoffs) sweepLocked() {
	kept := c.h[:0]
	for _, e := range c.h {
		if e.pinned != nil || e.weak.Value() != nil {
			kept = append(kept, e)
		}
	}
	clear(c.h[len(kept):])
	if cap(kept) > 4*max(len(kept), minSweep) {
		kept = append(make(cutHeap, 0, 2*len(kept)), kept...)
	}
	c.h = kept
	heap.Init(&c.h)
	c.sweepAt = 2 * len(kept)
}

// armLocked sets the timer for the earliest deadline, unless it is set for
// it already.
func (c *cutoffs) armLocked() {
	if len(c.h) == 0 {
		return
	}
	next := c.h[0].at
	if c.armed >= 0 && next >= c.armed {
		return
	}
	if c.stop != nil {
		c.stop()
	}
	c.armed = next
	c.stop = c.clk.AfterFunc(c.base.Add(next).Sub(c.clk.Now()), c.fire)
}

// fire cuts off every sequence whose deadline has come, and sets the timer
// for the next one.
func (c *cutoffs) fire() {
	c.mu.Lock()
	now := c.clk.Now().Sub(c.base)
	var due []cutEntry
	for len(c.h) > 0 && c.h[0].at <= now {
		due = append(due, heap.Pop(&c.h).(cutEntry))
	}
	c.armed, c.stop = -1, nil
	c.armLocked()
	c.mu.Unlock()
	for _, e := range due {
		if b := e.weak.Value(); b != nil {
			b.s.expire()
		}
		if e.pinned != nil {
			e.pinned.cancelAll()
		}
	}
}

// cutHeap orders cut-offs by deadline (container/heap).
type cutHeap []cutEntry

func (h cutHeap) Len() int           { return len(h) }
func (h cutHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h cutHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cutHeap) Push(x any)        { *h = append(*h, x.(cutEntry)) }
func (h *cutHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = cutEntry{}
	*h = old[:len(old)-1]
	return e
}

// cutBody is the body of a response of a sequence: a read that the
// sequence's total cut off returns the total's stop, and the sequence
// records it (the report says total-exhausted).
type cutBody struct {
	io.ReadCloser
	ctx context.Context
	t   *Transport
	b   *Budget
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && cutByTotal(b.ctx) != nil {
		c := call{t: b.t, ctx: b.ctx, b: b.b}
		return n, c.stop(StopTotalExhausted, detailTotal+" while the body was read", 0, "", context.DeadlineExceeded)
	}
	return n, err
}

// cutWriteBody is a cutBody whose base body is writable too: the body of
// a 101 Switching Protocols response, which net/http makes an
// io.ReadWriteCloser (docs/policy.md: pass-through-unchanged). Writes go
// to the base body untouched.
type cutWriteBody struct {
	*cutBody
	w io.Writer
}

func (b cutWriteBody) Write(p []byte) (int, error) { return b.w.Write(p) }
