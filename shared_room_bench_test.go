package readrecovery

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkRoundTripShared is BenchmarkRoundTripPassThrough/budget with
// shared restrictions off and on (the room, the restriction table, the
// quota headers read): the own cost per request that shared restrictions
// add when nothing is throttled.
func BenchmarkRoundTripShared(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "https://acct.blob.core.windows.net/c/blob", nil)
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"off", nil},
		{"on", []Option{WithSharedRestrictions(nil)}},
		{"on-azure-scope", []Option{WithSharedRestrictions(AzureScope)}},
		// F7: a store configured (one that answers at once: its exchanges
		// run in the background, one a second per scope).
		{"on-store", []Option{WithSharedRestrictions(nil), WithScopeStore(instantStore{})}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rt := New(newOK(), tc.opts...)
			var bud *Budget
			var r *http.Request
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if i%MaxSequenceRequests == 0 {
					bud = NewBudget("bench")
					r = req.WithContext(WithBudget(context.Background(), bud))
				}
				i++
				rt.RoundTrip(r)
			}
		})
	}
}

// instantStore answers every exchange at once with an empty view.
type instantStore struct{}

func (instantStore) Exchange(context.Context, string, ScopeCard, ScopeMember) (ScopeView, error) {
	return ScopeView{Now: time.Now()}, nil
}

// BenchmarkAdmitWhileLearning (R97): one scope's take while another scope
// learns its pace from paced 429s ending cycles of 4,096 2xx each (the
// learner's bisection over them), against the same take with nothing
// learning. Learning runs outside the table's lock, so the other scope's
// admission costs the same (issue 36: about 1.8 ms per paced 429 under
// the lock every scope shares, before). p999-ns and max-ns are the
// other scope's slowest takes: a learner under the lock shows there.
func BenchmarkAdmitWhileLearning(b *testing.B) {
	for _, learning := range []bool{false, true} {
		name := "idle"
		if learning {
			name = "other-scope-learning"
		}
		b.Run(name, func(b *testing.B) {
			tab := newRestrictions(nil)
			tab.record("busy", t0, t0.Add(s1), sharedPlan("r"), nil)
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				now := t0.Add(s1)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if !learning {
						runtime.Gosched()
						continue
					}
					// A cycle of 4,096 paced 2xx (made outside the lock),
					// then its paced 429.
					tab.record("learner", now, now.Add(time.Second), sharedPlan("l"), nil)
					tab.mu.Lock()
					since := tab.m["learner"].r.until
					tab.mu.Unlock()
					p := pace{interval: 4 * time.Millisecond, mode: paceRamp, burst: 50, since: since}
					for i := range 4096 {
						p.succeeded(since.Add(time.Duration(i) * 4 * time.Millisecond))
					}
					// The 429 after the last 2xx (16.4 s of them), a 1 s
					// penalty, of the ticket that went last: the learner
					// bisects over the 4,096.
					at := since.Add(4096 * 4 * time.Millisecond)
					tab.mu.Lock()
					r := tab.m["learner"].r
					r.pace = p
					r.issued, r.done, r.goneAt, r.base, r.baseK = 4097, 4096, at, at, 4096
					gen := r.gen
					tab.mu.Unlock()
					tab.record("learner", at, at.Add(time.Second), sharedPlan("l"), &place{scope: "learner", gen: gen, k: 4096})
					now = at.Add(time.Hour)
				}
			}()
			lat := make([]time.Duration, 0, 1<<20)
			b.ReportAllocs()
			for b.Loop() {
				st := time.Now()
				tab.take("other", t0, nil)
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(st))
				}
			}
			close(stop)
			<-done
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)*999/1000]), "p999-ns")
				b.ReportMetric(float64(lat[len(lat)-1]), "max-ns")
			}
		})
	}
}

// BenchmarkSweepManyScopes (R97: nothing under the lock grows with the
// scope count): a table holding n restricted scopes whose ends pass one
// at a time, one per op, while another scope's requests take from it. One
// op is one take that finds one end passed. Before the table queued its
// ends, each end passed cost a pass over every scope (about n × 20 ns).
func BenchmarkSweepManyScopes(b *testing.B) {
	for _, n := range []int{64, 4000} {
		b.Run(fmt.Sprintf("scopes=%d", n), func(b *testing.B) {
			t0 := time.Unix(1_000_000, 0)
			tab := newRestrictions(nil)
			i := 0
			refill := func() {
				for k := range n {
					tab.record(fmt.Sprintf("https://s%d.example", k), t0, t0.Add(time.Duration(i+k+1)*time.Millisecond), sharedPlan("r"), nil)
				}
			}
			refill()
			b.ResetTimer()
			for b.Loop() {
				i++
				if i%n == 0 {
					b.StopTimer()
					refill()
					b.StartTimer()
				}
				tab.take("https://other.example", t0.Add(time.Duration(i)*time.Millisecond), nil)
			}
		})
	}
}

// BenchmarkRoomInFlight (R97: nothing under the lock grows with the
// requests in flight): a scope's room at its soft cap with n requests in
// flight (scenario 3 holds up to 1,000 behind a pool of 64 connections),
// answered in hand-off order; one op is one 2xx leaving and one request
// entering. With the hand-offs in a plain slice each answer moved all the
// others (about n × 32 bytes).
func BenchmarkRoomInFlight(b *testing.B) {
	for _, n := range []int{64, 1000} {
		b.Run(fmt.Sprintf("in-flight=%d", n), func(b *testing.B) {
			const soft = -64
			r := newRoom()
			r.limit = -soft
			now := at(time.Unix(1_000_000, 0))
			handed := make([]uint64, 0, n)
			for range n {
				handed = append(handed, r.enter(now, soft, nil))
			}
			for b.Loop() {
				r.leave(now, soft, handed[0], http.StatusOK, -1)
				handed = append(handed[1:], r.enter(now, soft, nil))
			}
		})
	}
}
