package readrecovery

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The reproductions of "no harm without the server's word" (SPEC
// R98-R101; docs/policy.md: scope-room, room-acceptance, quota-headers):
// each ran against the Transport before the rules it names and failed.

// slowServer answers every request 200 after latency, and never 429.
func slowServer(latency time.Duration) *script {
	return newScript(func(int, *http.Request) (*http.Response, error) {
		time.Sleep(latency)
		return reply(http.StatusOK)(nil), nil
	})
}

// burst sends n concurrent GETs through rt, each with ctxOf(i) as its
// context, and returns their errors and when the last one ended.
func burst(t *testing.T, rt http.RoundTripper, n int, ctxOf func(i int) context.Context) ([]error, time.Time) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := rt.RoundTrip(get(t, ctxOf(i), "https://slow.example/chat"))
			errs[i] = err
			drain(resp)
		})
	}
	wg.Wait()
	return errs, time.Now()
}

// TestSlowServerNoHarm (R98): a server that never throttles and answers
// after 35 s or 5 s sees the concurrency it would see without shared
// restrictions. Before the acceptance rule the room started at 1 and grew
// only with answers: 15 of 16 caller-retried chats were refused after the
// 30 s ceiling, and at 5 s the last one ended after 25 s.
func TestSlowServerNoHarm(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		latency time.Duration
		budget  bool
		// The burst's last request reaches the server by firstWave
		// after the first; the burst ends by done.
		firstWave, done time.Duration
	}{
		{"16 caller-retried chats of 35s", 16, 35 * time.Second, false, time.Second, 36 * time.Second},
		{"16 caller-retried chats of 5s", 16, 5 * time.Second, false, 500 * time.Millisecond, 5500 * time.Millisecond},
		{"8 budget GETs of 35s", 8, 35 * time.Second, true, time.Second, 36 * time.Second},
		{"64 budget GETs of 1s", 64, time.Second, true, 250 * time.Millisecond, 1250 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := slowServer(tc.latency)
				rt := New(srv, WithSharedRestrictions(nil))
				start := time.Now()
				errs, end := burst(t, rt, tc.n, func(int) context.Context {
					if tc.budget {
						return WithBudget(context.Background(), NewBudget("read"))
					}
					return WithCallerRetry(context.Background())
				})
				for i, err := range errs {
					if err != nil {
						t.Errorf("request %d: %v (stop reason %q), want it sent", i, err, stopReason(err))
					}
				}
				hits := srv.Hits()
				if len(hits) != tc.n {
					t.Fatalf("the server saw %d requests, want %d", len(hits), tc.n)
				}
				if last := hits[len(hits)-1].At.Sub(start); last > tc.firstWave {
					t.Errorf("the last request reached the server %v after the first, want within %v", last, tc.firstWave)
				}
				if d := end.Sub(start); d > tc.done {
					t.Errorf("the burst ended after %v, want by %v", d, tc.done)
				}
			})
		})
	}
}

// TestPanickingBaseGivesPermitBack (R99): a base that panics once (the
// caller recovers) leaves its scope as it found it: the next five
// requests, with a Budget and through a caller's retry alike, reach the
// server. Before, the room kept the panicked request in flight for the
// Transport's life and refused all five.
func TestPanickingBaseGivesPermitBack(t *testing.T) {
	for _, mode := range []string{"budget", "caller-retry"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(func(n int, _ *http.Request) (*http.Response, error) {
					if n == 1 {
						panic("base exploded")
					}
					time.Sleep(10 * time.Millisecond)
					return reply(http.StatusOK)(nil), nil
				})
				rt := New(srv, WithSharedRestrictions(nil))
				ctxOf := func() context.Context {
					if mode == "budget" {
						return WithBudget(context.Background(), NewBudget("read"))
					}
					return WithCallerRetry(context.Background())
				}
				func() {
					defer func() {
						if recover() == nil {
							t.Fatal("the base's panic did not reach the caller")
						}
					}()
					rt.RoundTrip(get(t, ctxOf(), "https://panic.example/x"))
				}()
				for i := range 5 {
					resp, err := rt.RoundTrip(get(t, ctxOf(), "https://panic.example/x"))
					if err != nil || resp.StatusCode != http.StatusOK {
						t.Fatalf("request %d after the panic: %v %v, want 200", i, resp, err)
					}
					drain(resp)
				}
				if n := len(srv.Hits()); n != 6 {
					t.Fatalf("the server saw %d requests, want 6", n)
				}
			})
		})
	}
}

// nilBase answers its first request with (nil, nil), then 200.
type nilBase struct {
	mu sync.Mutex
	n  int
}

func (b *nilBase) RoundTrip(*http.Request) (*http.Response, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n++; b.n == 1 {
		return nil, nil
	}
	return reply(http.StatusOK)(nil), nil
}

// TestNilResponseIsAnError (R99): a base returning (nil, nil) is an error,
// as net/http's client makes it, with and without a Budget, and the scope's
// room gets its place back. Before, RoundTrip panicked on resp.StatusCode
// with a Budget and leaked the room's place.
func TestNilResponseIsAnError(t *testing.T) {
	for _, mode := range []string{"budget", "caller-retry", "plain"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &nilBase{}
				rt := New(base, WithSharedRestrictions(nil))
				ctxOf := func() context.Context {
					switch mode {
					case "budget":
						return WithBudget(context.Background(), NewBudget("read"))
					case "caller-retry":
						return WithCallerRetry(context.Background())
					}
					return context.Background()
				}
				resp, err := rt.RoundTrip(get(t, ctxOf(), "https://nil.example/x"))
				if resp != nil || !errors.Is(err, ErrNilResponse) {
					t.Fatalf("(nil, nil) from the base: %v %v, want ErrNilResponse", resp, err)
				}
				for i := range 3 {
					resp, err := rt.RoundTrip(get(t, ctxOf(), "https://nil.example/x"))
					if err != nil || resp.StatusCode != http.StatusOK {
						t.Fatalf("request %d after it: %v %v, want 200", i, resp, err)
					}
					drain(resp)
				}
			})
		})
	}
}

// TestQuotaNewsExpires (R101): one answer says 3 remain, later answers say
// nothing of the quota; an hour later 32 concurrent GETs of 1 s all go at
// once. Before, the count bound forever: they went one at a time and 16
// of 32 stopped restricted.
func TestQuotaNewsExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, _ *http.Request) (*http.Response, error) {
			if n == 1 {
				return reply(http.StatusOK, "x-ms-ratelimit-remaining-subscription-reads", "3")(nil), nil
			}
			time.Sleep(time.Second)
			return reply(http.StatusOK)(nil), nil
		})
		rt := New(srv, WithSharedRestrictions(nil))
		for range 4 {
			resp, err := rt.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("read")), "https://slow.example/x"))
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
		}
		time.Sleep(time.Hour)
		start := time.Now()
		errs, end := burst(t, rt, 32, func(int) context.Context {
			return WithBudget(context.Background(), NewBudget("read"))
		})
		for i, err := range errs {
			if err != nil {
				t.Errorf("request %d: %v, want it sent", i, err)
			}
		}
		if d := end.Sub(start); d > 1500*time.Millisecond {
			t.Fatalf("32 GETs of 1 s took %v an hour after the quota news, want ≤ 1.5 s (all at once)", d)
		}
	})
}

// TestReportTellsRoomWaits (R103): a Report counts a wait for the scope's
// room apart from a wait for the server. B finds the room full behind A's
// slow request and waits the 50 ms acceptance time for room, then meets a
// 429 of "Retry-After: 1" and waits 1 s for the server: one of each, and
// Waits counts only the server's. (Before, the Report said waits=2.)
func TestReportTellsRoomWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(
			func(*http.Request) *http.Response { time.Sleep(2 * time.Second); return reply(http.StatusOK)(nil) },
			reply(http.StatusTooManyRequests, "Retry-After", "1"),
			reply(http.StatusOK),
		))
		rt := New(srv, WithSharedRestrictions(nil))
		var wg sync.WaitGroup
		wg.Go(func() {
			resp, err := rt.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("a")), "https://room.example/a"))
			if err != nil {
				t.Error(err)
			}
			drain(resp)
		})
		synctest.Wait()
		b := NewBudget("b")
		resp, err := rt.RoundTrip(get(t, WithBudget(context.Background(), b), "https://room.example/b"))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("b: %v %v, want 200 after its one wait", resp, err)
		}
		drain(resp)
		wg.Wait()
		r := b.Report()
		if r.Requests != 2 || r.Waits != 1 || r.WaitTime != time.Second || r.RoomWaits != 1 || r.RoomWaitTime != acceptMin {
			t.Fatalf("b's report: requests=%d waits=%d (%v) room waits=%d (%v), want 2, 1 (1s), 1 (%v)", r.Requests, r.Waits, r.WaitTime, r.RoomWaits, r.RoomWaitTime, acceptMin)
		}
		if got, want := r.String(), `sequence "b": requests=2 waits=1 wait=1s room-waits=1 room-wait=50ms window=read-429/1s stop=- reads ok=1 failed=1`; got != want {
			t.Fatalf("String() = %s, want %s", got, want)
		}
	})
}
