package rrazure_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
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

// countingBase is a caller's own base (a TLS or proxy transport, say):
// it counts what it carries.
type countingBase struct {
	mu sync.Mutex
	n  int
}

func (b *countingBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// TestTransportsShareProcessScopes (R102): two clients, one built with
// ClientOptions and one over a base of the caller's own with
// NewTransportOver, share the process's one table: after the first
// client's 429 "Retry-After: 1", the second client's read waits for its
// not-before. (Before, each ClientOptions had a table of its own: the
// second client's read went out 0.00 s after the 429.) The control with
// a table of each transport's own sends it at once.
func TestTransportsShareProcessScopes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		process bool
	}{{"process table", true}, {"a table each", false}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.process {
				rrazure.ProcessScopes()
				defer rrazure.PrivateScopes()
			}
			var mu sync.Mutex
			at := map[string]time.Time{}
			throttled := make(chan struct{})
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				mu.Lock()
				if _, ok := at[r.URL.Path]; !ok {
					at[r.URL.Path] = time.Now()
				}
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusTooManyRequests)
					close(throttled)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			first := newPipeline(rrazure.ClientOptions())
			base := &countingBase{}
			var o policy.ClientOptions
			rrazure.Apply(&o, rrazure.NewTransportOver(base))
			second := newPipeline(o)
			var wg sync.WaitGroup
			wg.Go(func() {
				ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("first"))
				if resp, err := send(ctx, first, http.MethodGet, srv.URL+"/c/a", nil); err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("first client: %v %v", resp, err)
				}
			})
			<-throttled
			time.Sleep(100 * time.Millisecond) // its 429 has come back
			ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("second"))
			if resp, err := send(ctx, second, http.MethodGet, srv.URL+"/c/b", nil); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("second client: %v %v", resp, err)
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			base.mu.Lock()
			defer base.mu.Unlock()
			if base.n != 1 {
				t.Fatalf("the caller's base carried %d requests, want the second client's 1", base.n)
			}
			gap := at["/c/b"].Sub(at["/c/a"])
			if held := gap >= 990*time.Millisecond; held != tc.process {
				t.Errorf("the second client's read arrived %v after the first's 429; held %v, want %v", gap, held, tc.process)
			}
		})
	}
}
