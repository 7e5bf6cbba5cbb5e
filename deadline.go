package readrecovery

import (
	"container/heap"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/readrecovery/readrecovery/internal/clock"
)

// This file owns a sequence's total (docs/policy.md: total-cuts-off): the
// context WithBudget returns, which the total cuts off, the transport's one
// timer that cuts them all, and the body wrapper that turns a body read cut
// off by the total into the sequence's stop.
//
// Only standard contexts: WithBudget derives one context.WithCancelCause
// from the caller's and puts the package's state on it with
// context.WithValue. At the sequence's first request its cancel function
// goes to the transport's heap of cut-offs, behind one runtime timer; when
// the total runs out the timer cancels it with a cause that is the
// sequence's total-exhausted stop. The heap holds only the cancel function
// (and the sequence's name), never the Budget: a finished sequence its
// caller dropped leaves that much until its total would have run out.

// WithBudget returns a copy of ctx whose requests belong to the sequence of
// b. Put the same Budget in the context of every request of one sequence:
// every page of an inventory, every read of one identity. A nil b returns
// ctx unchanged (a nil ctx is context.Background()); a request without a
// Budget gets no delayed recovery.
//
// The returned context is cut off when the sequence's total runs out,
// counted from its first request: a request or a body read still running
// then ends with an error matching [ErrSequenceStopped] (reason
// total-exhausted), and context.Cause of the context and of every context
// derived from it is that stop. Its Deadline is ctx's: the total starts
// with the first request, so it is not known when the context is made. Use
// it for the requests of the sequence; call WithBudget once per sequence
// rather than once per request. Like context.WithCancel, a context made
// from a cancelable ctx is released when ctx ends or the total runs out.
func WithBudget(ctx context.Context, b *Budget) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	if b == nil {
		return ctx
	}
	cut, cancel := context.WithCancelCause(ctx)
	s := stateFrom(ctx).clone()
	s.budget = b
	b.s.addCut(cancel)
	return context.WithValue(cut, stateKey{}, s)
}

// addCut registers the cancel function of a context WithBudget made: with
// the sequence until its first request, with the transport's timer after.
func (s *sequence) addCut(cancel context.CancelCauseFunc) {
	s.mu.Lock()
	c, deadline, ended := s.cutter, s.deadline, s.ended
	if c == nil {
		s.cuts = append(s.cuts, cancel)
	}
	s.mu.Unlock()
	if c != nil {
		c.add(nil, cut{at: deadline, name: s.name, cancel: cancel, ended: ended})
	}
}

// startCut hands the contexts made so far to the transport's timer c, at
// the sequence's first request (admission.started).
func (s *sequence) startCut(c *cutoffs, clk clock.Clock) {
	s.mu.Lock()
	cuts, deadline, ended := s.cuts, s.deadline, s.ended
	s.cuts, s.cutter = nil, c
	s.mu.Unlock()
	if len(cuts) == 0 {
		cuts = append(cuts, nil) // the flag alone
	}
	for _, cancel := range cuts {
		c.add(clk, cut{at: deadline, name: s.name, cancel: cancel, ended: ended})
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
// heap of the cancel functions of their contexts by deadline. The zero
// value is ready to use.
type cutoffs struct {
	mu    sync.Mutex
	clk   clock.Clock // the transport's, from the first add
	h     cutHeap
	armed time.Time // the deadline the timer is set for; zero when unset
	stop  func() bool
}

// cut is one context to cut off at its sequence's deadline, and the
// sequence's flag that says its total ended. Neither refers to the Budget.
type cut struct {
	at     time.Time
	name   string
	cancel context.CancelCauseFunc // nil: the flag alone
	ended  *atomic.Bool
}

// add queues e and sets the timer when it is the earliest. clk is the
// transport's clock (nil once the timer has it).
func (c *cutoffs) add(clk clock.Clock, e cut) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clk == nil {
		c.clk = clk
	}
	heap.Push(&c.h, e)
	c.armLocked()
}

// armLocked sets the timer for the earliest deadline, unless it is set for
// it already.
func (c *cutoffs) armLocked() {
	if len(c.h) == 0 {
		return
	}
	next := c.h[0].at
	if !c.armed.IsZero() && !next.Before(c.armed) {
		return
	}
	if c.stop != nil {
		c.stop()
	}
	c.armed = next
	c.stop = c.clk.AfterFunc(next.Sub(c.clk.Now()), c.fire)
}

// fire cuts off every context whose deadline has come, and sets the timer
// for the next one.
func (c *cutoffs) fire() {
	var due []cut
	c.mu.Lock()
	now := c.clk.Now()
	for len(c.h) > 0 && !now.Before(c.h[0].at) {
		due = append(due, heap.Pop(&c.h).(cut))
	}
	c.armed, c.stop = time.Time{}, nil
	c.armLocked()
	c.mu.Unlock()
	for _, e := range due {
		e.ended.Store(true)
		if e.cancel != nil {
			e.cancel(totalStop(e.name))
		}
	}
}

// cutHeap orders cuts by deadline (container/heap).
type cutHeap []cut

func (h cutHeap) Len() int           { return len(h) }
func (h cutHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h cutHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cutHeap) Push(x any)        { *h = append(*h, x.(cut)) }
func (h *cutHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = cut{}
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

// wrapBody puts the cut-off on resp's body (not on a missing or empty one).
func (c *call) wrapBody(resp *http.Response) {
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = &cutBody{ReadCloser: resp.Body, ctx: c.ctx, t: c.t, b: c.b}
	}
}
