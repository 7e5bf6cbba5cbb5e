package readrecovery

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/readrecovery/readrecovery/otelattr"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestFairShare (R106; docs/policy.md: scope-store) is max-min fairness
// as a step table: a rate and the members' demands in, one member's
// share out.
func TestFairShare(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name    string
		rate    float64
		demands []float64
		own     int
		want    float64
	}{
		{"alone: all of it", 20, []float64{inf}, 0, 20},
		{"alone, asking less: what it asks", 20, []float64{3}, 0, 3},
		{"four saturated: a quarter each", 20, []float64{inf, 100, inf, 50}, 1, 5},
		{"an idle member gets what it asks", 20, []float64{1, inf, inf}, 0, 1},
		{"the rest split among the others", 20, []float64{1, inf, inf}, 2, 9.5},
		{"a member asking less than an even split keeps its rest for others", 20, []float64{2, 4, inf, inf}, 3, 7},
		{"every demand under the rate: each its own", 20, []float64{2, 4, 6}, 1, 4},
		{"a dead member's record is gone: three split it", 20, []float64{inf, inf, inf}, 0, 20.0 / 3},
		{"nothing asked: nothing given", 20, []float64{0, inf}, 0, 0},
	} {
		if got := fairShare(tc.rate, tc.demands, tc.own); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: fairShare(%v, %v, %d) = %v, want %v", tc.name, tc.rate, tc.demands, tc.own, got, tc.want)
		}
	}
}

// storeAt is a store holding a card learnt at learnt (rate 20/s, burst
// 10) and the member records of others, each saturated (demand 100/s),
// live for lease after the store's now.
func storeAt(t *testing.T, s ScopeStore, scope string, learnt time.Time, others int, lease time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Exchange(ctx, scope, ScopeCard{Rate: 20, Burst: 10, Learnt: learnt.UTC()}, ScopeMember{}); err != nil {
		t.Fatal(err)
	}
	for i := range others {
		m := ScopeMember{ID: fmt.Sprintf("other-%d", i), Demand: 100, Share: 5, Lease: time.Now().Add(lease).UTC()}
		if _, err := s.Exchange(ctx, scope, ScopeCard{}, m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStoreWarmStart (R106, R107; docs/policy.md: scope-store): a process
// starting on a scope whose card is fresh paces its first requests at its
// fair share of the card's rate, without a 429 of its own: 8 concurrent
// reads of a server that answers 200 reach it one share's spacing apart.
// A stale card, an expired member record or no card: a cold start, all 8
// at once (nothing is paced that no fresh 429 taught).
func TestStoreWarmStart(t *testing.T) {
	const scope = "https://acct.example"
	for _, tc := range []struct {
		name    string
		learnt  time.Duration // the card's Learnt, before the process starts
		others  int           // live saturated members besides it
		lease   time.Duration // their records' lease from the start
		after   time.Duration // the process starts this long after the card
		spacing time.Duration // between its requests' arrivals
	}{
		{"fresh card, three others: a quarter of 20/s", 5 * time.Second, 3, memberLease, 0, 200 * time.Millisecond},
		{"fresh card, alone: all of 20/s", 5 * time.Second, 0, 0, 0, 50 * time.Millisecond},
		{"fresh card, the others' leases ran out: alone", 5 * time.Second, 3, memberLease, memberLease + time.Millisecond, 50 * time.Millisecond},
		{"a card learnt 2 minutes ago: cold", 2 * time.Minute, 3, memberLease, 0, 0},
		{"a card just past fresh: cold", cardFresh + time.Millisecond, 3, memberLease, 0, 0},
		{"a card learnt just fresh: warm", cardFresh, 3, memberLease, 0, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newDirStore(t)
			synctest.Test(t, func(t *testing.T) {
				storeAt(t, s, scope, time.Now().Add(-tc.learnt+tc.after), tc.others, tc.lease)
				time.Sleep(tc.after)
				srv := newScript(sequenceOf(reply(http.StatusOK)))
				rt := New(srv, WithSharedRestrictions(nil), WithScopeStore(s))
				start := time.Now()
				errs := burstTo(t, rt, 8, scope+"/blob")
				for i, err := range errs {
					if err != nil {
						t.Fatalf("read %d: %v", i, err)
					}
				}
				var got []time.Duration
				for _, h := range srv.Hits() {
					got = append(got, h.At.Sub(start))
				}
				var want []time.Duration
				for k := range 8 {
					want = append(want, time.Duration(k)*tc.spacing)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("the server saw the reads at %v, want %v", got, want)
				}
			})
		})
	}
}

// burstTo sends n concurrent Budget reads of url through rt.
func burstTo(t *testing.T, rt http.RoundTripper, n int, url string) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := rt.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("w")), url))
			errs[i] = err
			drain(resp)
		})
	}
	wg.Wait()
	return errs
}

// TestStorePublishesFleetRate (R106): a rate a process learnt while it
// had a quarter of the fleet's goes to the card as the scope's: four
// times it, learnt when it was learnt (in the store's clock), and a
// process alone writes what it learnt.
func TestStorePublishesFleetRate(t *testing.T) {
	const scope = "https://acct.example"
	for _, tc := range []struct {
		name      string
		part      float64
		rate      float64
		wantRate  float64
		wantBurst float64
	}{
		{"a quarter of the fleet's", 0.25, 5, 20, 8},
		{"alone", 0, 5, 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newDirStore(t)
			synctest.Test(t, func(t *testing.T) {
				st := skewedStore{s, 2 * time.Second}
				tab := newRestrictions(nil)
				tab.share(st, time.Now)
				now := time.Now()
				tab.sharing.look(context.Background(), scope, now)
				tab.sharing.mu.Lock()
				tab.sharing.looks[scope].part = tc.part
				tab.sharing.mu.Unlock()
				tab.sharing.publishRate(scope, now, tc.rate, 2)
				synctest.Wait()
				v, err := s.Exchange(context.Background(), scope, ScopeCard{}, ScopeMember{})
				if err != nil {
					t.Fatal(err)
				}
				if c := v.Card; c.Rate != tc.wantRate || c.Burst != tc.wantBurst || !c.Learnt.Equal(now.Truncate(time.Millisecond)) {
					t.Fatalf("card %+v, want rate %v, burst %v, learnt %v", c, tc.wantRate, tc.wantBurst, now)
				}
			})
		})
	}
}

// TestScopeStateShowsShare (R103, R108): a scope paced at its fleet share
// shows it (Share 5 of the card's 20/s, with three others), with the time
// the store last answered (StoreView); the store-age gauge counts the
// seconds since (2 s later: 2). A card past fresh shows no share; a
// store that never answered shows no view and no age.
func TestScopeStateShowsShare(t *testing.T) {
	const scope = "https://acct.example"
	for _, tc := range []struct {
		name      string
		store     func(t *testing.T) ScopeStore
		share     float64
		view, age bool
	}{
		{"fresh card", newDirStore, 5, true, true},
		{"a hung store", func(*testing.T) ScopeStore { return hungStore{} }, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.store(t)
			synctest.Test(t, func(t *testing.T) {
				if _, ok := s.(hungStore); !ok {
					storeAt(t, s, scope, time.Now().Add(-5*time.Second), 3, time.Hour)
				}
				reader := sdkmetric.NewManualReader()
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
				rt := New(newScript(sequenceOf(reply(http.StatusOK))), WithSharedRestrictions(nil), WithScopeStore(s), WithMeterProvider(mp))
				start := time.Now()
				if errs := burstTo(t, rt, 1, scope+"/blob"); errs[0] != nil {
					t.Fatal(errs[0])
				}
				time.Sleep(2 * time.Second)
				st := rt.Scopes().Snapshot()
				if len(st) != 1 || st[0].Share != tc.share || st[0].StoreView.Equal(start) != tc.view {
					t.Fatalf("Snapshot() = %+v, want share %v, store view at the start: %v", st, tc.share, tc.view)
				}
				var rm metricdata.ResourceMetrics
				if err := reader.Collect(context.Background(), &rm); err != nil {
					t.Fatal(err)
				}
				age, found := 0.0, false
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						if g, ok := m.Data.(metricdata.Gauge[float64]); ok && m.Name == otelattr.ScopeStoreAgeMetric {
							age, found = g.DataPoints[0].Value, true
						}
					}
				}
				if found != tc.age || (tc.age && age != 2) {
					t.Fatalf("%s: %v (reported: %v), want 2 s: %v", otelattr.ScopeStoreAgeMetric, age, found, tc.age)
				}
				time.Sleep(storeDeadline) // the hung store's look gives up
			})
		})
	}
}

// TestFleetSharesConverge (R106, F4; docs/policy.md: scope-store): four
// processes (a table each, one directory store) saturate one scope whose
// card holds a fresh 20/s. Each gets its share, 5/s within ±15 %, over
// seconds 2 to 10; a fifth that joins at 10 s gets 4/s (≥ 80 % of its
// share) over its first 3 s, and the four theirs; when the fifth stops at
// 16 s, its share returns to the four within 4 exchanges (its lease, 3 s,
// and one exchange): 5/s again over seconds 21 to 26.
func TestFleetSharesConverge(t *testing.T) {
	const scope = "https://acct.example"
	s := newDirStore(t)
	synctest.Test(t, func(t *testing.T) {
		storeAt(t, s, scope, time.Now(), 0, 0)
		srv := newScript(sequenceOf(reply(http.StatusOK)))
		start := time.Now()
		var wg sync.WaitGroup
		member := func(i int, from, until time.Duration) {
			time.Sleep(from)
			rt := New(srv, WithSharedRestrictions(nil), WithScopeStore(s))
			for range 4 {
				wg.Go(func() {
					for time.Since(start) < until {
						resp, err := rt.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("f")), fmt.Sprintf("%s/m%d/blob", scope, i)))
						if err != nil {
							t.Errorf("member %d: %v", i, err)
							return
						}
						drain(resp)
					}
				})
			}
		}
		for i := range 4 {
			member(i, 0, 26*time.Second)
		}
		wg.Go(func() { member(4, 10*time.Second, 16*time.Second) })
		wg.Wait()
		rate := func(i int, from, until time.Duration) float64 {
			n := 0
			for _, h := range srv.Hits() {
				at := h.At.Sub(start)
				if h.URL == fmt.Sprintf("%s/m%d/blob", scope, i) && at >= from && at < until {
					n++
				}
			}
			return float64(n) / (until - from).Seconds()
		}
		within := func(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }
		for i := range 5 {
			t.Logf("member %d: %.2f/s over 2-10 s, %.2f/s over 10-13 s, %.2f/s over 12-16 s, %.2f/s over 21-26 s", i,
				rate(i, 2*time.Second, 10*time.Second), rate(i, 10*time.Second, 13*time.Second), rate(i, 12*time.Second, 16*time.Second), rate(i, 21*time.Second, 26*time.Second))
		}
		for i := range 4 {
			if got := rate(i, 2*time.Second, 10*time.Second); !within(got, 5, 0.15) {
				t.Errorf("member %d: %.2f/s over seconds 2-10, want 5/s ±15 %%", i, got)
			}
			if got := rate(i, 21*time.Second, 26*time.Second); !within(got, 5, 0.15) {
				t.Errorf("member %d: %.2f/s over seconds 21-26 (the fifth gone), want 5/s ±15 %%", i, got)
			}
		}
		if got := rate(4, 10*time.Second, 13*time.Second); got < 0.8*4 {
			t.Errorf("the fifth: %.2f/s over its first 3 s, want at least 80 %% of 4/s", got)
		}
		total := 0.0
		for i := range 5 {
			total += rate(i, 12*time.Second, 16*time.Second)
		}
		if !within(total, 20, 0.15) {
			t.Errorf("five members together: %.2f/s over seconds 12-16, want the card's 20/s ±15 %%", total)
		}
	})
}

// countingStore counts the exchanges that reach its store: reads (a zero
// card) and writes apart.
type countingStore struct {
	inner         ScopeStore
	mu            sync.Mutex
	reads, writes int
}

func (c *countingStore) Exchange(ctx context.Context, scope string, card ScopeCard, m ScopeMember) (ScopeView, error) {
	c.mu.Lock()
	if card.isZero() {
		c.reads++
	} else {
		c.writes++
	}
	c.mu.Unlock()
	return c.inner.Exchange(ctx, scope, card, m)
}

// TestStoreTraffic (R105, F7): a process sending 50 requests a second to
// one scope for 20 s exchanges with the store once a second (jittered
// ±10 %, so 18 to 23 timer looks, and the first look), and a 429 adds one
// write: nothing per request.
func TestStoreTraffic(t *testing.T) {
	s := &countingStore{inner: newDirStore(t)}
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			if n == 500 {
				return reply(http.StatusTooManyRequests, "Retry-After", "1")(req), nil
			}
			return reply(http.StatusOK)(req), nil
		})
		rt := New(srv, WithSharedRestrictions(nil), WithScopeStore(s))
		start := time.Now()
		for time.Since(start) < 20*time.Second {
			resp, err := rt.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("t")), "https://acct.example/blob"))
			if err == nil {
				drain(resp)
			}
			time.Sleep(20 * time.Millisecond)
		}
		synctest.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		if n := len(srv.Hits()); n < 900 {
			t.Fatalf("the server saw %d requests, want about 950 (a second lost to the 429)", n)
		}
		t.Logf("%d requests; %d reads, %d writes", len(srv.Hits()), s.reads, s.writes)
		if s.reads < 19 || s.reads > 24 || s.writes != 1 {
			t.Fatalf("%d reads and %d writes in 20 s, want 19 to 24 reads (the first look, one a second ±10 %%) and 1 write (the 429)", s.reads, s.writes)
		}
	})
}

// TestShareOutlivesRelease (R106; docs/policy.md: scope-store): a fresh
// card's share paces the scope while it is fresh, not only the release
// it started: a second burst of 8, 2 s after the first ended, reaches
// the server 50 ms apart too (20/s, alone); once the card is a minute
// old, a burst goes at once.
func TestShareOutlivesRelease(t *testing.T) {
	const scope = "https://acct.example"
	s := newDirStore(t)
	synctest.Test(t, func(t *testing.T) {
		storeAt(t, s, scope, time.Now(), 0, 0)
		srv := newScript(sequenceOf(reply(http.StatusOK)))
		rt := New(srv, WithSharedRestrictions(nil), WithScopeStore(s))
		t0 := time.Now()
		spacing := func(from time.Duration) []time.Duration {
			time.Sleep(time.Until(t0.Add(from)))
			n := len(srv.Hits())
			for i, err := range burstTo(t, rt, 8, scope+"/blob") {
				if err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
			}
			var got []time.Duration
			hits := srv.Hits()[n:]
			for _, h := range hits[1:] {
				got = append(got, h.At.Sub(hits[0].At))
			}
			return got
		}
		want := []time.Duration{50, 100, 150, 200, 250, 300, 350}
		for i := range want {
			want[i] *= time.Millisecond
		}
		for _, at := range []time.Duration{0, 2 * time.Second, 30 * time.Second} {
			if got := spacing(at); !slices.Equal(got, want) {
				t.Fatalf("the burst at +%v reached the server at %v after its first, want %v", at, got, want)
			}
		}
		if got := spacing(cardFresh + time.Second); !slices.Equal(got, make([]time.Duration, 7)) {
			t.Fatalf("the burst after the card went stale reached the server at %v after its first, want all at once", got)
		}
	})
}

// TestStoreNotBeforeRoundsUp (R109): a store keeps times to the
// millisecond; a not-before written to it is rounded up, never down (a
// card 0.3 ms short let another process send inside the restriction).
func TestStoreNotBeforeRoundsUp(t *testing.T) {
	s := newDirStore(t)
	synctest.Test(t, func(t *testing.T) {
		tab := newRestrictions(nil)
		tab.share(s, time.Now)
		until := time.Now().Add(2*time.Second + 345678*time.Nanosecond)
		tab.sharing.publish("https://acct.example", until, "rid")
		synctest.Wait()
		v, err := s.Exchange(context.Background(), "https://acct.example", ScopeCard{}, ScopeMember{})
		if err != nil {
			t.Fatal(err)
		}
		if want := until.Add(time.Millisecond).Truncate(time.Millisecond); !v.Card.NotBefore.Equal(want) {
			t.Fatalf("the card holds %v, want %v (rounded up from %v)", v.Card.NotBefore, want, until)
		}
	})
}

// TestMemberRecordDemand (docs/policy.md: scope-store) is a member
// record's demand as a step table: at fixed times, the scope's asks
// since the row before in, the record's demand out. It is measured over
// measureOver at least: an exchange sooner (a 429's, at once) says the
// last measure again, not one ask over a millisecond (1,000/s).
func TestMemberRecordDemand(t *testing.T) {
	const scope = "https://acct.example"
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	tab := newRestrictions(nil)
	tab.share(nowStore{}, time.Now)
	sh := tab.sharing
	sh.looks[scope] = &storeLook{since: t0, demand: maxDemand, share: 5}
	for _, r := range []struct {
		name   string
		at     time.Duration
		asks   int
		demand float64
	}{
		{"before measureOver: all it can get", 400 * time.Millisecond, 6, maxDemand},
		{"the first measure: 6+8 asks over 1 s", time.Second, 8, 14},
		{"a 429's exchange 1 ms on: the last measure again", time.Second + time.Millisecond, 1, 14},
		{"200 ms on: still the last measure", 1200 * time.Millisecond, 3, 14},
		{"the next measure: 1+3+1 asks over 1 s", 2 * time.Second, 1, 5},
		{"idle for 2 s: 0", 4 * time.Second, 0, 0},
	} {
		sh.looks[scope].asks += r.asks
		at := t0.Add(r.at)
		m := sh.member(scope, at, time.Second)
		if want := (ScopeMember{ID: sh.id, Demand: r.demand, Share: 5, Lease: at.Add(time.Second + memberLease)}); m != want {
			t.Fatalf("%s: record %+v, want %+v", r.name, m, want)
		}
	}
}
