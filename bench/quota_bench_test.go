package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// Scenario (h) of issue 27: a deployment that reports its remaining quota.
// The fake over loopback keeps a TokenBucket per Azure OpenAI deployment
// (quotaRate per second, burst quotaBurst) and answers a 429 with the time
// to the next token in retry-after-ms and, rounded up to whole seconds, in
// Retry-After (as Azure OpenAI does). With header=on every answer the
// bucket decides carries x-ratelimit-remaining-requests and
// x-ratelimit-reset-requests (QuotaHeaders(QuotaOpenAI): the time until
// the bucket is full again); with header=off neither. quotaSequences
// sequences of quotaPages GETs of one deployment start at once; a
// sequence stops at its first page that ends in an error or a 429.
//
// The quota window is the time the bucket takes to refill its burst from
// empty, quotaBurst/quotaRate (500 ms): max-429s-per-window is the most
// 429s the server sent within any such span of the op (a sliding window
// over their arrivals). The target: at most 1 with header=on (rr-shared),
// and completed-seqs/op with header=on not below header=off.
//
// The fake serves no deployment routes; the pages are blobs of the fake's
// container "openai" under deployments/gpt/..., so that a request the
// bucket passes gets 200 and the path keys the bucket to deployment gpt.
const (
	quotaSequences = 20
	quotaPages     = 5
	quotaRate      = 20
	quotaBurst     = 10
	quotaWindow    = time.Second * quotaBurst / quotaRate
)

// quotaContenders are the contenders of scenario (h): readrecovery with
// shared restrictions (the one that reads the headers) and, for the
// record, azcore (which does not).
var quotaContenders = []string{"rr-shared", "azcore"}

// BenchmarkQuotaHeaders is scenario (h). It reports, per op, the most 429s
// within one quota window (max-429s-per-window, the largest of the ops),
// the sequences completed (completed-seqs/op), the 429s (429s/op) and
// the requests the server saw (server-reqs/op).
func BenchmarkQuotaHeaders(b *testing.B) {
	for _, header := range []string{"on", "off"} {
		b.Run("header="+header, func(b *testing.B) {
			for _, spec := range specsNamed(b, quotaContenders) {
				b.Run("impl="+spec.name, func(b *testing.B) {
					var o quotaOutcome
					for b.Loop() {
						r := runQuotaScenario(b, spec, header == "on")
						o.completed += r.completed
						o.throttled += r.throttled
						o.requests += r.requests
						o.perWindow = max(o.perWindow, r.perWindow)
					}
					n := float64(b.N)
					b.ReportMetric(float64(o.perWindow), "max-429s-per-window")
					b.ReportMetric(float64(o.completed)/n, "completed-seqs/op")
					b.ReportMetric(float64(o.throttled)/n, "429s/op")
					b.ReportMetric(float64(o.requests)/n, "server-reqs/op")
				})
			}
		})
	}
}

// quotaOutcome is what one op of scenario (h) did.
type quotaOutcome struct {
	completed, throttled, requests, perWindow int
}

// runQuotaScenario runs one op of scenario (h) for spec.
func runQuotaScenario(tb testing.TB, spec implSpec, header bool) quotaOutcome {
	tb.Helper()
	srv := fakeserver.New()
	defer srv.Close()
	for p := range quotaPages {
		srv.PutBlob("openai", fmt.Sprintf("deployments/gpt/pages/%d", p), []byte(`{"ok":true}`))
	}
	opts := []fakeserver.RuleOption{fakeserver.TokenBucket(quotaRate, quotaBurst), fakeserver.PerDeployment()}
	if header {
		opts = append(opts, fakeserver.QuotaHeaders(fakeserver.QuotaOpenAI))
	}
	srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterRemainingMs()), opts...)
	base, err := srv.Start()
	if err != nil {
		tb.Fatal(err)
	}
	u, _ := url.Parse(base)
	im := spec.make(armBase(u.Host))
	defer im.close()
	do := recovering(spec, im)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var o quotaOutcome
	for range quotaSequences {
		wg.Go(func() {
			ctx := im.sequence(context.Background())
			for p := range quotaPages {
				st, err := do(ctx, fmt.Sprintf("http://res.openai.azure.com/openai/deployments/gpt/pages/%d", p))
				if err != nil || st != http.StatusOK {
					return
				}
			}
			mu.Lock()
			o.completed++
			mu.Unlock()
		})
	}
	wg.Wait()
	var at []time.Time
	for _, r := range srv.Requests() {
		o.requests++
		if r.Status == http.StatusTooManyRequests {
			at = append(at, r.Arrived)
			if !strings.HasPrefix(r.Path, "/openai/deployments/gpt/") {
				tb.Errorf("a 429 for %s", r.Path)
			}
		}
	}
	o.throttled = len(at)
	o.perWindow = maxInWindow(at, quotaWindow)
	return o
}

// maxInWindow is the most of the times at that lie within any span [t,
// t+w) (at in any order).
func maxInWindow(at []time.Time, w time.Duration) int {
	at = slices.Clone(at)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most, lo := 0, 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

func TestMaxInWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(ns ...int) []time.Time {
		var out []time.Time
		for _, n := range ns {
			out = append(out, t0.Add(time.Duration(n)*time.Millisecond))
		}
		return out
	}
	for _, tc := range []struct {
		at   []time.Time
		want int
	}{
		{nil, 0},
		{ms(0), 1},
		{ms(0, 499), 2},
		{ms(0, 500), 1}, // [t, t+w): 500 ms apart are two windows
		{ms(900, 0, 100, 450, 1000, 1001), 3},
		{ms(0, 600, 1200, 1800), 1},
	} {
		if got := maxInWindow(tc.at, 500*time.Millisecond); got != tc.want {
			t.Errorf("maxInWindow(%v) = %d, want %d", tc.at, got, tc.want)
		}
	}
}
