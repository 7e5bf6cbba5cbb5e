package readrecovery

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// roundTripDelay adds a round trip of d (half each way) to an in-memory
// base, so that a server's answers come back as over a network.
type roundTripDelay struct {
	base http.RoundTripper
	d    time.Duration
}

func (r roundTripDelay) RoundTrip(req *http.Request) (*http.Response, error) {
	time.Sleep(r.d / 2)
	resp, err := r.base.RoundTrip(req)
	time.Sleep(r.d / 2)
	return resp, err
}

// TestScopeRoomLedger (docs/policy.md: scope-room): 200 sequences start at
// once against a 2 s window behind a 20 ms round trip. Without shared
// restrictions every first request lands inside the window; with them,
// the scope's room lets one request go before the process has heard from
// the server, so exactly 1 lands inside the window, and every sequence
// ends ok after it.
func TestScopeRoomLedger(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []Option
		inside int
		ok     int
	}{
		{"off", nil, 200, -1},
		{"on", []Option{WithSharedRestrictions(nil)}, 1, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := fakeserver.New()
				defer srv.Close()
				srv.PutBlob("c", "b", []byte("x"))
				srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterRemaining()), fakeserver.Window(time.Time{}, 2*time.Second))
				rt := New(roundTripDelay{srv.Transport(), 20 * time.Millisecond}, tc.opts...)
				var wg sync.WaitGroup
				var mu sync.Mutex
				ok := 0
				for range 200 {
					wg.Go(func() {
						b := NewBudget("read")
						req, _ := http.NewRequestWithContext(WithBudget(context.Background(), b), http.MethodGet, "http://acct.blob.example/c/b", nil)
						resp, err := rt.RoundTrip(req)
						if err == nil {
							drain(resp)
							if resp.StatusCode == http.StatusOK {
								mu.Lock()
								ok++
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				reqs := srv.Requests()
				start := reqs[0].Arrived
				inside := 0
				for _, r := range reqs {
					if r.Arrived.Before(start.Add(2 * time.Second)) {
						inside++
					}
				}
				if inside != tc.inside {
					t.Errorf("%d requests inside the window, want %d (of %d)", inside, tc.inside, len(reqs))
				}
				if tc.ok >= 0 && ok != tc.ok {
					t.Errorf("%d sequences ok, want %d", ok, tc.ok)
				}
			})
		})
	}
}
