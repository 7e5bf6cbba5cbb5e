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

// BudgetFrom returns the Budget of the sequence that ctx belongs to, or nil
// when it has none. Adapters use it to tell which requests the transport
// owns the 429 of (see the rrazure package of the azure module).
func BudgetFrom(ctx context.Context) *Budget {
	if s := stateFrom(ctx); s != nil {
		return s.budget
	}
	return nil
}

// WithQueueRetry marks the requests of ctx as the File queue-429 upload
// route: such a request that meets 429 may be re-sent once, unchanged, after
// its wait, using its sequence's one wait window (docs/policy.md: queue-429-route). The request
// needs GetBody (http.NewRequest sets it for in-memory bodies); without it,
// there is no re-send. Use it only on File upload requests.
func WithQueueRetry(ctx context.Context) context.Context {
	s := stateFrom(ctx).clone()
	s.queueRetry = true
	return context.WithValue(ctx, stateKey{}, s)
}
