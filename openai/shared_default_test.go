package rropenai_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
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
