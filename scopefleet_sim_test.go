package readrecovery

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// latency holds each request d before its base sees it: a round trip of
// the fleet simulation's server.
type latency struct {
	base http.RoundTripper
	d    time.Duration
}

func (l latency) RoundTrip(r *http.Request) (*http.Response, error) {
	time.Sleep(l.d)
	return l.base.RoundTrip(r)
}

// fleetSim is issue 37's fleet in one process, in fake time: procs
// members (a Transport each, one directory store) read 160 sequences of
// two GETs between them, all at once, from one account behind the fake's
// TokenBucket(20, 10) with 5 ms of latency. It returns the 429s the fake
// answered, the sequences completed and the time from the start to the
// last sequence's end.
func fleetSim(t *testing.T, procs int) (throttled, completed int, wall time.Duration) {
	s := newDirStore(t)
	synctest.Test(t, func(t *testing.T) {
		srv := fakeserver.New()
		defer srv.Close()
		srv.Script().Add(fakeserver.RouteAny, fakeserver.Throttle(fakeserver.RetryAfterRemaining()), fakeserver.TokenBucket(20, 10))
		for m := range procs {
			for _, n := range []string{"a", "b"} {
				srv.PutBlob("c", fmt.Sprintf("m%d-%s", m, n), []byte("x"))
			}
		}
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for m := range procs {
			rt := New(latency{srv.Transport(), 5 * time.Millisecond}, WithSharedRestrictions(nil), WithScopeStore(s))
			for i := range 160 / procs {
				wg.Go(func() {
					ctx := WithBudget(context.Background(), NewBudget(fmt.Sprint("m", m, " s", i)))
					ok := true
					for _, n := range []string{"a", "b"} {
						resp, err := rt.RoundTrip(get(t, ctx, fmt.Sprintf("http://acct.example/c/m%d-%s", m, n)))
						if err != nil {
							ok = false
							break
						}
						drain(resp)
						if resp.StatusCode != http.StatusOK {
							ok = false
							break
						}
					}
					mu.Lock()
					defer mu.Unlock()
					if ok {
						completed++
					}
					wall = max(wall, time.Since(start))
				})
			}
		}
		wg.Wait()
		for _, e := range srv.Requests() {
			if e.Status == http.StatusTooManyRequests {
				throttled++
			}
		}
	})
	return throttled, completed, wall
}

// TestFleetNeverSettlesLow (R106; docs/policy.md: scope-store, "The
// card's rate"): four members doing one member's work, in fake time,
// finish within 1.5× its time in each of 6 runs. Before a member wrote
// its rate over its part of what the fleet sent, within [0.7, 1] of the
// rate it was paced by, the members' guesses swung the card (84/s, then
// 7/s against the bucket's 20/s) and a low one held the fleet for 30 s:
// 4 of 12 runs took 29-38 s against one member's 17 s. The runs differ
// only in how the store's I/O interleaves with the members.
func TestFleetNeverSettlesLow(t *testing.T) {
	throttled, completed, one := fleetSim(t, 1)
	t.Logf("one member: %d 429s, %d completed, %v", throttled, completed, one)
	for run := range 6 {
		throttled, completed, wall := fleetSim(t, 4)
		t.Logf("run %d, four members: %d 429s, %d completed, %v (%.2f×)", run, throttled, completed, wall, wall.Seconds()/one.Seconds())
		if wall > one*3/2 {
			t.Errorf("run %d: four members took %v, over 1.5× one member's %v", run, wall, one)
		}
	}
}

// TestMemberRecordWritesSent (R106): a member record says what the
// process sent of the scope since its previous exchange, requests per
// second: 20/s for 2.5 s (a request each 50 ms) reads 20/s, within the
// exchange's jitter (±10 % of its second: one request either way); the
// scope's first exchange, before anything went, says 0.
func TestMemberRecordWritesSent(t *testing.T) {
	const scope = "https://acct.example"
	s := newDirStore(t)
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(http.StatusOK)))
		rt := New(srv, WithSharedRestrictions(nil), WithScopeStore(s))
		sent := func() float64 {
			v, err := s.Exchange(context.Background(), scope, ScopeCard{}, ScopeMember{})
			if err != nil || len(v.Members) != 1 {
				t.Fatalf("view %+v, %v: want one member", v, err)
			}
			return v.Members[0].Sent
		}
		for i := range 50 {
			resp, err := rt.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("s")), scope+"/c/b"))
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
			synctest.Wait()
			if i == 0 {
				if got := sent(); got != 0 {
					t.Fatalf("the first exchange's record: sent %v, want 0", got)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got := sent(); got < 19/1.1 || got > 21/0.9 {
			t.Fatalf("record: sent %.2f/s, want 20/s within the exchange's jitter", got)
		}
		t.Logf("record: sent %.2f/s", sent())
	})
}

// TestFleetRestrictionSlowsAcceptance (docs/policy.md: room-acceptance):
// a not-before the store's card brings (another process met the 429)
// makes the scope's room, the one it has and one made later, take the
// longest acceptance time until a 429 of its own; a 429 of its own does
// not, nor does nothing.
func TestFleetRestrictionSlowsAcceptance(t *testing.T) {
	tab := newRestrictions(nil)
	tab.mu.Lock()
	had := tab.addLocked("had-room")
	had.room = newRoom()
	tab.mu.Unlock()
	store := &waitPlan{trigger: triggerShared, status: 429, fromStore: true}
	own := &waitPlan{trigger: triggerShared, status: 429}
	tab.record("had-room", t0, t0.Add(time.Second), store, nil)
	tab.record("no-entry", t0, t0.Add(time.Second), store, nil)
	tab.record("own-429", t0, t0.Add(time.Second), own, nil)
	tab.mu.Lock()
	defer tab.mu.Unlock()
	if r := tab.m["had-room"].room; !r.fleet || r.acceptAfter() != acceptMax {
		t.Errorf("a room the scope had: fleet %v, acceptance %v; want true, %v", r.fleet, r.acceptAfter(), acceptMax)
	}
	if e := tab.m["no-entry"]; !e.fleet {
		t.Errorf("a scope without a room: fleet %v, want true (its room takes it when made)", e.fleet)
	}
	if e := tab.m["own-429"]; e.fleet {
		t.Errorf("a 429 of its own: fleet %v, want false", e.fleet)
	}
}
