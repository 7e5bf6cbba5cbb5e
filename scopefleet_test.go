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
