package readrecovery

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/readrecovery/readrecovery/internal/clock"
)

// This file owns a sequence's total: the context that WithBudget returns,
// which ends when the total runs out, and the transport's one timer that
// ends them all.
//
// How the cut-off works, and why it costs nothing per request:
//
//   - WithBudget derives one standard cancelable context from the caller's
//     (context.WithCancelCause) and wraps it in budgetContext, which only
//     adds the budget's state as a value and the sequence's deadline. Every
//     request of the sequence is made with a descendant of it, so the
//     transport sends requests as they are: no request copy, no context
//     per request.
//   - Because the context is a standard one underneath, the contexts that
//     net/http and azcore derive per request register with it directly:
//     no goroutine per request (a context of a foreign type would cost
//     one).
//   - At its first request a sequence enters the transport's deadline queue:
//     one runtime timer for all sequences of the transport, not one per
//     sequence. The queue holds the budget weakly, so a finished sequence
//     that its caller dropped is freed at once, and its entry goes at the
//     queue's next compaction after that.

// errTotalExhausted is the cause with which the total cuts off the
// sequence's contexts; their Err is then context.DeadlineExceeded, as for
// a deadline.
var errTotalExhausted = context.DeadlineExceeded

// WithBudget returns a copy of ctx whose requests belong to the sequence of
// b. Put the same Budget in the context of every request of one sequence:
// every page of an inventory, every read of one identity. A nil b returns
// ctx unchanged; a request without a Budget gets no delayed recovery.
//
// The returned context ends when the sequence's total runs out (its
// deadline, from the sequence's first request, is then its Deadline): a
// request or a body read still running then is cut off. Use it for the
// requests of the sequence; call WithBudget once per sequence rather than
// once per request. Like context.WithCancel, a context made from a
// cancelable ctx is released when ctx ends or the total runs out.
func WithBudget(ctx context.Context, b *Budget) context.Context {
	if b == nil {
		return ctx
	}
	inner, cancel := context.WithCancelCause(ctx)
	c := &budgetContext{Context: inner, b: b}
	if s := stateFrom(ctx); s != nil {
		c.s = *s
	}
	c.s.budget = b
	b.addCut(cancel, ctx.Done() != nil)
	return c
}

// budgetContext is the context of a sequence: a standard cancelable context
// (cut off when the total runs out) with the package's state as a value.
type budgetContext struct {
	context.Context // from context.WithCancelCause: standard, so children register with it
	s               ctxState
	b               *Budget
}

func (c *budgetContext) Value(key any) any {
	if key == (stateKey{}) {
		return &c.s
	}
	return c.Context.Value(key)
}

// Deadline is the earlier of the parent's deadline and the sequence's (once
// its first request started its clock).
func (c *budgetContext) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if n := c.b.cut.deadline.Load(); n != 0 {
		if sd := time.Unix(0, n); !ok || sd.Before(d) {
			return sd, true
		}
	}
	return d, ok
}

// Err is context.DeadlineExceeded when the total cut the context off.
func (c *budgetContext) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == errTotalExhausted {
		return context.DeadlineExceeded
	}
	return err
}

func (c *budgetContext) String() string { return "readrecovery.WithBudget(" + c.b.name + ")" }

// cutoff holds what a sequence's total cuts off; guarded by Budget.mu but
// for deadline, read by budgetContext.Deadline without the lock.
type cutoff struct {
	deadline atomic.Int64 // unix nanoseconds; 0 before the first request
	// first is the cancel function of the first context made from a parent
	// without cancellation (most sequences make one; more go to the
	// Budget's rare part): nothing else refers to them, so they go with the
	// Budget.
	first context.CancelCauseFunc
	// parents are those of contexts made from a cancelable parent, which
	// refers to them until they are canceled: the deadline entry holds
	// them too, so that they are released at the deadline even when the
	// Budget is gone.
	parents *cutList
	d       *deadlines // the transport's heap the deadline went to
}

// cutList is a set of cancel functions that the deadline entry may outlive
// the Budget with.
type cutList struct {
	mu   sync.Mutex
	fns  []context.CancelCauseFunc
	done bool
}

func (l *cutList) add(f context.CancelCauseFunc) {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		f(errTotalExhausted)
		return
	}
	l.fns = append(l.fns, f)
	l.mu.Unlock()
}

func (l *cutList) cancelAll() {
	l.mu.Lock()
	fns := l.fns
	l.fns, l.done = nil, true
	l.mu.Unlock()
	for _, f := range fns {
		f(errTotalExhausted)
	}
}

// addCut registers the cancel function of a context WithBudget made.
func (b *Budget) addCut(cancel context.CancelCauseFunc, cancelableParent bool) {
	b.mu.Lock()
	if b.seq.expired {
		b.mu.Unlock()
		cancel(errTotalExhausted)
		return
	}
	if !cancelableParent {
		if b.cut.first == nil {
			b.cut.first = cancel
		} else {
			x := b.rareLocked()
			x.cuts = append(x.cuts, cancel)
		}
		b.mu.Unlock()
		return
	}
	if b.cut.parents == nil {
		b.cut.parents = &cutList{}
		if b.cut.d != nil {
			// The sequence's deadline is in the heap already: a second
			// entry at the same time carries these.
			b.cut.d.add(nil, deadlineEntry{b: weak.Pointer[Budget]{}, cuts: b.cut.parents}, b.seq.deadline)
		}
	}
	l := b.cut.parents
	b.mu.Unlock()
	l.add(cancel)
}

// setDeadline starts the cut-off at the sequence's first request; b.mu is
// held.
func (c *cutoff) setDeadline(b *Budget, d *deadlines, clk clock.Clock, at time.Time) {
	c.deadline.Store(at.UnixNano())
	c.d = d
	d.add(clk, deadlineEntry{b: weak.Make(b), cuts: c.parents}, at)
}

// expire runs when the sequence's total runs out: it cuts off every request
// in flight and its body. The stop itself is recorded by the first request
// it refuses or cuts off: a sequence that had finished before its total
// ran out keeps a report without a stop.
func (b *Budget) expire() {
	b.mu.Lock()
	b.seq.expired = true
	b.n.And(^uint64(nFast))
	first, own, parents := b.cut.first, b.rareView().cuts, b.cut.parents
	b.cut.first = nil
	if b.x != nil {
		b.x.cuts = nil
	}
	b.mu.Unlock()
	if first != nil {
		first(errTotalExhausted)
	}
	for _, f := range own {
		f(errTotalExhausted)
	}
	if parents != nil {
		parents.cancelAll()
	}
}

// deadlines is a transport's deadline queue: the totals of its sequences
// behind one runtime timer. The zero value is ready to use.
//
// Most sequences of a transport have the same total, so their deadlines
// come in time order: those go to the back of a FIFO of fixed-size chunks
// (append and pop in constant time, no slice to copy as it grows, emptied
// chunks reused). A deadline earlier than the back of the FIFO (a shorter
// MaxTotal, or two first requests racing for the lock) goes to a binary
// heap instead. Entries are values with their time as nanoseconds from the
// queue's base time: no object and no pointer per entry but the Budget's
// weak handle.
//
// A sequence that has finished needs no entry: once the garbage collector
// has freed its Budget, nothing is left to cut off (see compactLocked).
// Whenever the queue has doubled since it was last compacted, the entries of
// freed Budgets go, so a transport holds entries for about the sequences
// that are alive or finished since the last collection, not for every
// sequence of the last 60 s: in a small heap, those would leave the garbage
// collector less room and make it run more often for the whole program.
type deadlines struct {
	mu        sync.Mutex
	clk       clock.Clock
	base      time.Time // the origin of entries' times (monotonic)
	q         deadlineFIFO
	h         deadlineHeap // the entries that came out of order
	armedAt   int64        // the entry time the timer is set for; -1 when unset
	stop      func() bool
	compactAt int // the queue's length at which it is compacted next
}

// deadlineCompactMin is the smallest length at which the queue is
// compacted.
const deadlineCompactMin = 1024

// deadlineEntry is one sequence's deadline. It holds the Budget weakly;
// cuts are cancel functions it must release even when the Budget is gone.
type deadlineEntry struct {
	at   int64 // nanoseconds from deadlines.base
	b    weak.Pointer[Budget]
	cuts *cutList
}

// add queues e for time at. clk is the transport's clock, which sets the
// queue's clock and base at its first use (nil once it has them).
func (d *deadlines) add(clk clock.Clock, e deadlineEntry, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.clk == nil {
		d.clk, d.base, d.armedAt = clk, clk.Now(), -1
	}
	e.at = int64(at.Sub(d.base))
	d.pushLocked(e)
	if d.len() >= d.compactAt {
		d.compactLocked()
	}
	d.armLocked()
}

// compactLocked drops the entries that have nothing left to cut off: a
// Budget the garbage collector has freed (its weak pointer is nil), with no
// cancel functions of contexts made from a cancelable parent, which must be
// released at the deadline whatever becomes of the Budget. The next
// compaction comes when the queue has doubled, so every entry costs a
// constant amount of compaction work on average. A timer set for a dropped
// entry finds nothing due and is set again for the earliest one left.
func (d *deadlines) compactLocked() {
	live := func(e *deadlineEntry) bool { return e.cuts != nil || e.b.Value() != nil }
	d.q.filter(live)
	d.h.filter(live)
	d.compactAt = max(2*d.len(), deadlineCompactMin)
}

// armLocked sets the timer for the earliest deadline, unless it is set
// for it already.
func (d *deadlines) armLocked() {
	next, ok := d.nextLocked()
	if !ok {
		return
	}
	if d.armedAt >= 0 && next >= d.armedAt {
		return
	}
	if d.stop != nil {
		d.stop()
	}
	d.armedAt = next
	wait := d.base.Add(time.Duration(next)).Sub(d.clk.Now())
	d.stop = d.clk.AfterFunc(wait, d.fire)
}

// nextLocked returns the earliest entry time, if there is an entry.
func (d *deadlines) nextLocked() (int64, bool) {
	q, qok := d.q.front()
	if len(d.h) > 0 && (!qok || d.h[0].at < q) {
		return d.h[0].at, true
	}
	return q, qok
}

// pushLocked adds e: to the back of the FIFO when it is not earlier than
// the back, else to the heap.
func (d *deadlines) pushLocked(e deadlineEntry) {
	if back, ok := d.q.back(); !ok || back <= e.at {
		d.q.push(e)
	} else {
		d.h.push(e)
	}
}

// popLocked removes and returns the earliest entry; there must be one.
func (d *deadlines) popLocked() deadlineEntry {
	if q, ok := d.q.front(); ok && (len(d.h) == 0 || q <= d.h[0].at) {
		return d.q.pop()
	}
	return d.h.pop()
}

// len returns the number of entries.
func (d *deadlines) len() int { return d.q.n + len(d.h) }

// fire ends every sequence whose deadline has come, and sets the timer for
// the next one.
func (d *deadlines) fire() {
	var due []deadlineEntry
	d.mu.Lock()
	now := int64(d.clk.Now().Sub(d.base))
	for {
		next, ok := d.nextLocked()
		if !ok || next > now {
			break
		}
		due = append(due, d.popLocked())
	}
	d.armedAt, d.stop = -1, nil
	d.armLocked()
	d.mu.Unlock()
	for _, e := range due {
		if b := e.b.Value(); b != nil {
			b.expire()
		} else if e.cuts != nil {
			e.cuts.cancelAll()
		}
	}
}

// deadlineHeap is a binary min-heap of entries by time, on values (the
// container/heap interface would box each entry).
type deadlineHeap []deadlineEntry

func (h *deadlineHeap) push(e deadlineEntry) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *deadlineHeap) pop() deadlineEntry {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = deadlineEntry{}
	s = s[:n]
	s.down(0)
	*h = s
	return top
}

// down moves the entry at i down to its place.
func (h deadlineHeap) down(i int) {
	n := len(h)
	for {
		l, m := 2*i+1, i
		if l < n && h[l].at < h[m].at {
			m = l
		}
		if r := l + 1; r < n && h[r].at < h[m].at {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// filter keeps the entries keep reports true for, in heap order.
func (h *deadlineHeap) filter(keep func(*deadlineEntry) bool) {
	s := *h
	w := 0
	for i := range s {
		if keep(&s[i]) {
			s[w] = s[i]
			w++
		}
	}
	clear(s[w:])
	s = s[:w]
	for i := len(s)/2 - 1; i >= 0; i-- {
		s.down(i)
	}
	*h = s
}

// deadlineChunk is the size of a FIFO chunk: 256 entries, 6 KiB.
const deadlineChunk = 256

// deadlineFIFO is a queue of entries in time order, in fixed-size chunks:
// pushing never copies the entries already queued, and a chunk emptied at
// the front is kept for reuse at the back.
type deadlineFIFO struct {
	chunks     []*[deadlineChunk]deadlineEntry // in order; the first holds the front
	head, tail int                             // the front's index in chunks[0]; the end's in the last chunk
	n          int
	spare      *[deadlineChunk]deadlineEntry
}

func (q *deadlineFIFO) front() (int64, bool) {
	if q.n == 0 {
		return 0, false
	}
	return q.chunks[0][q.head].at, true
}

func (q *deadlineFIFO) back() (int64, bool) {
	if q.n == 0 {
		return 0, false
	}
	return q.chunks[len(q.chunks)-1][q.tail-1].at, true
}

func (q *deadlineFIFO) push(e deadlineEntry) {
	if len(q.chunks) == 0 || q.tail == deadlineChunk {
		c := q.spare
		if c == nil {
			c = new([deadlineChunk]deadlineEntry)
		}
		q.spare = nil
		q.chunks = append(q.chunks, c)
		q.tail = 0
	}
	q.chunks[len(q.chunks)-1][q.tail] = e
	q.tail++
	q.n++
}

func (q *deadlineFIFO) pop() deadlineEntry {
	c := q.chunks[0]
	e := c[q.head]
	c[q.head] = deadlineEntry{}
	q.head++
	q.n--
	if q.head == deadlineChunk || q.n == 0 {
		// The chunk is done with (the last one is, when the queue is
		// empty): keep one for reuse, drop the rest.
		if q.spare == nil {
			q.spare = c
		}
		copy(q.chunks, q.chunks[1:])
		q.chunks[len(q.chunks)-1] = nil
		q.chunks = q.chunks[:len(q.chunks)-1]
		q.head = 0
		if q.n == 0 {
			q.tail = 0
		}
	}
	return e
}

// filter keeps the entries keep reports true for, in order, moving them to
// the front chunks; the chunks left empty go (one is kept for reuse).
func (q *deadlineFIFO) filter(keep func(*deadlineEntry) bool) {
	if q.n == 0 {
		return
	}
	// Entries move only towards the front, so the write position never
	// passes the read position.
	wc, wi, n := 0, 0, 0
	last := len(q.chunks) - 1
	for ci, c := range q.chunks {
		lo, hi := 0, deadlineChunk
		if ci == 0 {
			lo = q.head
		}
		if ci == last {
			hi = q.tail
		}
		for i := lo; i < hi; i++ {
			e := c[i]
			c[i] = deadlineEntry{}
			if !keep(&e) {
				continue
			}
			q.chunks[wc][wi] = e
			n++
			if wi++; wi == deadlineChunk {
				wc, wi = wc+1, 0
			}
		}
	}
	used := wc
	if wi > 0 {
		used++
	}
	for i := used; i < len(q.chunks); i++ {
		if q.spare == nil {
			q.spare = q.chunks[i]
		}
		q.chunks[i] = nil
	}
	q.chunks = q.chunks[:used]
	q.head, q.n = 0, n
	switch {
	case n == 0:
		q.tail = 0
	case wi == 0:
		q.tail = deadlineChunk
	default:
		q.tail = wi
	}
}
