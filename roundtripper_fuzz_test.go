package readrecovery

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/readrecovery/readrecovery/internal/httprule"
)

// FuzzRecovery429 drives one 429 with an arbitrary Retry-After through the
// transport, for each method, and checks the policy's invariants from what
// the server saw: a mutation is never re-sent (get-only-resend), at most one re-send
// (get-only-resend), never sooner than the parsed delay and never after more than 30 s
// (stop-not-shorten), and an oversized, overlong or unrepresentable field is never
// waited (fail-closed-oversized, stop-not-shorten).
func FuzzRecovery429(f *testing.F) {
	for _, v := range []string{"0", "1", "30", "31", "", "abc", "-1", "1.5", "Sat, 01 Jan 2000 00:00:10 GMT",
		"Saturday, 01-Jan-00 00:00:05 GMT", "Sat Jan  1 00:00:07 2000", "99999999999999999999999", " 2 "} {
		f.Add(uint8(0), v, false)
		f.Add(uint8(1), v, true)
	}
	methods := []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete, http.MethodHead}
	f.Fuzz(func(t *testing.T, m uint8, retryAfter string, queue bool) {
		method := methods[int(m)%len(methods)]
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(429, "Retry-After", retryAfter), reply(200)))
			b := NewBudget("fuzz")
			ctx := WithBudget(context.Background(), b)
			if queue {
				ctx = WithQueueRetry(ctx)
			}
			req := mutation(t, ctx, method, base+"/x", "body")
			if method == http.MethodGet || method == http.MethodHead {
				req = get(t, ctx, base+"/x")
				req.Method = method
			}
			// What the parser makes of the field, at the bubble's start.
			ra, timing, _ := ParseRetryAfter(http.Header{"Retry-After": {retryAfter}}, time.Now())
			resp, err := New(srv).RoundTrip(req)
			if err == nil {
				drain(resp)
			}
			hits := srv.Hits()
			switch {
			case len(hits) > 2:
				t.Fatalf("%d requests for one 429", len(hits))
			case len(hits) == 2:
				if method != http.MethodGet && !(queue && httprule.IsMutation(method)) {
					t.Fatalf("%s re-sent (queue=%v)", method, queue)
				}
				if timing == nil || ra.Kind == RetryAfterOverlong || ra.Kind == RetryAfterOversized {
					t.Fatalf("re-sent after a %s Retry-After", ra.Kind)
				}
				gap := hits[1].At.Sub(hits[0].At)
				if want := time.Duration(timing.ServerDelaySeconds) * time.Second; gap != want {
					t.Fatalf("re-sent after %v, want exactly %v", gap, want)
				}
				if gap > MaxServerWait {
					t.Fatalf("waited %v", gap)
				}
			}
			if r := b.Report(); r.Waits > 1 || r.Requests != len(hits) {
				t.Fatalf("report: %d waits, %d requests; server saw %d", r.Waits, r.Requests, len(hits))
			}
		})
	})
}
