package readrecovery

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// TestAzureScopeSubscriptions is scenario (g) as a ledger (docs/policy.md:
// azure-scopes): two subscriptions on one Resource Manager host, the
// fake's bucket kept per subscription. Subscription aaa's 429
// ("Retry-After: 1") holds aaa's other sequences until T; with AzureScope
// it delays no request of subscription bbb, which arrive one round trip
// apart; with the host as the scope, bbb's wait for aaa's T.
func TestAzureScopeSubscriptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scope   func(*http.Request) string
		delayed bool
	}{
		{"azure-scope", AzureScope, false},
		{"host-scope", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := fakeserver.New()
				defer srv.Close()
				srv.Script().Add(fakeserver.RouteAny, fakeserver.Throttle(fakeserver.RetryAfterRemaining()),
					fakeserver.TokenBucket(1, 1), fakeserver.PerSubscription(), fakeserver.MatchPath("/subscriptions/aaa/"))
				rt := New(roundTripDelay{srv.Transport(), 20 * time.Millisecond}, WithSharedRestrictions(tc.scope))
				get := func(name, sub string) int {
					b := NewBudget(name)
					req, _ := http.NewRequestWithContext(WithBudget(context.Background(), b), http.MethodGet,
						"https://management.azure.com/subscriptions/"+sub+"/resourceGroups?api-version=2024-01-01", nil)
					resp, err := rt.RoundTrip(req)
					if err != nil {
						t.Errorf("%s: %v", name, err)
						return 0
					}
					drain(resp)
					return resp.StatusCode
				}
				get("a1", "aaa") // takes aaa's one token
				done := make(chan struct{})
				go func() { get("a2", "aaa"); close(done) }() // 429, restricts aaa's scope until T, re-sent at T
				time.Sleep(30 * time.Millisecond)             // a2's 429 came back
				throttledAt := srv.Requests()[1].Arrived
				for i := range 5 {
					if st := get("b", "bbb"); st == http.StatusTooManyRequests {
						t.Errorf("b%d: 429 from bbb's own bucket", i)
					}
				}
				<-done
				var bs []time.Time
				for _, r := range srv.Requests() {
					if strings.HasPrefix(r.Path, "/subscriptions/bbb/") {
						bs = append(bs, r.Arrived)
					}
				}
				if len(bs) != 5 {
					t.Fatalf("bbb: %d requests, want 5", len(bs))
				}
				first := bs[0].Sub(throttledAt)
				if delayed := first >= time.Second; delayed != tc.delayed {
					t.Errorf("bbb's first request arrived %v after aaa's 429: delayed %v, want %v", first, delayed, tc.delayed)
				}
				if !tc.delayed {
					for i := 1; i < len(bs); i++ {
						if gap := bs[i].Sub(bs[i-1]); gap != 20*time.Millisecond {
							t.Errorf("bbb request %d came %v after the one before, want one round trip (20ms)", i+1, gap)
						}
					}
				}
			})
		})
	}
}
