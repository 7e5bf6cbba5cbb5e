package readrecovery

import (
	"context"
)

// stateKey is the one context key of the package: a single lookup on the
// hot path finds the budget, the journal and the queue mark together.
type stateKey struct{}

// ctxState is immutable once stored in a context.
type ctxState struct {
	budget     *Budget
	journal    Journal
	queueRetry bool
	op         *operation // WithOperation's mark, nil without one
}

func stateFrom(ctx context.Context) *ctxState {
	s, _ := ctx.Value(stateKey{}).(*ctxState)
	return s
}

// clone copies s; a nil s gives a zero state.
func (s *ctxState) clone() *ctxState {
	if s == nil {
		return &ctxState{}
	}
	c := *s
	return &c
}

// mustParent panics on a nil parent context, as the context package's
// With functions do (a nil Context is never valid: pass context.TODO).
func mustParent(ctx context.Context) {
	if ctx == nil {
		panic("cannot create context from nil parent")
	}
}

// BudgetFrom returns the Budget of the sequence that ctx belongs to, or nil
// when it has none. Adapters use it to tell which requests the transport
// owns the 429 of (see the rrazure package of the azure module).
func BudgetFrom(ctx context.Context) *Budget {
	if ctx == nil {
		return nil
	}
	if s := stateFrom(ctx); s != nil {
		return s.budget
	}
	return nil
}

// WithQueueRetry marks the requests of ctx as the File queue-429 upload
// route (docs/policy.md: queue-429-route): such a request that meets 429
// may be re-sent once, unchanged, after its wait, using its sequence's one
// wait window. The request needs GetBody (http.NewRequest sets it for
// in-memory bodies); without it, there is no re-send. Use it only on File
// upload requests. Like context.WithValue, it panics on a nil ctx.
func WithQueueRetry(ctx context.Context) context.Context {
	mustParent(ctx)
	s := stateFrom(ctx).clone()
	s.queueRetry = true
	return context.WithValue(ctx, stateKey{}, s)
}

// WithOperation returns a copy of ctx that marks one operation: every
// request sent with it, or with a context derived from it, is a try of that
// operation. Once a mutation of the operation has met 429, every later try
// is refused before any network access, with or without a [Budget]: the
// error matches [ErrRequestRefused] (reason [StopRepeatRefused]), is
// NonRetriable, and carries the original 429's status and request ID; a
// sequence the requests belong to goes on (docs/policy.md: repeat-guard).
// The transport's own queue-route re-send is not a try of this kind.
//
// Use it once per logical operation, below any retry layer that re-sends
// it (the rrazure adapter of the azure module marks each azcore operation
// this way). Like context.WithValue, it panics on a nil ctx.
func WithOperation(ctx context.Context) context.Context {
	mustParent(ctx)
	s := stateFrom(ctx).clone()
	s.op = &operation{}
	return context.WithValue(ctx, stateKey{}, s)
}

// operation is what WithOperation marks: an identity only, entered in the
// Transport's repeat guard when one of its mutations meets 429
// (repeatguard.go). Not of size zero: two operations are two pointers.
type operation struct{ _ byte }

// WithBudget returns a copy of ctx whose requests belong to the sequence of
// b. Put the same Budget in the context of every request of one sequence:
// every page of an inventory, every read of one identity. A nil b returns
// ctx unchanged; like context.WithValue, it panics on a nil ctx. A request
// without a Budget gets no delayed recovery.
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
	mustParent(ctx)
	if b == nil {
		return ctx
	}
	cutCtx, cancel := context.WithCancelCause(ctx)
	b.addCut(cancel, ctx.Done() != nil)
	s := stateFrom(ctx)
	if s == nil {
		// The common case: nothing else marked on ctx. The Budget holds
		// the state, which spares an allocation per sequence.
		return context.WithValue(cutCtx, stateKey{}, &b.state)
	}
	s = s.clone()
	s.budget = b
	return context.WithValue(cutCtx, stateKey{}, s)
}

// WithJournal returns a copy of ctx whose requests are journaled in j. A nil
// j, or a typed nil (a nil *journal.Journal), returns ctx unchanged; like
// context.WithValue, it panics on a nil ctx.
func WithJournal(ctx context.Context, j Journal) context.Context {
	mustParent(ctx)
	if isNil(j) {
		return ctx
	}
	s := stateFrom(ctx).clone()
	s.journal = j
	return context.WithValue(ctx, stateKey{}, s)
}
