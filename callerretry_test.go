package readrecovery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// putURL is the blob every caller-retry test writes (the fake's blob.put).
const putURL = "http://acct.blob.example/c/b"

// callerPut is one attempt of a caller's retry loop: a new PUT of the same
// blob, marked WithCallerRetry when marked.
func callerPut(t *testing.T, ctx context.Context, marked bool) *http.Request {
	t.Helper()
	if marked {
		ctx = WithCallerRetry(ctx)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, putURL, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-ms-blob-type", "BlockBlob")
	return req
}

// callerLedger renders the fake's ledger as "status@offset" from start.
func callerLedger(srv *fakeserver.Server, start time.Time) string {
	var b strings.Builder
	for i, r := range srv.Requests() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d@%v", r.Status, r.Arrived.Sub(start))
	}
	return b.String()
}

// TestCallerRetryHeldAtNotBefore (docs/policy.md: caller-retry): a marked
// PUT without a Budget meets 429 "Retry-After: 2". readrecovery does not
// re-send it (the fake saw one request when the 429 came back) and does
// not enter it in the repeat guard; the caller's next attempt, sent at
// once, is held until exactly T (+2 s), then reaches the fake and ends
// ok. The control without the mark: the same 429 enters the guard, and
// the caller's next attempt of the same request is refused before the
// network.
func TestCallerRetryHeldAtNotBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakeserver.New()
		defer srv.Close()
		srv.Script().Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)), fakeserver.Nth(1))
		rt := New(srv.Transport(), WithSharedRestrictions(nil))
		start := time.Now()
		resp, err := rt.RoundTrip(callerPut(t, context.Background(), true))
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("first attempt: %v %v, want the 429 back", resp, err)
		}
		drain(resp)
		if n := len(srv.Requests()); n != 1 || time.Since(start) != 0 {
			t.Fatalf("after the 429 the fake saw %d requests, %v later: readrecovery re-sent or waited", n, time.Since(start))
		}
		if n := rt.guard.len(); n != 0 {
			t.Fatalf("the repeat guard holds %d entries, want none for a caller-retried request", n)
		}
		resp, err = rt.RoundTrip(callerPut(t, context.Background(), true))
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("second attempt: %v %v, want 201", resp, err)
		}
		drain(resp)
		if got, want := callerLedger(srv, start), "429@0s 201@2s"; got != want {
			t.Fatalf("the fake saw %s, want %s", got, want)
		}

		// The control: no mark.
		srv2 := fakeserver.New()
		defer srv2.Close()
		srv2.Script().Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)), fakeserver.Nth(1))
		rt2 := New(srv2.Transport(), WithSharedRestrictions(nil))
		req := callerPut(t, context.Background(), false)
		resp, err = rt2.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("control: %v %v", resp, err)
		}
		drain(resp)
		req.Body, _ = req.GetBody()
		if _, err := rt2.RoundTrip(req); !errors.Is(err, ErrRequestRefused) {
			t.Fatalf("control's next attempt: %v, want it refused by the repeat guard", err)
		}
		if n := len(srv2.Requests()); n != 1 {
			t.Fatalf("control: the fake saw %d requests, want 1", n)
		}
		// With the mark, the very same request object goes again.
		srv3 := fakeserver.New()
		defer srv3.Close()
		srv3.Script().Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)), fakeserver.Nth(1))
		rt3 := New(srv3.Transport(), WithSharedRestrictions(nil))
		start = time.Now()
		req = callerPut(t, context.Background(), true)
		resp, _ = rt3.RoundTrip(req)
		drain(resp)
		req.Body, _ = req.GetBody()
		if resp, err := rt3.RoundTrip(req); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("marked, same request again: %v %v, want 201", resp, err)
		}
		if got, want := callerLedger(srv3, start), "429@0s 201@2s"; got != want {
			t.Fatalf("marked, same request: the fake saw %s, want %s", got, want)
		}
	})
}

// TestCallerRetryRestrictsBudgets: a caller-retried request's 429 records
// the scope's restriction as any other: a sequence's GET sent after it
// waits until T (a window with trigger shared-restriction).
func TestCallerRetryRestrictsBudgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakeserver.New()
		defer srv.Close()
		srv.PutBlob("c", "b", []byte("x"))
		srv.Script().Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(3)), fakeserver.Always())
		rt := New(srv.Transport(), WithSharedRestrictions(nil))
		start := time.Now()
		resp, err := rt.RoundTrip(callerPut(t, context.Background(), true))
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		b := NewBudget("reader")
		req, _ := http.NewRequestWithContext(WithBudget(context.Background(), b), http.MethodGet, putURL, nil)
		resp, err = rt.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %v %v", resp, err)
		}
		drain(resp)
		if got, want := callerLedger(srv, start), "429@0s 200@3s"; got != want {
			t.Fatalf("the fake saw %s, want %s", got, want)
		}
		if r := b.Report(); r.Window == nil || r.Window.Trigger != "shared-restriction" {
			t.Fatalf("report %v, want a shared-restriction window", r)
		}
	})
}

// TestCallerRetryRoomSteps (docs/policy.md: scope-room): five marked PUTs
// start at once against a scope not heard from, behind a 20 ms round trip.
// The room lets one go, then grows by one per 2xx: they arrive at 10 ms
// (one), 30 ms (two) and 50 ms (two). Without the mark, requests without a
// Budget are not held: all five arrive at 10 ms.
func TestCallerRetryRoomSteps(t *testing.T) {
	for _, tc := range []struct {
		marked bool
		want   string
	}{
		{true, "201@10ms 201@30ms 201@30ms 201@50ms 201@50ms"},
		{false, "201@10ms 201@10ms 201@10ms 201@10ms 201@10ms"},
	} {
		t.Run(fmt.Sprint("marked=", tc.marked), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := fakeserver.New()
				defer srv.Close()
				rt := New(roundTripDelay{srv.Transport(), 20 * time.Millisecond}, WithSharedRestrictions(nil))
				start := time.Now()
				var wg sync.WaitGroup
				for range 5 {
					wg.Go(func() {
						resp, err := rt.RoundTrip(callerPut(t, context.Background(), tc.marked))
						if err != nil {
							t.Error(err)
							return
						}
						drain(resp)
					})
				}
				wg.Wait()
				if got := callerLedger(srv, start); got != tc.want {
					t.Fatalf("the fake saw %s, want %s", got, tc.want)
				}
			})
		})
	}
}

// TestCallerRetryCeiling: a restriction of exactly the ceiling (30 s) is
// waited; the next attempt's place, one pace step beyond it, is refused at
// once (restricted, ErrSequenceStopped, the 429's status and request ID)
// without reaching the network; never shortened.
func TestCallerRetryCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakeserver.New()
		defer srv.Close()
		srv.Script().Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(30)), fakeserver.Nth(1))
		rt := New(srv.Transport(), WithSharedRestrictions(nil))
		start := time.Now()
		resp, err := rt.RoundTrip(callerPut(t, context.Background(), true))
		if err != nil {
			t.Fatal(err)
		}
		id := srv.Requests()[0].RequestID
		drain(resp)
		var wg sync.WaitGroup
		var first error
		wg.Go(func() {
			resp, err := rt.RoundTrip(callerPut(t, context.Background(), true))
			if err == nil {
				drain(resp)
			}
			first = err
		})
		synctest.Wait() // the first attempt holds ticket 0, due at T
		_, err = rt.RoundTrip(callerPut(t, context.Background(), true))
		var se *StopError
		if !errors.As(err, &se) || se.Reason != StopRestricted || !errors.Is(err, ErrSequenceStopped) ||
			se.StatusCode != 429 || se.RequestID != id || time.Since(start) != 0 {
			t.Fatalf("second waiter: %v after %v, want restricted at once with the 429's evidence", err, time.Since(start))
		}
		wg.Wait()
		if first != nil {
			t.Fatalf("first waiter: %v", first)
		}
		if got, want := callerLedger(srv, start), "429@0s 201@30s"; got != want {
			t.Fatalf("the fake saw %s, want %s", got, want)
		}
	})
}

// quotaZero is a base whose answers all say no quota remains (without a
// reset) and whose second request takes d to answer.
type quotaZero struct {
	base http.RoundTripper
	d    time.Duration
	mu   sync.Mutex
	n    int
}

func (b *quotaZero) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.n++
	slow := b.n == 2
	b.mu.Unlock()
	if slow {
		time.Sleep(b.d)
	}
	resp, err := b.base.RoundTrip(req)
	if resp != nil {
		resp.Header.Set("x-ratelimit-remaining-requests", "0")
	}
	return resp, err
}

// TestCallerRetryRoomCeiling: a marked request that finds no room in its
// scope (the server said no quota remains, and one request is in flight
// for 40 s) waits for it at most the ceiling, then is refused
// (restricted) without reaching the network; its context ending ends the
// wait with the context's error. (Without the server's word the room
// holds no one that long: TestSlowServerNoHarm.)
func TestCallerRetryRoomCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakeserver.New()
		defer srv.Close()
		rt := New(&quotaZero{base: srv.Transport(), d: 40 * time.Second}, WithSharedRestrictions(nil))
		start := time.Now()
		resp, err := rt.RoundTrip(callerPut(t, context.Background(), true))
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		var wg sync.WaitGroup
		wg.Go(func() {
			resp, err := rt.RoundTrip(callerPut(t, context.Background(), true))
			if err != nil {
				t.Error(err)
				return
			}
			drain(resp)
		})
		synctest.Wait() // it holds the room's one place
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := rt.RoundTrip(callerPut(t, ctx, true)); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 5*time.Second {
			t.Fatalf("canceled waiter: %v after %v, want the context's error after 5s", err, time.Since(start))
		}
		_, err = rt.RoundTrip(callerPut(t, context.Background(), true))
		var se *StopError
		if !errors.As(err, &se) || se.Reason != StopRestricted || se.Detail != detailCallerRoom || time.Since(start) != 35*time.Second {
			t.Fatalf("waiter: %v after %v, want restricted after the 30 s ceiling (at 35s)", err, time.Since(start))
		}
		wg.Wait()
		if got, want := callerLedger(srv, start), "201@0s 201@40s"; got != want {
			t.Fatalf("the fake saw %s, want %s", got, want)
		}
	})
}

// TestWithCallerRetryNil: like context.WithValue, a nil parent panics.
func TestWithCallerRetryNil(t *testing.T) {
	var nilCtx context.Context
	defer func() {
		if r := recover(); r != "cannot create context from nil parent" {
			t.Fatalf("WithCallerRetry(nil) panicked with %v", r)
		}
	}()
	WithCallerRetry(nilCtx)
}
