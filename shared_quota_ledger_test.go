package readrecovery

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// quotaBucket is an Azure OpenAI deployment in memory: a token bucket of
// burst requests refilled at rate per second, every answer carrying
// x-ratelimit-remaining-requests (when remaining) and
// x-ratelimit-reset-requests at 0, the time until the bucket is full
// again, as OpenAI defines it (when reset),
// and a 429 carrying "Retry-After" in whole seconds to the next token.
type quotaBucket struct {
	rate             float64
	burst            float64
	remaining, reset bool

	mu        sync.Mutex
	tokens    float64
	last      time.Time
	throttled int
	arrivals  []time.Time // of the 429s
}

func (b *quotaBucket) RoundTrip(req *http.Request) (*http.Response, error) {
	time.Sleep(10 * time.Millisecond) // half the round trip
	b.mu.Lock()
	now := time.Now()
	if b.last.IsZero() {
		b.tokens, b.last = b.burst, now
	}
	b.tokens = math.Min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
	b.last = now
	status := http.StatusOK
	if b.tokens >= 1 {
		b.tokens--
	} else {
		status = http.StatusTooManyRequests
		b.throttled++
		b.arrivals = append(b.arrivals, now)
	}
	next := time.Duration((1 - b.tokens + math.Floor(b.tokens)) / b.rate * float64(time.Second))
	full := time.Duration((b.burst - b.tokens) / b.rate * float64(time.Second))
	left := int(b.tokens)
	b.mu.Unlock()
	h := http.Header{}
	if b.remaining {
		h.Set("x-ratelimit-remaining-requests", strconv.Itoa(left))
	}
	if b.reset && left == 0 {
		h.Set("x-ratelimit-reset-requests", full.String())
	}
	if status == http.StatusTooManyRequests {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(next.Seconds()))))
	}
	time.Sleep(10 * time.Millisecond)
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// TestQuotaWindowLedger is scenario (h) as a ledger (docs/policy.md:
// quota-headers): 20 sequences of 5 reads, at once, against a deployment
// of 10 requests a second (burst 10) behind a 20 ms round trip, with one
// Transport sharing restrictions by AzureScope. Without the headers, and
// with the remaining quota alone, the quota's end is found by a 429 whose
// restriction stops the sequences that used their window; with the reset
// headers too, the room holds every request until the quota renews: no
// 429 at all, and every read completes.
func TestQuotaWindowLedger(t *testing.T) {
	readsOf := map[string]int{}
	for _, tc := range []struct {
		name             string
		remaining, reset bool
	}{
		{"no headers", false, false},
		{"remaining", true, false},
		{"remaining and reset", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &quotaBucket{rate: 10, burst: 10, remaining: tc.remaining, reset: tc.reset}
				rt := New(srv, WithSharedRestrictions(AzureScope))
				var wg sync.WaitGroup
				var mu sync.Mutex
				reads, done := 0, 0
				stops := map[string]int{}
				start := time.Now()
				for i := range 20 {
					wg.Go(func() {
						b := NewBudget(fmt.Sprint("s", i))
						ctx := WithBudget(context.Background(), b)
						ok := 0
						for p := range 5 {
							req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
								fmt.Sprintf("https://res.openai.azure.com/openai/deployments/d/models/%d?api-version=2024-10-21", p), nil)
							resp, err := rt.RoundTrip(req)
							if err != nil {
								break
							}
							drain(resp)
							if resp.StatusCode != http.StatusOK {
								break
							}
							ok++
						}
						mu.Lock()
						stops[string(b.Report().Stop)+" "+b.Report().StopDetail]++
						reads += ok
						if ok == 5 {
							done++
						}
						mu.Unlock()
					})
				}
				wg.Wait()
				t.Logf("%s: %d reads, %d of 20 sequences complete, %d 429s in %v; stops %v", tc.name, reads, done, srv.throttled, time.Since(start), stops)
				readsOf[tc.name] = reads
				if tc.reset {
					if srv.throttled != 0 || done != 20 {
						t.Errorf("with the reset headers: %d 429s and %d of 20 complete, want none and 20", srv.throttled, done)
					}
				}
			})
		})
	}
	if with, without := readsOf["remaining and reset"], readsOf["no headers"]; with < without {
		t.Errorf("with the quota headers %d reads completed, without them %d: want no fewer", with, without)
	}
}
