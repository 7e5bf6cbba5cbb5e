package readrecovery

import (
	"context"
	"testing"
)

// noStore is a ScopeStore that answers nothing.
type noStore struct{ name string }

func (*noStore) Exchange(context.Context, string, ScopeCard, ScopeMember) (ScopeView, error) {
	return ScopeView{}, ErrScopeStore
}

// WithScopeStore records its store in the config; nil keeps what was
// there (none by default).
func TestWithScopeStore(t *testing.T) {
	s := &noStore{"s"}
	if c := newConfig(nil); c.store != nil {
		t.Fatalf("default store = %v, want none", c.store)
	}
	if c := newConfig([]Option{WithScopeStore(s)}); c.store != s {
		t.Fatalf("store = %v, want %v", c.store, s)
	}
	if c := newConfig([]Option{WithScopeStore(s), WithScopeStore(nil)}); c.store != s {
		t.Fatalf("after WithScopeStore(nil) store = %v, want %v", c.store, s)
	}
	if c := newConfig([]Option{WithScopeStore(nil)}); c.store != nil {
		t.Fatalf("WithScopeStore(nil) alone: store = %v, want none", c.store)
	}
}
