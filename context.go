package readrecovery

import "context"

// stateKey is the one context key of the package: a single lookup on the
// hot path finds the budget, the journal and the queue mark together.
type stateKey struct{}

// ctxState is immutable once stored in a context.
type ctxState struct {
	budget     *Budget
	journal    Journal
	queueRetry bool
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

// WithBudget returns a copy of ctx whose requests belong to the sequence of
// b. Put the same Budget in the context of every request of one sequence:
// every page of an inventory, every read of one identity. A nil b returns ctx
// unchanged; a request without a Budget gets no delayed recovery (R5).
func WithBudget(ctx context.Context, b *Budget) context.Context {
	if b == nil {
		return ctx
	}
	s := stateFrom(ctx).clone()
	s.budget = b
	return context.WithValue(ctx, stateKey{}, s)
}

// WithQueueRetry marks the requests of ctx as the File queue-429 upload
// route: such a request that meets 429 may be re-sent once, unchanged, after
// its wait, using its sequence's one delay opportunity (R10). The request
// needs GetBody (http.NewRequest sets it for in-memory bodies); without it,
// there is no re-send. Use it only on File upload requests.
func WithQueueRetry(ctx context.Context) context.Context {
	s := stateFrom(ctx).clone()
	s.queueRetry = true
	return context.WithValue(ctx, stateKey{}, s)
}
