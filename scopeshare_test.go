package readrecovery

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/readrecovery/readrecovery/internal/clock"
)

// skewedStore is a store whose clock is skew ahead of this process's (a
// Redis or Blob service elsewhere): its times are its own, as the
// process sees them through ScopeView.Now.
type skewedStore struct {
	inner ScopeStore
	skew  time.Duration
}

func (s skewedStore) Exchange(ctx context.Context, scope string, card ScopeCard, m ScopeMember) (ScopeView, error) {
	card = card.shifted(-s.skew)
	if !m.Lease.IsZero() {
		m.Lease = m.Lease.Add(-s.skew)
	}
	v, err := s.inner.Exchange(ctx, scope, card, m)
	v.Now = v.Now.Add(s.skew)
	v.Card = v.Card.shifted(s.skew)
	for i := range v.Members {
		v.Members[i].Lease = v.Members[i].Lease.Add(s.skew)
	}
	return v, err
}

// hungStore never answers before its caller's ctx ends.
type hungStore struct{}

func (hungStore) Exchange(ctx context.Context, _ string, _ ScopeCard, _ ScopeMember) (ScopeView, error) {
	<-ctx.Done()
	return ScopeView{}, ctx.Err()
}

// skewClock is a process's clock d ahead of the others'.
type skewClock struct {
	clock.Real
	d time.Duration
}

func (c skewClock) Now() time.Time { return time.Now().Add(c.d) }

// TestStoreSharesNotBefore (R104, R105, R107, R109; docs/policy.md:
// scope-store): process A (a Transport with a table of its own) meets a
// 429 "Retry-After: 4" (no Budget); process B, started after, sends a
// Budget read of the same scope through the same store: its first look
// at the card holds it until exactly A's not-before T, as its
// sequence's window naming A's 429. A store clock 2 s ahead or behind
// both processes changes nothing. Without the store, B's read goes at
// once (before, a process started after another met "Retry-After: 4"
// sent its first request inside the restriction). B's clock 2 s ahead of
// A's or behind it changes nothing either: times cross through the
// store's clock.
func TestStoreSharesNotBefore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) ScopeStore
		want  time.Duration
	}{
		{"directory store", newDirStore, 4 * time.Second},
		{"store clock 2 s ahead", func(t *testing.T) ScopeStore { return skewedStore{newDirStore(t), 2 * time.Second} }, 4 * time.Second},
		{"store clock 2 s behind", func(t *testing.T) ScopeStore { return skewedStore{newDirStore(t), -2 * time.Second} }, 4 * time.Second},
		{"no store", nil, 0},
	} {
		for _, skew := range []time.Duration{0, 2 * time.Second, -2 * time.Second} {
			if skew != 0 && tc.store == nil {
				continue
			}
			runStoreShares(t, tc.name, tc.store, tc.want, skew)
		}
	}
}

// runStoreShares is one row of TestStoreSharesNotBefore, B's clock skew
// ahead of A's (R109: B still sends nothing before A's not-before).
func runStoreShares(t *testing.T, name string, store func(t *testing.T) ScopeStore, want, skew time.Duration) {
	tc := struct {
		name  string
		store func(t *testing.T) ScopeStore
		want  time.Duration
	}{fmt.Sprintf("%s, B's clock %+v", name, skew), store, want}
	{
		t.Run(tc.name, func(t *testing.T) {
			// The store's directory is made outside the bubble: removed
			// only once synctest.Test has seen every background exchange
			// of the bubble end.
			var s ScopeStore
			if tc.store != nil {
				s = tc.store(t)
			}
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(sequenceOf(reply(http.StatusTooManyRequests, "Retry-After", "4", "x-ms-request-id", "rid-a"), reply(http.StatusOK)))
				optsA, optsB := []Option{WithSharedRestrictions(nil)}, []Option{WithSharedRestrictions(nil), withClock(skewClock{d: skew})}
				if s != nil {
					optsA, optsB = append(optsA, WithScopeStore(s)), append(optsB, WithScopeStore(s))
				}
				a, b := New(srv, optsA...), New(srv, optsB...)
				start := time.Now()
				resp, err := a.RoundTrip(get(t, context.Background(), "https://acct.example/a"))
				if err != nil || resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("A: %v %v, want its 429", resp, err)
				}
				drain(resp)
				synctest.Wait() // A's not-before is in the store
				bud := NewBudget("b")
				resp, err = b.RoundTrip(get(t, WithBudget(context.Background(), bud), "https://acct.example/b"))
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("B: %v %v", resp, err)
				}
				drain(resp)
				if got := srv.Hits()[1].At.Sub(start); got != tc.want {
					t.Fatalf("B's read reached the server %v after A's 429, want %v", got, tc.want)
				}
				if tc.want > 0 {
					w := bud.Report().Window
					if w == nil || w.Trigger != "shared-restriction" || bud.Report().WaitLog[0].RequestID != "rid-a" {
						t.Fatalf("B's window %+v, want shared-restriction naming rid-a", w)
					}
				}
			})
		})
	}
}

// newDirStore is a DirScopeStore in a new directory.
func newDirStore(t *testing.T) ScopeStore {
	t.Helper()
	s, err := DirScopeStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStoreNeverHoldsLong (R105, R108): a store that hangs holds a scope's
// first request for the first look's bound (200 ms) at the most, and the
// later ones not at all; the table says once that the store fails.
func TestStoreNeverHoldsLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(http.StatusOK)))
		var logged bytes.Buffer
		rt := New(srv, WithSharedRestrictions(nil), WithScopeStore(hungStore{}),
			WithLogger(slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{ReplaceAttr: dropTime}))))
		start := time.Now()
		for range 3 {
			resp, err := rt.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("s")), "https://acct.example/x"))
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
		}
		hits := srv.Hits()
		if got := []time.Duration{hits[0].At.Sub(start), hits[1].At.Sub(start), hits[2].At.Sub(start)}; got[0] != storeFirstLook || got[1] != storeFirstLook || got[2] != storeFirstLook {
			t.Fatalf("the requests reached the server at %v, want all at %v (the first look's bound, once)", got, storeFirstLook)
		}
		time.Sleep(storeDeadline) // the look's exchange gives up
		synctest.Wait()
		if n := strings.Count(logged.String(), `"event":"store-failing"`); n != 1 {
			t.Fatalf("%d store-failing records, want 1:\n%s", n, logged.String())
		}
	})
}

// TestStoreLooksAgain (R105): a process already at work on a scope learns
// another's not-before at its next look, a second after its last one, in
// the background: B's request at +1.2 s starts the look and goes (the
// request path never waits on the store after the first look); B's
// request at +1.3 s waits for A's T (+0.5 s + 4 s).
func TestStoreLooksAgain(t *testing.T) {
	s := newDirStore(t) // outside the bubble: removed after its exchanges end
	synctest.Test(t, func(t *testing.T) {
		_, a, b := twoProcesses(s)
		start := time.Now()
		read := func(path string) time.Duration {
			resp, err := b.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("b")), "https://acct.example"+path))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("B %s: %v %v", path, resp, err)
			}
			drain(resp)
			return time.Since(start)
		}
		read("/b0") // B's first look: nothing
		time.Sleep(500 * time.Millisecond)
		resp, _ := a.RoundTrip(get(t, context.Background(), "https://acct.example/a"))
		drain(resp)
		synctest.Wait() // A's not-before is in the store: T = +4.5 s
		time.Sleep(700 * time.Millisecond)
		if got := read("/b1"); got != 1200*time.Millisecond {
			t.Fatalf("B's request at +1.2 s went at %v, want at once (its look runs in the background)", got)
		}
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		if got := read("/b2"); got != 4500*time.Millisecond {
			t.Fatalf("B's request at +1.3 s went at %v, want at A's T, +4.5 s", got)
		}
	})
}

// secondStore is a store whose clock reads to the second, as Blob
// Storage's Date header does (ScopeView.Resolution a second).
type secondStore struct{ inner ScopeStore }

func (s secondStore) Exchange(ctx context.Context, scope string, card ScopeCard, m ScopeMember) (ScopeView, error) {
	v, err := s.inner.Exchange(ctx, scope, card, m)
	v.Now, v.Resolution = v.Now.Truncate(time.Second), time.Second
	return v, err
}

// TestStoreClockToTheSecond (R109): through a store whose clock reads to
// the second, a process that met "Retry-After: 4" at +0.7 s (T = +4.7 s)
// writes its not-before converted at the offset's highest (+5 s in the
// store's clock), and a process looking at +1.2 s converts it back at the
// lowest: it sends at +5.2 s, never before T (its later looks find the
// same card: no news, so their other fractions move nothing).
// (Converted through the round trip's middle, as before, the second
// process sent at +4.3 s, inside the restriction: a Blob store's fleet
// was early by up to the Date's fraction.)
func TestStoreClockToTheSecond(t *testing.T) {
	s := secondStore{newDirStore(t)}
	synctest.Test(t, func(t *testing.T) {
		srv, a, b := twoProcesses(s)
		start := time.Now()
		time.Sleep(700 * time.Millisecond)
		resp, _ := a.RoundTrip(get(t, context.Background(), "https://acct.example/a"))
		drain(resp)
		synctest.Wait() // A's not-before is in the store
		// A, which wrote the card, reads again at +1 s and at later looks:
		// the card it wrote is no news to it, its own T stays.
		var wg sync.WaitGroup
		var aAt time.Time
		time.Sleep(300 * time.Millisecond)
		wg.Go(func() {
			resp, err := a.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("a")), "https://acct.example/a2"))
			if err != nil {
				t.Error(err)
				return
			}
			drain(resp)
			aAt = time.Now()
		})
		time.Sleep(200 * time.Millisecond)
		resp, err := b.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("b")), "https://acct.example/b"))
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		hits := srv.Hits()
		if got := hits[len(hits)-1].At.Sub(start); got != 5200*time.Millisecond {
			t.Fatalf("B's read reached the server at +%v, want +5.2 s (T is +4.7 s: never before it; B's later looks read the same card, no news)", got)
		}
		wg.Wait()
		if got := aAt.Sub(start); got != 4700*time.Millisecond {
			t.Fatalf("A's read reached the server at +%v, want +4.7 s, its own T (the card it wrote is no news to it)", got)
		}
	})
}

// TestStoreOffsetNarrows (R109): through a store whose clock reads to the
// second, one exchange bounds the offset within a second; exchanges at
// other fractions of a second narrow the bounds together (+0.2 s, then
// +1.7 s: within half a second), and bounds that cross (the store's clock
// was set 10 s on) start again from the new exchange.
func TestStoreOffsetNarrows(t *testing.T) {
	st := &steppedStore{inner: newDirStore(t)}
	synctest.Test(t, func(t *testing.T) {
		tab := newRestrictions(nil)
		tab.share(st, time.Now)
		sh := tab.sharing
		bounds := func() time.Duration {
			sh.mu.Lock()
			defer sh.mu.Unlock()
			return sh.offset - sh.below
		}
		time.Sleep(200 * time.Millisecond)
		sh.exchange("https://acct.example", ScopeCard{}, nil)
		if got := bounds(); got != time.Second {
			t.Fatalf("after one exchange the offset is known within %v, want 1s", got)
		}
		time.Sleep(1500 * time.Millisecond)
		sh.exchange("https://acct.example", ScopeCard{}, nil)
		if got := bounds(); got != 500*time.Millisecond {
			t.Fatalf("after two exchanges the offset is known within %v, want 500ms", got)
		}
		st.step = 10 * time.Second
		sh.exchange("https://acct.example", ScopeCard{}, nil)
		sh.mu.Lock()
		lo := sh.below
		sh.mu.Unlock()
		if got := bounds(); got != time.Second || lo < 9*time.Second {
			t.Fatalf("after the store's clock was set on: within %v from %v, want 1s from about 10 s", got, lo)
		}
	})
}

// steppedStore reads its clock to the second, step ahead of the process's.
type steppedStore struct {
	inner ScopeStore
	step  time.Duration
}

func (s *steppedStore) Exchange(ctx context.Context, scope string, card ScopeCard, m ScopeMember) (ScopeView, error) {
	v, err := s.inner.Exchange(ctx, scope, card, m)
	v.Now, v.Resolution = v.Now.Add(s.step).Truncate(time.Second), time.Second
	return v, err
}

// twoProcesses is a server that answers "Retry-After: 4" to /a and 200
// to any other path, and two processes' Transports on store s (a table
// each).
func twoProcesses(s ScopeStore) (*script, *Transport, *Transport) {
	srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
		if strings.HasSuffix(req.URL.Path, "/a") {
			return reply(http.StatusTooManyRequests, "Retry-After", "4")(req), nil
		}
		return reply(http.StatusOK)(req), nil
	})
	return srv, New(srv, WithSharedRestrictions(nil), WithScopeStore(s)), New(srv, WithSharedRestrictions(nil), WithScopeStore(s))
}

// nowStore answers every exchange at once with an empty card: the table's
// bookkeeping of its looks, apart from any store.
type nowStore struct{}

func (nowStore) Exchange(context.Context, string, ScopeCard, ScopeMember) (ScopeView, error) {
	return ScopeView{Now: time.Now()}, nil
}

// A table's looks stay bounded (R97: nothing grows with the scopes a
// process ever met): at MaxSharedScopes looks, a new scope's first look
// forgets the scopes idle for a minute, and keeps the others (one asked
// 30 s ago); the next sweep waits for twice the looks kept.
func TestStoreLooksForgetIdleScopes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var table restrictions
		table.share(nowStore{}, time.Now)
		sh := table.sharing
		ctx := context.Background()
		for i := range MaxSharedScopes - 1 {
			sh.look(ctx, fmt.Sprintf("s%d", i), time.Now())
		}
		time.Sleep(30 * time.Second)
		sh.look(ctx, "busy", time.Now())
		time.Sleep(30 * time.Second)
		synctest.Wait()
		count := func() int {
			sh.mu.Lock()
			defer sh.mu.Unlock()
			return len(sh.looks)
		}
		if got := count(); got != MaxSharedScopes {
			t.Fatalf("%d looks, want %d", got, MaxSharedScopes)
		}
		sh.look(ctx, "new", time.Now())
		synctest.Wait()
		sh.mu.Lock()
		_, busy := sh.looks["busy"]
		_, idle := sh.looks["s0"]
		sweepAt := sh.sweepAt
		sh.mu.Unlock()
		if got := count(); got != 2 || !busy || idle || sweepAt != 2 {
			t.Fatalf("%d looks (busy kept %v, s0 kept %v), next sweep at %d; want 2: busy and new, next at 2", got, busy, idle, sweepAt)
		}
	})
}
