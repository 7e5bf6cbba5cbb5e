package rropenai_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	rropenai "github.com/readrecovery/readrecovery/openai"
)

// TestDefaultTransportSharesRestrictions: a nil transport of rropenai
// (NewTransport) shares restrictions: after sequence A's 429
// "Retry-After: 1", sequence B's request waits for A's not-before; with
// readrecovery.WithoutSharedRestrictions() it goes at once.
func TestDefaultTransportSharesRestrictions(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *http.Client
		held bool
	}{
		{"nil transport", rropenai.HTTPClient(nil), true},
		{"opted out", rropenai.HTTPClient(rropenai.NewTransport(readrecovery.WithoutSharedRestrictions())), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			at := map[string]time.Time{}
			first := make(chan struct{})
			var once sync.Once
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				if _, ok := at[r.URL.Path]; !ok {
					at[r.URL.Path] = time.Now()
				}
				mu.Unlock()
				if r.URL.Path == "/a" {
					throttle := false
					once.Do(func() { throttle = true })
					if throttle {
						w.Header().Set("Retry-After", "1")
						w.WriteHeader(http.StatusTooManyRequests)
						close(first)
						return
					}
				}
				w.WriteHeader(http.StatusOK)
			}))
			defer srv.Close()
			get := func(name, path string) {
				ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget(name))
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
				resp, err := tc.c.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("%s: %v %v", name, resp, err)
					return
				}
				_ = resp.Body.Close()
			}
			var wg sync.WaitGroup
			wg.Go(func() { get("A", "/a") })
			<-first
			time.Sleep(100 * time.Millisecond)
			get("B", "/b")
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			gap := at["/b"].Sub(at["/a"])
			if held := gap >= 990*time.Millisecond; held != tc.held {
				t.Errorf("B arrived %v after A's 429; held %v, want %v", gap, held, tc.held)
			}
		})
	}
}

// TestTransportsShareProcessScopes (R102): the default transport and one
// over a base of the caller's own (NewTransportOver, as docs/openai.md
// shows for a TLS, proxy or otelhttp base) share the process's one table:
// after A's 429 "Retry-After: 1" through the first, B's read through the
// second waits for its not-before. (Before, readrecovery.New(base), as the
// docs offered, had no shared restrictions at all.) The control with a
// table of each transport's own sends B at once.
func TestTransportsShareProcessScopes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		process bool
	}{{"process table", true}, {"a table each", false}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.process {
				rropenai.ProcessScopes()
				defer rropenai.PrivateScopes()
			}
			var mu sync.Mutex
			at := map[string]time.Time{}
			first := make(chan struct{})
			var once sync.Once
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				if _, ok := at[r.URL.Path]; !ok {
					at[r.URL.Path] = time.Now()
				}
				mu.Unlock()
				throttle := false
				once.Do(func() { throttle = true })
				if throttle {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusTooManyRequests)
					close(first)
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			defer srv.Close()
			var carried atomic.Int64
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				carried.Add(1)
				return http.DefaultTransport.RoundTrip(req)
			})
			get := func(c *http.Client, name, path string) {
				ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget(name))
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
				resp, err := c.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("%s: %v %v", name, resp, err)
					return
				}
				_ = resp.Body.Close()
			}
			var wg sync.WaitGroup
			wg.Go(func() { get(rropenai.HTTPClient(nil), "A", "/a") })
			<-first
			time.Sleep(100 * time.Millisecond)
			get(rropenai.HTTPClient(rropenai.NewTransportOver(base)), "B", "/b")
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if n := carried.Load(); n != 1 {
				t.Fatalf("the caller's base carried %d requests, want B's 1", n)
			}
			gap := at["/b"].Sub(at["/a"])
			if held := gap >= 990*time.Millisecond; held != tc.process {
				t.Errorf("B arrived %v after A's 429; held %v, want %v", gap, held, tc.process)
			}
		})
	}
}

// roundTripFunc is a caller's own base.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
