package readrecovery

import (
	"context"
	"net/http"
	"reflect"
	"sync"
	"time"
	"weak"

	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/redact"
)

// Ceilings of a [Budget] (R2). Options may only lower them.
const (
	// MaxSequenceRequests is the most requests one sequence sends, the
	// re-sent one included.
	MaxSequenceRequests = 200
	// MaxSequenceTotal is the longest a sequence lasts, from its first
	// request, waits and the reading of response bodies included.
	MaxSequenceTotal = 60 * time.Second
	// maxEvidence bounds each list of request IDs in a [Report].
	maxEvidence = 32
)

// A Budget is the allowance of one sequence of reads: one identity's
// readback after its mutation, one checkpoint's reads, or one complete File
// inventory (every page). It holds the sequence's single delay opportunity,
// its request count and its total time, and it collects the evidence that
// [Budget.Report] returns. Put it in the context of every request of the
// sequence with [WithBudget]; never make one per page.
//
// A Budget is safe for concurrent use (R6). Its clock starts at the first
// request; from then, the total is a deadline on every request in flight and
// on the reading of its body (R3).
type Budget struct {
	name        string
	maxRequests int
	maxTotal    time.Duration
	maxWait     time.Duration

	mu          sync.Mutex
	inst        *instruments // the metrics of the transport that started the sequence
	started     bool
	deadline    time.Time
	done        chan struct{} // closed when the total runs out
	cancels     []context.CancelCauseFunc
	keptParent  context.Context // the parent of the last request context made
	keptCtx     context.Context // and that context
	ownCtx      sequenceContext // the first request context, kept inline
	requests    int
	usedDelay   bool
	pending     *pendingWait // a write 429's wait, taken by the next GET
	stop        *StopError
	stopEvented bool
	waits       []WaitRecord
	mutation    *MutationOutcome
	observed    bool
	failed      []ReadEvidence
	succeeded   []ReadEvidence
	dropped     [2]int
}

// pendingWait is the wait a write 429 leaves for the next GET (R8).
type pendingWait struct {
	until      time.Time // receipt + server delay, on the monotonic clock
	diagnostic string
	ra         RetryAfter
	timing     *RetryAfterTiming
	requestID  string
	method     string
	status     int
	host, url  string
}

// A BudgetOption lowers one of a Budget's limits.
type BudgetOption interface{ applyBudget(*Budget) }

type budgetOptionFunc func(*Budget)

func (f budgetOptionFunc) applyBudget(b *Budget) { f(b) }

// MaxRequests lowers the request limit of a sequence; the default and
// ceiling is 200 (the re-sent request included). A larger value is clamped
// to 200; n < 1 is ignored.
func MaxRequests(n int) BudgetOption {
	return budgetOptionFunc(func(b *Budget) {
		if n >= 1 {
			b.maxRequests = min(n, MaxSequenceRequests)
		}
	})
}

// MaxTotal lowers the total time of a sequence; the default and ceiling is
// 60 s. A larger value is clamped to 60 s; d <= 0 is ignored.
func MaxTotal(d time.Duration) BudgetOption {
	return budgetOptionFunc(func(b *Budget) {
		if d > 0 {
			b.maxTotal = min(d, MaxSequenceTotal)
		}
	})
}

// MaxWait lowers the longest server-directed wait; the default and ceiling
// is 30 s ([MaxServerWait]). A larger value is clamped to 30 s; d < 0 is
// ignored. A valid delay above it stops the sequence; it is never shortened.
func MaxWait(d time.Duration) BudgetOption {
	return budgetOptionFunc(func(b *Budget) {
		if d >= 0 {
			b.maxWait = min(d, MaxServerWait)
		}
	})
}

// NewBudget returns the Budget of one sequence called name (a label for
// reports, spans and errors: keep secrets out of it), with the ceilings of
// R2 lowered by opts.
func NewBudget(name string, opts ...BudgetOption) *Budget {
	b := &Budget{
		name:        name,
		maxRequests: MaxSequenceRequests,
		maxTotal:    MaxSequenceTotal,
		maxWait:     MaxServerWait,
	}
	for _, o := range opts {
		if o != nil {
			o.applyBudget(b)
		}
	}
	return b
}

// Name returns the sequence's name.
func (b *Budget) Name() string { return b.name }

// admission is what admit gives a request it lets through.
type admission struct {
	// ctx is the context to send the request with: the caller's, cut off at
	// the sequence's deadline (R3).
	ctx context.Context
	// pending is a write 429's wait that this GET must take first (R8).
	pending *pendingWait
}

// admit counts one request to be sent now, starting the sequence's clock at
// its first request. It fails with the stop error once the sequence has
// stopped or when this request would break a limit. A GET takes the
// pending write-429 wait, if any. One lock for all of it, and the clock read
// only at the first request: this is the hot path. After the first request,
// the total is enforced by the timer that closes the sequence's done
// channel at its deadline (expire).
func (b *Budget) admit(clk clock.Clock, inst *instruments, parent context.Context, get bool) (admission, *StopError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop != nil {
		return admission{}, b.stop
	}
	if !b.started {
		b.started = true
		b.inst = inst
		b.deadline = clk.Now().Add(b.maxTotal)
		b.done = make(chan struct{})
		// The timer holds the budget weakly: a finished sequence that its
		// caller dropped is freed at once, not kept for the rest of its
		// total. Nothing can be in flight then (a request in flight holds
		// its context, which holds the budget), so there is nothing to cut.
		wb := weak.Make(b)
		clk.AfterFunc(b.maxTotal, func() {
			if b := wb.Value(); b != nil {
				b.expire()
			}
		})
	}
	select {
	case <-b.done:
		return admission{}, b.stopLocked(StopTotalExhausted, "the sequence's total time ran out", 0, "", nil)
	default:
	}
	if b.requests >= b.maxRequests {
		return admission{}, b.stopLocked(StopRequestsExhausted, "the sequence's request limit was reached", 0, "", nil)
	}
	b.requests++
	a := admission{ctx: b.requestContextLocked(parent)}
	if get {
		a.pending, b.pending = b.pending, nil
	}
	return a, nil
}

// unadmit takes back the count of a request that admit let through but that
// was refused before it was sent.
func (b *Budget) unadmit() {
	b.mu.Lock()
	b.requests--
	b.mu.Unlock()
}

// expire runs at the deadline: it stops the sequence and cuts off every
// request in flight and its body (R3).
//
// The stop itself is recorded by the first request it refuses or cuts off:
// a sequence that had finished before its total ran out keeps a report
// without a stop.
func (b *Budget) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.done)
	for _, c := range b.cancels {
		c(errTotalExhausted)
	}
	b.cancels = nil
}

// errTotalExhausted is the cause of the cancellation of requests in flight
// when the total runs out.
var errTotalExhausted = context.DeadlineExceeded

// requestContextLocked returns the context a request of this sequence is
// sent with: parent, cut off at the sequence's deadline. Requests of one
// sequence usually share their parent (every page of an inventory), so the
// last one made is kept and reused: cutting off at the deadline is all it
// does, the same for each of them.
func (b *Budget) requestContextLocked(parent context.Context) context.Context {
	// Only a comparable parent can be compared with the kept one; any
	// other (a struct holding a map, say) would panic on ==.
	cacheable := reflect.TypeOf(parent).Comparable()
	if cacheable && b.keptParent == parent {
		return b.keptCtx
	}
	var ctx context.Context
	if parent.Done() == nil {
		// No caller deadline or cancellation: no timer of its own, and for
		// the first such parent no allocation either.
		if b.ownCtx.b == nil {
			b.ownCtx = sequenceContext{Context: parent, b: b}
			ctx = &b.ownCtx
		} else {
			ctx = &sequenceContext{Context: parent, b: b}
		}
	} else {
		inner, cancel := context.WithCancelCause(parent)
		ctx = &cutContext{Context: inner, deadline: b.deadline}
		select {
		case <-b.done:
			cancel(errTotalExhausted)
		default:
			// Bounded: at most one per request, all released at the
			// deadline.
			b.cancels = append(b.cancels, cancel)
		}
	}
	if cacheable {
		b.keptParent, b.keptCtx = parent, ctx
	}
	return ctx
}

// cutContext is a caller's cancellable context that the sequence's total
// also ends: its error is then context.DeadlineExceeded, as for a deadline.
type cutContext struct {
	context.Context
	deadline time.Time
}

func (c *cutContext) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *cutContext) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == errTotalExhausted {
		return context.DeadlineExceeded
	}
	return err
}

// sequenceContext is a context without cancellation of its own parent,
// done when the sequence's total runs out.
type sequenceContext struct {
	context.Context
	b *Budget
}

func (c *sequenceContext) Deadline() (time.Time, bool) { return c.b.deadline, true }
func (c *sequenceContext) Done() <-chan struct{}       { return c.b.done }
func (c *sequenceContext) Err() error {
	select {
	case <-c.b.done:
		return errTotalExhausted
	default:
		return nil
	}
}

// stopLocked records the first stop of the sequence and returns it.
func (b *Budget) stopLocked(r StopReason, detail string, status int, requestID string, cause error) *StopError {
	if b.stop == nil {
		b.stop = &StopError{Sequence: b.name, Reason: r, Detail: detail, StatusCode: status, RequestID: requestID, Err: cause}
		if b.inst != nil {
			b.inst.stop(r)
		}
	}
	return b.stop
}

// stopNow stops the sequence (if it is not already) and returns the stop
// error to hand back, carrying this request's status, ID and cause. The
// second result is true when this call made the stop.
func (b *Budget) stopNow(r StopReason, detail string, status int, requestID string, cause error) (*StopError, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	first := b.stop == nil
	b.stopLocked(r, detail, status, requestID, cause)
	if first {
		return b.stop, true
	}
	return &StopError{Sequence: b.name, Reason: r, Detail: detail, StatusCode: status, RequestID: requestID, Err: cause}, false
}

// claimDelay takes the sequence's one delay opportunity; false when it was
// already used.
func (b *Budget) claimDelay() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.usedDelay {
		return false
	}
	b.usedDelay = true
	return true
}

// setPending keeps a write 429's wait for the next GET.
func (b *Budget) setPending(p *pendingWait) {
	b.mu.Lock()
	b.pending = p
	b.mu.Unlock()
}

// WaitRecord is one wait the sequence took.
type WaitRecord struct {
	// Trigger is "write-429", "read-429" or "queue-429".
	Trigger string `json:"trigger"`
	// RetryAfter is the typed Retry-After of the 429 that caused the wait.
	RetryAfter RetryAfter `json:"retry_after"`
	// Timing is its UTC timing.
	Timing *RetryAfterTiming `json:"timing,omitempty"`
	// Planned is how long the transport planned to wait; Actual how long it
	// did (shorter only when the context ended the wait).
	Planned time.Duration `json:"planned"`
	Actual  time.Duration `json:"actual"`
	// RequestID is the sanitized request ID of the 429.
	RequestID string `json:"request_id,omitempty"`
	// Canceled is true when the request context ended the wait.
	Canceled bool `json:"canceled,omitempty"`
	// Diagnostic says why a fallback delay was used (a missing, malformed
	// or duplicated Retry-After); "" for a clean field.
	Diagnostic string `json:"diagnostic,omitempty"`
}

func (b *Budget) recordWait(w WaitRecord) {
	b.mu.Lock()
	b.waits = append(b.waits, w)
	b.mu.Unlock()
}

// MutationOutcome is the original outcome of the sequence's mutation: its
// ACK (a 2xx), its error status, or its transport failure (outcome
// unknown).
type MutationOutcome struct {
	Method     string `json:"method"`
	StatusCode int    `json:"status_code,omitempty"` // 0: no response, outcome unknown
	RequestID  string `json:"request_id,omitempty"`
	ETag       string `json:"etag,omitempty"`
	Error      string `json:"error,omitempty"` // sanitized transport failure
	Acked      bool   `json:"acked"`
	Attempt    int    `json:"attempt"`
}

// Ownership is what a sequence may conclude about the object its mutation
// meant to create (R25).
type Ownership string

const (
	// Owned: the mutation itself got a 2xx (an ACK).
	Owned Ownership = "owned"
	// Observed: there was no ACK, but a read found the object. This never
	// authorizes cleanup.
	Observed Ownership = "observed"
	// Unproven: there was a mutation, with no ACK and nothing observed.
	Unproven Ownership = "unproven"
)

// ReadEvidence is one read's sanitized outcome.
type ReadEvidence struct {
	StatusCode int    `json:"status_code"`
	RequestID  string `json:"request_id,omitempty"`
	ETag       string `json:"etag,omitempty"`
}

// recordMutation keeps the sequence's original mutation outcome: the first
// mutation's, replaced only by its own queue-429 re-send.
func (b *Budget) recordMutation(m MutationOutcome) {
	b.mu.Lock()
	if b.mutation == nil || (m.Attempt > 1 && b.mutation.Method == m.Method) {
		b.mutation = &m
	}
	b.mu.Unlock()
}

// recordRead keeps a read's evidence in the bounded lists. The request ID
// and ETag are sanitized only when there is room to keep them.
func (b *Budget) recordRead(status int, h http.Header) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := status >= 200 && status < 300
	if ok && b.mutation != nil && !b.mutation.Acked {
		b.observed = true
	}
	list, i := &b.failed, 0
	if ok {
		list, i = &b.succeeded, 1
	}
	if len(*list) >= maxEvidence {
		b.dropped[i]++
		return
	}
	if *list == nil {
		// Most sequences are short: start with room for a few reads
		// rather than growing from one.
		*list = make([]ReadEvidence, 0, 4)
	}
	*list = append(*list, ReadEvidence{StatusCode: status, RequestID: redact.RequestID(h), ETag: etagOf(h, ok)})
}

// etagOf returns the sanitized ETag of a successful response, or "".
func etagOf(h http.Header, ok bool) string {
	if !ok {
		return ""
	}
	if v := h["Etag"]; len(v) > 0 {
		return redact.ETag(v[0])
	}
	return ""
}

// Report is the evidence of a sequence (R24, R25). It is a copy: later
// requests do not change it.
type Report struct {
	// Sequence is the Budget's name.
	Sequence string `json:"sequence"`
	// Requests is how many requests were sent, the re-sent one included.
	Requests int `json:"requests"`
	// Waits is how many waits were taken (at most one); WaitTime their
	// total length; WaitLog each of them.
	Waits    int           `json:"waits"`
	WaitTime time.Duration `json:"wait_time"`
	WaitLog  []WaitRecord  `json:"wait_log,omitempty"`
	// Stop is why the sequence stopped, "" while it runs; StopDetail says
	// more.
	Stop       StopReason `json:"stop,omitempty"`
	StopDetail string     `json:"stop_detail,omitempty"`
	// Mutation is the original mutation outcome, nil when the sequence sent
	// none (an inventory, a checkpoint read).
	Mutation *MutationOutcome `json:"mutation,omitempty"`
	// Ownership is owned, observed or unproven when there was a mutation,
	// "" when there was none.
	Ownership Ownership `json:"ownership,omitempty"`
	// FailedReads and SuccessfulReads hold at most 32 entries each; the
	// Dropped counts say how many more there were.
	FailedReads            []ReadEvidence `json:"failed_reads,omitempty"`
	SuccessfulReads        []ReadEvidence `json:"successful_reads,omitempty"`
	DroppedFailedReads     int            `json:"dropped_failed_reads,omitempty"`
	DroppedSuccessfulReads int            `json:"dropped_successful_reads,omitempty"`
}

// Report returns the sequence's evidence so far.
func (b *Budget) Report() Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := Report{
		Sequence:               b.name,
		Requests:               b.requests,
		Waits:                  len(b.waits),
		WaitLog:                append([]WaitRecord(nil), b.waits...),
		FailedReads:            append([]ReadEvidence(nil), b.failed...),
		SuccessfulReads:        append([]ReadEvidence(nil), b.succeeded...),
		DroppedFailedReads:     b.dropped[0],
		DroppedSuccessfulReads: b.dropped[1],
	}
	for _, w := range b.waits {
		r.WaitTime += w.Actual
	}
	if b.stop != nil {
		r.Stop = b.stop.Reason
		r.StopDetail = b.stop.Detail
	}
	if b.mutation != nil {
		m := *b.mutation
		r.Mutation = &m
		switch {
		case m.Acked:
			r.Ownership = Owned
		case b.observed:
			r.Ownership = Observed
		default:
			r.Ownership = Unproven
		}
	}
	return r
}

// expired reports whether the sequence's total has run out.
func (b *Budget) expired() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return false
	}
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// deadlineAt returns the sequence's deadline (zero before its first
// request).
func (b *Budget) deadlineAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deadline
}

// requestsLeft returns how many more requests the sequence may send.
func (b *Budget) requestsLeft() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxRequests - b.requests
}

// takeStopEvent reports, once, that the sequence's stop has not yet been
// recorded as a span event.
func (b *Budget) takeStopEvent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop == nil || b.stopEvented {
		return false
	}
	b.stopEvented = true
	return true
}

// sent returns how many requests the sequence has sent.
func (b *Budget) sent() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.requests
}
