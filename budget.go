package readrecovery

import (
	"context"
	"net/http"
	"time"
	"weak"

	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/httprule"
	"github.com/readrecovery/readrecovery/internal/redact"
)

// Ceilings of a [Budget]. Options may only lower them.
const (
	// MaxSequenceRequests is the most requests one sequence hands to the
	// network, the re-sent ones included.
	MaxSequenceRequests = 200
	// MaxSequenceTotal is the longest a sequence lasts, from its first
	// request, waits and the reading of response bodies included.
	MaxSequenceTotal = 60 * time.Second
	// maxEvidence bounds each list of a [Report].
	maxEvidence = 32
)

// A Budget is the allowance of one sequence of reads: one identity's
// readback after its mutation, one checkpoint's reads, or one complete File
// inventory (every page). It holds the sequence's single wait window, its
// request count and its total time, and it collects the evidence that
// [Budget.Report] returns. Put it in the context of every request of the
// sequence with [WithBudget]; never make one per page.
//
// A Budget is safe for concurrent use: the requests of one sequence may run
// in parallel (azblob downloads ranges concurrently), and the policy holds
// for them together (see "Concurrent requests" in the package
// documentation). Its clock starts at the first request; from then, the
// total is a deadline on every request in flight and on the reading of its
// body.
//
// The zero Budget is usable: a sequence without a name, with the default
// ceilings. A nil *Budget is no budget: [WithBudget] ignores it.
type Budget struct {
	s     sequence // the policy's state and the evidence, under one lock
	state ctxState // the context state of WithBudget on a parent without one
}

// A BudgetOption lowers one of a Budget's limits.
type BudgetOption interface{ applyBudget(*Budget) }

type budgetOptionFunc func(*Budget)

func (f budgetOptionFunc) applyBudget(b *Budget) { f(b) }

// MaxRequests lowers the request limit of a sequence; the default and
// ceiling is 200 (the re-sent requests included). A larger value is clamped
// to 200; n < 1 is ignored.
func MaxRequests(n int) BudgetOption {
	return budgetOptionFunc(func(b *Budget) {
		if n >= 1 {
			b.s.limits.requests = min(n, MaxSequenceRequests)
		}
	})
}

// MaxTotal lowers the total time of a sequence; the default and ceiling is
// 60 s. A larger value is clamped to 60 s; d <= 0 is ignored.
func MaxTotal(d time.Duration) BudgetOption {
	return budgetOptionFunc(func(b *Budget) {
		if d > 0 {
			b.s.limits.total = min(d, MaxSequenceTotal)
		}
	})
}

// MaxWait lowers the longest server-directed wait; the default and ceiling
// is 30 s ([MaxServerWait]). A larger value is clamped to 30 s; d < 0 is
// ignored; 0 allows no wait at all. A valid delay above it stops the
// sequence; it is never shortened.
func MaxWait(d time.Duration) BudgetOption {
	return budgetOptionFunc(func(b *Budget) {
		if d >= 0 {
			b.s.limits.wait, b.s.limits.waitSet = min(d, MaxServerWait), true
		}
	})
}

// NewBudget returns the Budget of one sequence called name (a label for
// reports, spans and errors: keep secrets out of it), with the ceilings
// lowered by opts.
func NewBudget(name string, opts ...BudgetOption) *Budget {
	b := &Budget{s: sequence{name: name}}
	for _, o := range opts {
		if o != nil {
			o.applyBudget(b)
		}
	}
	return b
}

// Name returns the sequence's name ("" for a nil Budget).
func (b *Budget) Name() string {
	if b == nil {
		return ""
	}
	return b.s.name
}

// WaitRecord is one wait a request of the sequence took.
type WaitRecord struct {
	// Trigger is what opened the window the request waited in:
	// "write-429" (a mutation met 429; the sequence's other requests wait),
	// "read-429" (a GET met 429 and is re-sent once after the wait),
	// "queue-429" (a marked File upload met 429 and is re-sent once) or
	// "shared-restriction" (another request's 429 restricted the scope:
	// WithSharedRestrictions).
	Trigger string `json:"trigger"`
	// Resend is true for the wait of a request re-sent after its own 429,
	// false for a request that waited for the window before its first send.
	Resend bool `json:"resend,omitempty"`
	// Method is the method of the request that waited.
	Method string `json:"method,omitempty"`
	// RetryAfter is the typed Retry-After of the 429 that set the end of
	// the wait.
	RetryAfter RetryAfter `json:"retry_after"`
	// Timing is its UTC timing.
	Timing *RetryAfterTiming `json:"timing,omitempty"`
	// Planned is how long the transport planned to wait; Actual how long it
	// did (shorter only when the context or a stop ended the wait). In
	// JSON: seconds.
	Planned time.Duration `json:"-"`
	Actual  time.Duration `json:"-"`
	// RequestID is the sanitized request ID of the 429 that set the end of
	// the wait.
	RequestID string `json:"request_id,omitempty"`
	// Canceled is true when the request context or a stop ended the wait.
	Canceled bool `json:"canceled,omitempty"`
	// Diagnostic says why a fallback delay was used (a missing, malformed
	// or duplicated Retry-After, or a malformed millisecond field); "" for
	// clean fields.
	Diagnostic string `json:"diagnostic,omitempty"`
	// FloorMs is the Azure millisecond floor (retry-after-ms or
	// x-ms-retry-after-ms) when it made the wait longer than Retry-After
	// alone; 0 otherwise.
	FloorMs int64 `json:"floor_ms,omitempty"`
}

// MutationOutcome is the outcome of one attempt of one mutation of the
// sequence: its ACK (a 2xx), its error status, or its transport failure
// (outcome unknown).
type MutationOutcome struct {
	// Request numbers the sequence's mutations from 1; a queue-429 re-send
	// carries the number of its own original request.
	Request    int    `json:"request"`
	Method     string `json:"method"`
	StatusCode int    `json:"status_code,omitempty"` // 0: no response, outcome unknown
	RequestID  string `json:"request_id,omitempty"`
	ETag       string `json:"etag,omitempty"`
	Error      string `json:"error,omitempty"` // sanitized transport failure
	Acked      bool   `json:"acked"`
	Attempt    int    `json:"attempt"`
	// Ownership is what the sequence may conclude about the object of this
	// mutation request (any of its attempts): owned, observed or unproven.
	Ownership Ownership `json:"ownership"`
}

// Ownership is what a sequence may conclude about the object a mutation
// meant to create.
type Ownership string

const (
	// Owned: the mutation itself got a 2xx (an ACK).
	Owned Ownership = "owned"
	// Observed: there was no ACK, but a later read found the object. This
	// never authorizes cleanup.
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

// evidence is what a sequence keeps for its report, its read request IDs
// and ETags not yet sanitized (see keptID); guarded by sequence.mu.
type evidence struct {
	failed, succeeded        []ReadEvidence
	droppedFailed, droppedOK int
	waits                    []WaitRecord
	mutations                []MutationOutcome // at most maxEvidence
	droppedMutations         int
	requests                 []mutationState // one per mutation (operation), in order
}

// mutationState is what one mutation of the sequence is known by and what
// its ownership needs. The tries of one operation (the same WithOperation
// mark, or the same x-ms-client-request-id, method and URL) are one
// mutation.
type mutationState struct {
	op                     *operation
	requestID, method, url string
	ordinal                int // the send of its first attempt
	attempts               int
	acked, observed        bool
}

// mutationFacts identify a mutation request.
type mutationFacts struct {
	op                     *operation
	requestID, method, url string
}

func (m *mutationState) is(f mutationFacts) bool {
	switch {
	case f.op != nil && m.op == f.op:
		return true
	case f.requestID != "":
		return m.requestID == f.requestID && m.method == f.method && m.url == f.url
	}
	return false
}

func (s mutationState) ownership() Ownership {
	switch {
	case s.acked:
		return Owned
	case s.observed:
		return Observed
	}
	return Unproven
}

// mutationSent numbers an attempt of a mutation sent as the ordinal-th
// request: a try of a mutation the sequence knows (request > 0: the
// transport's own re-send; or the same operation) is its next attempt,
// anything else a new mutation. It returns the mutation's number and the
// attempt's.
func (b *Budget) mutationSent(f mutationFacts, request, ordinal int) (int, int) {
	s := &b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.ev.requests
	if request == 0 {
		for i := range rs {
			if rs[i].is(f) {
				request = i + 1
				break
			}
		}
	}
	if request == 0 {
		s.ev.requests = append(rs, mutationState{op: f.op, requestID: f.requestID, method: f.method, url: f.url, ordinal: ordinal})
		request = len(s.ev.requests)
	}
	m := &s.ev.requests[request-1]
	m.attempts++
	return request, m.attempts
}

// recordMutation keeps one attempt's outcome.
func (b *Budget) recordMutation(o MutationOutcome) {
	s := &b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.Request >= 1 && o.Request <= len(s.ev.requests) && o.Acked {
		s.ev.requests[o.Request-1].acked = true
	}
	if len(s.ev.mutations) >= maxEvidence {
		s.ev.droppedMutations++
		return
	}
	s.ev.mutations = append(s.ev.mutations, o)
}

// recordRead keeps a read's evidence in the bounded lists. A successful
// read observes every mutation without an ACK sent before it (it was the
// ordinal-th request sent); a read sent before a mutation never does. The
// request ID and ETag are sanitized only when there is room to keep them.
func (b *Budget) recordRead(status int, h http.Header, ordinal int) {
	ok := httprule.IsSuccess(status)
	s := &b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := &s.ev
	if ok {
		for i := range ev.requests {
			if ev.requests[i].ordinal < ordinal {
				ev.requests[i].observed = true
			}
		}
	}
	list, dropped := &ev.failed, &ev.droppedFailed
	if ok {
		list, dropped = &ev.succeeded, &ev.droppedOK
	}
	if len(*list) >= maxEvidence {
		*dropped++
		return
	}
	switch c := cap(*list); {
	case c == 0:
		// Most sequences are short: room for one read at first (a
		// live sequence stays within its heap bound, bench:
		// TestHeapPerLiveBudget), then for a page-sized run (16 reads),
		// then the bound.
		*list = make([]ReadEvidence, 0, 1)
	case c == len(*list):
		*list = append(make([]ReadEvidence, 0, min(max(16, 8*c), maxEvidence)), *list...)
	}
	e := ReadEvidence{StatusCode: status, RequestID: keptID(redact.RequestIDValue(h))}
	if ok {
		if v := h["Etag"]; len(v) > 0 {
			e.ETag = keptID(v[0])
		}
	}
	*list = append(*list, e)
}

// keptID is a request ID or ETag as the evidence keeps it: as the server
// sent it, unless it is longer than redact.MaxIDLen, which is digested at
// once (so the evidence never holds more of a response than that).
// [Budget.Report] sanitizes what it hands out: reads whose evidence nobody
// asks for never pay for it.
func keptID(v string) string {
	if len(v) > redact.MaxIDLen {
		return redact.ID(v)
	}
	return v
}

// reported returns evidence as Report hands it out: its request IDs and
// ETags sanitized.
func reported(ev []ReadEvidence) []ReadEvidence {
	if len(ev) == 0 {
		return nil
	}
	out := make([]ReadEvidence, len(ev))
	for i, e := range ev {
		out[i] = ReadEvidence{StatusCode: e.StatusCode, RequestID: redact.ID(e.RequestID), ETag: redact.ETag(e.ETag)}
	}
	return out
}

func (b *Budget) recordWait(w WaitRecord) {
	b.s.mu.Lock()
	b.s.ev.waits = append(b.s.ev.waits, w)
	b.s.mu.Unlock()
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

// WindowRecord describes the sequence's one wait window: from the first
// decision to wait to the server's not-before time, during which no request
// of the sequence is sent.
type WindowRecord struct {
	// Trigger is what opened it: "write-429", "read-429", "queue-429" or
	// "shared-restriction" (WithSharedRestrictions).
	Trigger string `json:"trigger"`
	// RetryAfter and Timing are those of the 429 that opened it.
	RetryAfter RetryAfter        `json:"retry_after"`
	Timing     *RetryAfterTiming `json:"timing,omitempty"`
	// RequestID is the sanitized request ID of that 429.
	RequestID string `json:"request_id,omitempty"`
	// Length is how long the window lasted from its opening to its final
	// end (pushed out by joining 429s). In JSON: seconds.
	Length time.Duration `json:"-"`
	// Joined counts the 429s of requests in flight when it opened that
	// joined it; Extended those of them that pushed its end out.
	Joined   int `json:"joined,omitempty"`
	Extended int `json:"extended,omitempty"`
}

// Report is the evidence of a sequence. It is a copy: later requests do not
// change it. It prints itself in one line ([Report.String]), logs as a
// group ([Report.LogValue]), and its JSON durations are seconds.
type Report struct {
	// Sequence is the Budget's name.
	Sequence string `json:"sequence"`
	// Requests is how many requests were handed to the network, the
	// re-sent ones included; a request refused before that is not counted.
	Requests int `json:"requests"`
	// Waits is how many waits for the server requests of the sequence took
	// (each request that waited for the window, or for its scope's
	// restriction, counts once); WaitTime their total length. RoomWaits
	// and RoomWaitTime are the waits for the scope's room instead
	// (trigger scope-room: the process held the request, the server said
	// nothing). WaitLog lists each wait of both kinds, with its trigger.
	Waits        int           `json:"waits"`
	WaitTime     time.Duration `json:"-"`
	RoomWaits    int           `json:"room_waits,omitempty"`
	RoomWaitTime time.Duration `json:"-"`
	WaitLog      []WaitRecord  `json:"wait_log,omitempty"`
	// Window is the sequence's one wait window, nil when it had none.
	Window *WindowRecord `json:"window,omitempty"`
	// Stop is why the sequence stopped, "" while it runs; StopDetail says
	// more.
	Stop       StopReason `json:"stop,omitempty"`
	StopDetail string     `json:"stop_detail,omitempty"`
	// Mutations lists the outcome of every attempt of every mutation, in
	// order (at most 32; DroppedMutations counts the rest).
	Mutations        []MutationOutcome `json:"mutations,omitempty"`
	DroppedMutations int               `json:"dropped_mutations,omitempty"`
	// Mutation is the latest outcome of the sequence's first mutation, nil
	// when the sequence sent none (an inventory, a checkpoint read).
	Mutation *MutationOutcome `json:"mutation,omitempty"`
	// Ownership sums up the mutations: owned when every mutation request
	// got an ACK, observed when some did not but every one without an ACK
	// was observed by a later read, unproven otherwise; "" with no
	// mutation.
	Ownership Ownership `json:"ownership,omitempty"`
	// FailedReads and SuccessfulReads hold at most 32 entries each; the
	// Dropped counts say how many more there were.
	FailedReads            []ReadEvidence `json:"failed_reads,omitempty"`
	SuccessfulReads        []ReadEvidence `json:"successful_reads,omitempty"`
	DroppedFailedReads     int            `json:"dropped_failed_reads,omitempty"`
	DroppedSuccessfulReads int            `json:"dropped_successful_reads,omitempty"`
}

// Report returns the sequence's evidence so far; a nil Budget has an
// empty one.
func (b *Budget) Report() Report {
	if b == nil {
		return Report{}
	}
	s := &b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := &s.ev
	r := Report{
		Sequence:               s.name,
		Requests:               s.sent,
		WaitLog:                append([]WaitRecord(nil), ev.waits...),
		FailedReads:            reported(ev.failed),
		SuccessfulReads:        reported(ev.succeeded),
		DroppedFailedReads:     ev.droppedFailed,
		DroppedSuccessfulReads: ev.droppedOK,
		DroppedMutations:       ev.droppedMutations,
	}
	for _, w := range ev.waits {
		if w.Trigger == triggerRoom.String() {
			r.RoomWaits++
			r.RoomWaitTime += w.Actual
			continue
		}
		r.Waits++
		r.WaitTime += w.Actual
	}
	if s.win != nil {
		w := s.win.rec
		r.Window = &w
	}
	if s.stop != nil {
		r.Stop = s.stop.Reason
		r.StopDetail = s.stop.Detail
	}
	if len(ev.mutations) > 0 {
		r.Mutations = make([]MutationOutcome, len(ev.mutations))
		for i, m := range ev.mutations {
			m.Ownership = ev.requests[m.Request-1].ownership()
			r.Mutations[i] = m
			if m.Request == 1 {
				r.Mutation = &r.Mutations[i]
			}
		}
	}
	if len(ev.requests) > 0 {
		r.Ownership = Owned
		for _, m := range ev.requests {
			switch m.ownership() {
			case Unproven:
				r.Ownership = Unproven
			case Observed:
				if r.Ownership == Owned {
					r.Ownership = Observed
				}
			}
		}
	}
	return r
}

// addCut registers the cancel function of a context WithBudget made. A
// context made from a cancelable parent is pinned: the parent holds it
// until it is canceled, so its cancel function goes to a list the
// transport's timer keeps until the deadline even when the Budget is gone.
// Any other context goes with the Budget.
func (b *Budget) addCut(cancel context.CancelCauseFunc, pinned bool) {
	s := &b.s
	s.mu.Lock()
	if b.state.budget == nil {
		b.state.budget = b // a zero Budget; set before any context holds it
	}
	if s.expired {
		s.mu.Unlock()
		cancel(totalStop(s.name))
		return
	}
	if !pinned {
		if s.cut == nil {
			s.cut = cancel
		} else {
			r := s.rareLocked()
			r.cuts = append(r.cuts, cancel)
		}
		s.mu.Unlock()
		return
	}
	r := s.rareLocked()
	if r.pinned == nil {
		r.pinned = &pinnedCuts{name: s.name}
	}
	l, c, deadline := r.pinned, s.cutoffs, s.deadline
	s.mu.Unlock()
	if l.add(cancel) && c != nil {
		// The sequence is in the heap already, without this list.
		c.add(nil, deadline, cutEntry{pinned: l})
	}
}

// startCut queues the sequence on the transport's timer c at its first
// request (admission.started).
func (b *Budget) startCut(c *cutoffs, clk clock.Clock) {
	s := &b.s
	s.mu.Lock()
	s.cutoffs = c
	deadline := s.deadline
	var pinned *pinnedCuts
	if s.rare != nil {
		pinned = s.rare.pinned
	}
	s.mu.Unlock()
	c.add(clk, deadline, cutEntry{weak: weak.Make(b), pinned: pinned})
}
