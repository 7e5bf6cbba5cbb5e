package rrazure_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
)

// TestClientOptionsSharesRestrictions: ClientOptions turns shared
// restrictions on (SPEC R90-R92): after sequence A's 429 "Retry-After: 1",
// sequence B's first request waits for A's not-before T; with
// readrecovery.WithoutSharedRestrictions() it goes at once.
func TestClientOptionsSharesRestrictions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []readrecovery.Option
		held bool
	}{
		{"default", nil, true},
		{"opted out", []readrecovery.Option{readrecovery.WithoutSharedRestrictions()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var arrived []time.Time
			throttled := make(chan struct{})
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				mu.Lock()
				arrived = append(arrived, time.Now())
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusTooManyRequests)
					close(throttled)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			pl := newPipeline(rrazure.ClientOptions(tc.opts...))
			var wg sync.WaitGroup
			wg.Go(func() {
				ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("A"))
				if resp, err := send(ctx, pl, http.MethodGet, srv.URL+"/c/a", nil); err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("A: %v %v", resp, err)
				}
			})
			<-throttled
			time.Sleep(100 * time.Millisecond) // A's 429 has come back
			ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("B"))
			resp, err := send(ctx, pl, http.MethodGet, srv.URL+"/c/b", nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("B: %v %v", resp, err)
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(arrived) != 3 {
				t.Fatalf("%d requests, want 3", len(arrived))
			}
			var bAt time.Time
			for _, r := range srv.seen {
				if r.URL.Path == "/c/b" {
					for i, s := range srv.seen {
						if s == r {
							bAt = arrived[i]
						}
					}
				}
			}
			gap := bAt.Sub(arrived[0])
			if held := gap >= 990*time.Millisecond; held != tc.held {
				t.Errorf("B arrived %v after A's 429; held %v, want %v", gap, held, tc.held)
			}
		})
	}
}
