package journal

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hangingStore is a Store whose lists and reads never answer until their
// context ends (a store that never answers, R85).
type hangingStore struct {
	*memStore
	hang chan struct{} // closed: answer again
}

func (h *hangingStore) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.hang:
		return nil
	}
}

func (h *hangingStore) Read(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	if err := h.wait(ctx); err != nil {
		return nil, "", err
	}
	return h.memStore.Read(ctx, name, limit)
}

func (h *hangingStore) List(ctx context.Context, limit int) ([]string, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return h.memStore.List(ctx, limit)
}

// TestCallerContextBoundsStoreReads: OpenStore, InspectStore, Admit and
// ReviewPending of a store that never answers return by the caller's
// 100 ms deadline with its error, not after the store's own 30 s bound
// (R85). The bound asserted (5 s) is far below storeTimeout.
func TestCallerContextBoundsStoreReads(t *testing.T) {
	for _, parallel := range []bool{false, true} {
		st := &hangingStore{memStore: newMemStore(), hang: make(chan struct{})}
		var opts []Option
		if parallel {
			opts = append(opts, WithParallel(2))
		}
		close(st.hang)
		j, err := OpenStore(context.Background(), st, opts...)
		require.NoError(t, err)
		st.hang = make(chan struct{}) // from now on nothing answers

		calls := map[string]func(ctx context.Context) error{
			"OpenStore": func(ctx context.Context) error { _, err := OpenStore(ctx, st, opts...); return err },
			"InspectStore": func(ctx context.Context) error {
				_, err := InspectStore(ctx, st)
				return err
			},
			"Admit": func(ctx context.Context) error { return j.Admit(ctx, t0) },
			"ReviewPending": func(ctx context.Context) error {
				_, err := j.ReviewPending(ctx, "n", 0)
				return err
			},
		}
		for name, call := range calls {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			cancel()
			require.Error(t, err, "%s parallel=%v", name, parallel)
			require.Less(t, took, 5*time.Second, "%s parallel=%v returned after %v", name, parallel, took)
			if name != "ReviewPending" && name != "Admit" {
				require.ErrorIs(t, err, context.DeadlineExceeded, "%s parallel=%v: %v", name, parallel, err)
			}
		}
	}
}
