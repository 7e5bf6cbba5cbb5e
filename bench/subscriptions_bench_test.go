package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// Scenario (g) of issue 27: two subscriptions on one Resource Manager
// host. The fake over loopback keeps its bucket per subscription and
// throttles subscription aaa only (TokenBucket(20/s, burst 5), 429 with the
// whole seconds to the next token); every request goes to
// management.azure.com, dialled to the fake. 20 sequences of 5 GETs on aaa
// and 20 on bbb start at once. Throttling aaa must delay no request of
// bbb: with AzureScope (rr-azure) bbb's scope is its own subscription, with
// the host as the scope (rr-shared) aaa's restrictions hold bbb too.
const (
	subsSequences = 20
	subsPages     = 5
	subsDelayed   = 500 * time.Millisecond // a bbb request slower than this waited for something (a restriction is ≥ 1 s)
)

// armBase is a contender's base: every dial goes to the fake at addr.
func armBase(addr string) *http.Transport {
	t := newBase(concurrentConns)
	var d net.Dialer
	t.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	return t
}

// BenchmarkSubscriptions is scenario (g). It reports, per op, the requests
// of subscription bbb that took longer than 500 ms (other-delayed-reqs/op:
// the target is 0), the slowest of them (other-max-ms), the 429s the
// server sent (all of them aaa's) and the requests it saw.
func BenchmarkSubscriptions(b *testing.B) {
	for _, spec := range specsInRunOrder(b) {
		b.Run("impl="+spec.name, func(b *testing.B) {
			var delayed, throttled, requests float64
			var slowest time.Duration
			for b.Loop() {
				srv := fakeserver.New()
				srv.Script().Add(fakeserver.RouteAny, fakeserver.Throttle(fakeserver.RetryAfterRemaining()),
					fakeserver.TokenBucket(20, 5), fakeserver.PerSubscription(), fakeserver.MatchPath("/subscriptions/aaa/"))
				base, err := srv.Start()
				if err != nil {
					b.Fatal(err)
				}
				u, _ := url.Parse(base)
				im := spec.make(armBase(u.Host))
				do := recovering(spec, im)
				var mu sync.Mutex
				var wg sync.WaitGroup
				for _, sub := range []string{"aaa", "bbb"} {
					for s := range subsSequences {
						wg.Go(func() {
							ctx := im.sequence(context.Background())
							for p := range subsPages {
								t0 := time.Now()
								st, err := do(ctx, fmt.Sprintf("http://management.azure.com/subscriptions/%s/resourceGroups/g%d/providers/p/r%d?api-version=2024-01-01", sub, s, p))
								d := time.Since(t0)
								if sub == "bbb" {
									mu.Lock()
									if d > subsDelayed {
										delayed++
									}
									slowest = max(slowest, d)
									mu.Unlock()
								}
								if err != nil || st == http.StatusTooManyRequests {
									break
								}
							}
						})
					}
				}
				wg.Wait()
				for _, r := range srv.Requests() {
					requests++
					if r.Status == http.StatusTooManyRequests {
						throttled++
						if !strings.Contains(r.Path, "/aaa/") {
							b.Errorf("a 429 for %s: only aaa is throttled", r.Path)
						}
					}
				}
				im.close()
				srv.Close()
			}
			n := float64(b.N)
			b.ReportMetric(delayed/n, "other-delayed-reqs/op")
			b.ReportMetric(float64(slowest.Milliseconds()), "other-max-ms")
			b.ReportMetric(throttled/n, "429s/op")
			b.ReportMetric(requests/n, "server-reqs/op")
		})
	}
}
