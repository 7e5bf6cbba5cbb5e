package readrecovery

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/otelattr"
)

// The scope table (shared.go) on its own, at fixed times.

func sharedPlan(id string) *waitPlan {
	return &waitPlan{trigger: triggerShared, requestID: id, status: 429, host: "h"}
}

// shared-restriction: the latest not-before wins; every request of the
// scope gets a ticket, due no earlier than T, paceStart apart; a held
// ticket stays its holder's; a later T moves the tickets not yet due out,
// in order; the release ends when the last ticket is due.
func TestRestrictionsPlaces(t *testing.T) {
	tab := newRestrictions(nil)
	_, _, ok := tab.take("a", t0, nil)
	assert.False(t, ok, "no restriction yet")

	gen := tab.record("a", t0, t0.Add(s2), sharedPlan("r1"), nil)
	require.Equal(t, uint64(1), gen)
	// A shorter not-before does not shorten it.
	assert.Equal(t, gen, tab.record("a", t0, t0.Add(s1), sharedPlan("r2"), nil))

	f1, p1, ok := tab.take("a", t0.Add(s1), nil)
	require.True(t, ok)
	assert.Equal(t, restricted{t: t0.Add(s2), until: t0.Add(s2), expect: t0.Add(s2), gen: gen, plan: sharedPlan("r1")}, f1)
	f2, p2, _ := tab.take("a", t0.Add(s1), nil)
	assert.Equal(t, t0.Add(s2+paceStart), f2.until)
	assert.Equal(t, place{scope: "a", gen: gen, k: 1}, p2)

	// The holder of p1 asks again before its place: the same place.
	f1b, p1b, ok := tab.take("a", t0.Add(s1), &p1)
	assert.True(t, ok)
	assert.Equal(t, f1.until, f1b.until)
	assert.Equal(t, p1, p1b)
	// At its place it may go.
	_, _, ok = tab.take("a", t0.Add(s2), &p1)
	assert.False(t, ok)

	// Another scope is not restricted.
	_, _, ok = tab.take("b", t0.Add(s1), nil)
	assert.False(t, ok)

	// A later not-before moves T out: p2 is due one place after it.
	tab.record("a", t0.Add(s2), t0.Add(s3), sharedPlan("r3"), nil)
	f2b, _, ok := tab.take("a", t0.Add(s2), &p2)
	require.True(t, ok)
	assert.Equal(t, restricted{t: t0.Add(s3), until: t0.Add(s3 + paceStart), expect: t0.Add(s3 + paceStart), gen: gen, plan: sharedPlan("r3")}, f2b)

	// After the last ticket is due the scope is forgotten.
	_, _, ok = tab.take("a", t0.Add(10*time.Second), nil)
	assert.False(t, ok)
	assert.Equal(t, 0, tab.len())

	// A new restriction is a new generation.
	assert.Equal(t, uint64(2), tab.record("a", t0.Add(10*time.Second), t0.Add(11*time.Second), sharedPlan("r4"), nil))
}

// paced-release: a ticket given back when it was the last leaves no gap.
func TestRestrictionsGiveBack(t *testing.T) {
	tab := newRestrictions(nil)
	tab.record("a", t0, t0.Add(s1), sharedPlan("r1"), nil)
	_, p1, _ := tab.take("a", t0, nil)
	_, _, _ = tab.take("a", t0, nil)
	tab.giveBack(p1) // not the last: kept
	f, _, _ := tab.take("a", t0, nil)
	assert.Equal(t, t0.Add(s1+2*paceStart), f.until)
	_, p4, _ := tab.take("a", t0, nil)
	tab.giveBack(p4)
	f, p5, _ := tab.take("a", t0, nil)
	assert.Equal(t, p4, p5, "the last ticket given back is handed out again")
	assert.Equal(t, t0.Add(s1+3*paceStart), f.until)
}

// TestPaceSteps is the step table of a release's pace (docs/policy.md:
// paced-release, release-ramp), at fixed times: each row is one event on
// the pace, in order, and the spacing, mode and burst after it (and, for a
// settled pace, its learnt spacing; twice: the spacing is half of it, the
// pace catching up). Events: "ok" a paced 2xx of a request sent at +at,
// "429" a paced 429 received at +at whose restriction lasts until +until,
// "oks" n 2xx sent every +every from +at. Times are after T = t0.
func TestPaceSteps(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	type row struct {
		name      string
		op        string
		at, until time.Duration
		n         int
		every     time.Duration
		interval  time.Duration // -1: not checked
		same      bool          // the interval is the one before the event
		mode      uint8
		burst     float64
		settled   time.Duration // checked when not 0
		twice     bool          // settled: the spacing is half the learnt one (else equal to it)
		fastest   time.Duration // checked when not 0: the fastest spacing of a ramp's 2xx
	}
	for _, tc := range []struct {
		name  string
		start pace
		rows  []row
	}{
		{"start: nothing passed before the 429 (a closed window): the slow start", newPace(t0, t0, history{}), []row{
			{name: "start", op: "", interval: paceStart, mode: paceUnknown},
			{name: "growth: each 2xx halves the spacing", op: "ok", interval: 5 * time.Millisecond, mode: paceUnknown},
			{op: "ok", interval: 2500 * time.Microsecond, mode: paceUnknown},
			{op: "ok", interval: 1250 * time.Microsecond, mode: paceUnknown},
			{op: "ok", interval: 625 * time.Microsecond, mode: paceUnknown},
			{op: "ok", interval: 312500 * time.Nanosecond, mode: paceUnknown},
			{op: "ok", interval: 156250 * time.Nanosecond, mode: paceUnknown},
			{name: "release ramp: below paceMin the release goes at once (the window has closed)", op: "ok", interval: 0, mode: paceUnknown},
			{op: "ok", interval: 0, mode: paceUnknown},
		}},
		{"halving: still closed at the new T, then the cap", newPace(t0, t0, history{}), []row{
			{name: "a 429 before any 2xx: the rate halves", op: "429", at: 0, until: s1, interval: 2 * paceStart, mode: paceUnknown},
			{op: "429", at: s1, until: s2, interval: 4 * paceStart, mode: paceUnknown},
			{op: "429", at: s2, until: s3, interval: 8 * paceStart, mode: paceUnknown},
			{op: "429", at: s3, until: 4 * s1, interval: 16 * paceStart, mode: paceUnknown},
			{op: "429", at: 4 * s1, until: 5 * s1, interval: 32 * paceStart, mode: paceUnknown},
			{op: "429", at: 5 * s1, until: 6 * s1, interval: 64 * paceStart, mode: paceUnknown},
			{name: "cap: never slower than paceMax", op: "429", at: 6 * s1, until: 7 * s1, interval: paceMax, mode: paceUnknown},
			{op: "429", at: 7 * s1, until: 8 * s1, interval: paceMax, mode: paceUnknown},
		}},
		{"start: 50 passed in a burst before the 429 at T-1s: the ramp starts at 50/s", newPace(t0.Add(-s1), t0, history{ok: 50, first: t0.Add(-s1)}), []row{
			{name: "start: 50 requests over the second from the first to T, penalty included", op: "", interval: 20 * time.Millisecond, mode: paceRamp, burst: 50},
			{name: "growth: the rate doubles in paceDouble of paced time (20 ms of 500 ms: 2^-0.04)", op: "ok", at: 0, interval: 19453098, mode: paceRamp, burst: 50},
		}},
		{"start: 100 passed over 4 s before a 429 with a 1 s penalty: 20/s, burst 20", newPace(t0.Add(-s1), t0, history{ok: 100, first: t0.Add(-5 * s1)}), []row{
			{name: "start: 100 over 5 s is 20/s; the burst is what passed beyond 20/s over the 4 s before the 429", op: "", interval: 50 * time.Millisecond, mode: paceRamp, burst: 20},
		}},
		{"settling: a ramp meets 429; the rate is what a bucket of the burst must refill at to pass every 2xx", pace{interval: 4 * time.Millisecond, mode: paceRamp, burst: 50, since: t0}, []row{
			// 250 requests sent 4 ms apart from T: the 250th (at 996 ms) is
			// the 200th beyond the burst: 200/0.996 s = 200.8/s.
			{name: "250 2xx at 250/s", op: "oks", at: 0, n: 250, every: 4 * time.Millisecond, mode: paceRamp, burst: 50, interval: -1},
			{name: "settling rate: 200.8/s (the 429 at 1 s, 1 s penalty); the penalty refilled the burst: twice the rate from the new T", op: "429", at: s1, until: s2, interval: 2490000, mode: paceSettle, burst: 50, settled: 4980000, twice: true},
			{name: "settled: the rate is held (no growth); a quarter of the burst not spent yet: still twice", op: "ok", at: s2, interval: -1, mode: paceSettle, burst: 50, settled: 4980000, twice: true},
			// 2xx sent every 2.49 ms: each spends half a spacing beyond the
			// rate, so 25 of them spend 12.5 (a quarter of 50).
			{name: "still behind after 20 at twice the rate", op: "oks", at: s2 + 2490*time.Microsecond, n: 19, every: 2490 * time.Microsecond, interval: -1, mode: paceSettle, burst: 50, settled: -1, twice: true},
			{name: "a quarter of the burst spent: the learnt rate", op: "oks", at: s2 + 20*2490*time.Microsecond, n: 10, every: 2490 * time.Microsecond, interval: -1, mode: paceSettle, burst: 50, settled: -1},
			{name: "on time: the learnt rate", op: "oks", at: s2 + 30*2490*time.Microsecond, n: 10, every: 4980 * time.Microsecond, interval: -1, mode: paceSettle, burst: 50, settled: -1},
			// The last was sent at 2 s + 74.7 ms + 44.82 ms; the next comes
			// 100 ms late (20 spacings): the bucket refilled meanwhile.
			{name: "a lag: caught up at twice the rate", op: "ok", at: s2 + 30*2490*time.Microsecond + 9*4980*time.Microsecond + 100*time.Millisecond, interval: -1, mode: paceSettle, burst: 50, settled: -1, twice: true},
			{name: "caught up a quarter of the burst (26 at twice the rate: half a spacing each), not the 20 spacings: the learnt rate", op: "oks", at: s2 + 30*2490*time.Microsecond + 9*4980*time.Microsecond + 100*time.Millisecond + 2490*time.Microsecond, n: 26, every: 2490 * time.Microsecond, interval: -1, mode: paceSettle, burst: 50, settled: -1},
			{name: "held until paceHold after its T (the 429's until, +2 s): the learnt rate still (after a lag: twice, to catch up)", op: "ok", at: s2 + paceHold - time.Millisecond, interval: -1, mode: paceSettle, burst: 50, settled: 4980000, twice: true},
			{name: "then probed: the ramp from the learnt rate (4.98 ms of 500 ms: 2^-0.00996), until a paced 429 teaches it again", op: "ok", at: s2 + paceHold, interval: 4945737, mode: paceRamp, burst: 50},
		}},
		{"settling: a penalty too short to refill the burst: the learnt rate from the new T, no faster", pace{interval: 4 * time.Millisecond, mode: paceRamp, burst: 50, since: t0}, []row{
			{op: "oks", at: 0, n: 250, every: 4 * time.Millisecond, mode: paceRamp, burst: 50, interval: -1},
			{name: "a 100 ms penalty refills 20 of 50 at 200.8/s", op: "429", at: s1, until: s1 + 100*time.Millisecond, interval: -1, mode: paceSettle, burst: 50, settled: -1},
			{name: "owes the quarter of the burst already", op: "oks", at: s1 + 100*time.Millisecond, n: 5, every: 4980 * time.Microsecond, interval: -1, mode: paceSettle, burst: 50, settled: -1},
		}},
		{"settling: the burst from the rate learnt, not from the rate with its penalty", newPace(t0.Add(-s1), t0, history{ok: 60, first: t0.Add(-s1 - 50*time.Millisecond)}), []row{
			// A bucket of 50 at 200/s passed 60 over the 50 ms before its
			// 429 at T-1s: 60/1.05 s = 57.1/s with the penalty, the burst
			// 60 - 57.1*0.05 = 57.1 as far as known then.
			{name: "start: 60 over 1.05 s", op: "", interval: 17500000, mode: paceRamp, burst: 60 - 60/1.05*0.05},
			// Then 250 sent every 4 ms from T: a bucket of 50 at 200/s has
			// its last token for the 250th at 996 ms.
			{op: "oks", at: 0, n: 250, every: 4 * time.Millisecond, mode: paceRamp, burst: 60 - 60/1.05*0.05, interval: -1},
			// The burst 57.1 would make it 193.6/s; a burst of 60 - 0.05 r
			// passes the 250th only if 60 - 0.05 r + 0.996 r >= 250:
			// r = 200.85/s, the burst 49.96.
			{name: "settling: 200.85/s, burst 49.96", op: "429", at: s1, until: s2, interval: -1, mode: paceSettle, burst: 60 - 0.05*(190/0.946), settled: 4978947, twice: true},
		}},
		{"squeezed: a rate learnt far below the fastest ramp that passed is held paceHoldSqueezed, then probed", pace{interval: 50 * time.Millisecond, mode: paceRamp, burst: 1, since: t0}, []row{
			{name: "a ramp's 2xx at 20/s: the fastest spacing that passed", op: "ok", at: 0, interval: 46651649, mode: paceRamp, burst: 1, fastest: 50 * time.Millisecond},
			// One 2xx over the 2 s from T to the new T: the floor, 0.5/s,
			// within paceMax: 1/s, 20 times slower than the fastest.
			{name: "a paced 429: 1/s learnt, the fastest kept", op: "429", at: s1, until: s2, interval: paceMax, mode: paceSettle, burst: 1, settled: paceMax, fastest: 50 * time.Millisecond},
			{name: "held until paceHoldSqueezed after its T (behind its rate: twice, to catch up)", op: "ok", at: s2 + paceHoldSqueezed - time.Millisecond, interval: -1, mode: paceSettle, burst: 1, settled: paceMax, twice: true},
			{name: "then probed: the ramp from 1/s (1 s of 500 ms: 2^-2), not after paceHold", op: "ok", at: s2 + paceHoldSqueezed, interval: 250 * time.Millisecond, mode: paceRamp, burst: 1},
		}},
		{"squeezed: exactly paceFar times slower than the fastest is far", pace{interval: 30 * time.Millisecond, mode: paceSettle, settled: 30 * time.Millisecond, burst: 1, since: t0, last: t0, fastest: 10 * time.Millisecond}, []row{
			{name: "held before paceHoldSqueezed", op: "ok", at: paceHoldSqueezed - time.Millisecond, interval: -1, mode: paceSettle, burst: 1, settled: 30 * time.Millisecond, twice: true},
			{name: "probed at paceHoldSqueezed: the ramp from the learnt rate (30 ms of 500 ms: 2^-0.06)", op: "ok", at: paceHoldSqueezed, interval: 28777923, mode: paceRamp, burst: 1},
		}},
		{"close: less than paceFar times slower than the fastest is held paceHold", pace{interval: 30 * time.Millisecond, mode: paceSettle, settled: 30 * time.Millisecond, burst: 1, since: t0, last: t0, fastest: 10*time.Millisecond + 1}, []row{
			{name: "still held at paceHoldSqueezed", op: "ok", at: paceHoldSqueezed, interval: -1, mode: paceSettle, burst: 1, settled: 30 * time.Millisecond, twice: true},
			{name: "held until paceHold", op: "ok", at: paceHold - time.Millisecond, interval: -1, mode: paceSettle, burst: 1, settled: 30 * time.Millisecond, twice: true},
			{name: "probed at paceHold", op: "ok", at: paceHold, interval: 28777923, mode: paceRamp, burst: 1},
		}},
		{"squeezed: the fastest is kept when a slow start's first 429 starts a ramp", pace{interval: paceStart, since: t0, fastest: 10 * time.Millisecond}, []row{
			{op: "oks", at: 0, n: 3, every: time.Millisecond, mode: paceUnknown, interval: 1250 * time.Microsecond, fastest: 10 * time.Millisecond},
			{name: "3/s from the slow start's cycle; the fastest still 10 ms", op: "429", at: 0, until: s1, interval: 333333333, mode: paceRamp, burst: 3, fastest: 10 * time.Millisecond},
		}},
		{"settling: never below what passed per cycle, penalty included", pace{interval: 10 * time.Millisecond, mode: paceRamp, burst: 1000, since: t0}, []row{
			{op: "oks", at: 0, n: 100, every: 10 * time.Millisecond, mode: paceRamp, burst: 1000, interval: -1},
			{name: "a bucket of 1,000 passes 100 with no refill: the floor, 100 over 2 s, holds", op: "429", at: s1, until: s2, interval: 20 * time.Millisecond, mode: paceSettle, burst: 1000},
		}},
		{"settling: never above the rate the pace sent at", pace{interval: 10 * time.Millisecond, mode: paceRamp, burst: 1, since: t0}, []row{
			{op: "oks", at: 0, n: 10, every: ms(0.5), mode: paceRamp, burst: 1, interval: -1},
			{name: "a bucket of 1 cannot pass 10 in 5 ms at the pace's rate: the pace's own rate", op: "429", at: s1, until: s2, interval: -1, same: true, mode: paceSettle, burst: 1},
		}},
		{"a slow start meets 429: what it let through starts a ramp", newPace(t0, t0, history{}), []row{
			{op: "oks", at: 0, n: 3, every: time.Millisecond, mode: paceUnknown, interval: 1250 * time.Microsecond},
			{name: "3 passed over the 1 s from T to the new T: 3/s, burst 3", op: "429", at: 0, until: s1, interval: 333333333, mode: paceRamp, burst: 3},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.start
			for i, r := range tc.rows {
				before := p.interval
				switch r.op {
				case "ok":
					p.succeeded(t0.Add(r.at))
				case "oks":
					for k := range r.n {
						p.succeeded(t0.Add(r.at + time.Duration(k)*r.every))
					}
				case "429":
					p.throttled(t0.Add(r.at), t0.Add(r.until))
				}
				if r.same && p.interval != before {
					t.Fatalf("row %d %q: interval %v, want %v as before", i, r.name, p.interval, before)
				}
				if r.interval >= 0 && p.interval != r.interval {
					t.Fatalf("row %d %q: interval %v (%d), want %v", i, r.name, p.interval, int64(p.interval), r.interval)
				}
				if p.mode != r.mode || math.Abs(p.burst-r.burst) > 1e-6 {
					t.Fatalf("row %d %q: mode %d burst %v, want %d %v", i, r.name, p.mode, p.burst, r.mode, r.burst)
				}
				if r.fastest > 0 && p.fastest != r.fastest {
					t.Fatalf("row %d %q: fastest %v, want %v", i, r.name, p.fastest, r.fastest)
				}
				if r.settled > 0 && p.settled != r.settled {
					t.Fatalf("row %d %q: learnt spacing %v (%d), want %v", i, r.name, p.settled, int64(p.settled), r.settled)
				}
				if r.settled != 0 {
					want := p.settled
					if r.twice {
						want = p.settled / 2
					}
					if p.interval != want {
						t.Fatalf("row %d %q: spacing %v, want %v (learnt %v, twice %v)", i, r.name, p.interval, want, p.settled, r.twice)
					}
				}
			}
		})
	}
}

// The pace's bucket: a full bucket passes its burst at once, then one per
// refill; a request in between finds none.
func TestBucketPasses(t *testing.T) {
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	assert.True(t, bucketPasses(at(0, 0, 100), t0, 2, 10))
	assert.False(t, bucketPasses(at(0, 0, 99), t0, 2, 10))
	assert.True(t, bucketPasses(at(0, 0, 99), t0, 2, 10.2))
	assert.False(t, bucketPasses(at(0, 0, 0), t0, 2, 1e6))
	assert.True(t, bucketPasses(nil, t0, 1, 0))
}

// paced-release through the table: a 2xx of a paced request quickens the
// tickets not yet due; a 429 of one slows them and restarts them at the
// new T; a 429 of a request sent before the restriction, or of a ticket
// due before the last slow-down, changes no pace.
func TestRestrictionsPace(t *testing.T) {
	tab := newRestrictions(nil)
	gen := tab.record("a", t0, t0.Add(s1), sharedPlan("r1"), nil)
	tab.record("a", t0, t0.Add(s1), sharedPlan("r2"), nil)
	assert.Equal(t, paceStart, tab.m["a"].r.pace.interval, "a 429 in flight before the restriction says nothing of the pace")
	var ps []place
	for range 4 {
		_, p, _ := tab.take("a", t0, nil)
		ps = append(ps, p)
	}
	// Ticket 0 went at T and got its 2xx: nothing had passed before (the
	// slow start), the spacing halves and tickets 1.. are spaced anew.
	tab.succeeded(t0.Add(s1), t0.Add(s1), ps[0])
	iv := paceStart / 2
	assert.Equal(t, iv, tab.m["a"].r.pace.interval)
	f, _, _ := tab.take("a", t0.Add(s1), &ps[3])
	assert.Equal(t, t0.Add(s1+3*iv), f.until)
	// Ticket 1 meets 429 "Retry-After: 1" at T+10 ms: one request passed
	// from T to the new T (1.01 s), so the release ramps from that rate
	// (slower than paceMax: paceMax); tickets 2.. restart at the new T.
	T2 := t0.Add(s2 + 10*time.Millisecond)
	assert.Equal(t, gen, tab.record("a", t0.Add(s1+10*time.Millisecond), T2, sharedPlan("r3"), &ps[1]))
	assert.Equal(t, paceMax, tab.m["a"].r.pace.interval)
	assert.Equal(t, paceRamp, tab.m["a"].r.pace.mode)
	f, _, _ = tab.take("a", t0.Add(s1+10*time.Millisecond), &ps[2])
	assert.Equal(t, T2, f.until)
	f, _, _ = tab.take("a", t0.Add(s1+10*time.Millisecond), &ps[3])
	assert.Equal(t, T2.Add(paceMax), f.until)
	// A 429 of ticket 0 (due before the slow-down) changes no pace.
	tab.record("a", t0.Add(s1+20*time.Millisecond), T2, sharedPlan("r4"), &ps[0])
	assert.Equal(t, paceMax, tab.m["a"].r.pace.interval)
}

// release-ramp through the table: a new restriction's pace starts from
// what the scope's room saw pass since its last restriction (50 2xx, the
// first at t0, before a 429 at t0+10 ms with "Retry-After: 1"): 50 over
// the 1.01 s to T; the 2xx of requests handed over before the 429 that
// come back after it (5) join the burst at the first paced 429, once.
func TestRestrictionsPaceFromHistory(t *testing.T) {
	tab := newRestrictions(nil)
	r := newRoom()
	tab.m["a"] = &scopeEntry{room: r}
	for n := range 60 {
		r.enter(fixed(t0), 64, nil)
		if n < 50 {
			r.leave(fixed(t0), 64, uint64(n+1), 200, -1)
		}
	}
	r.okFirst = t0
	T := t0.Add(1010 * time.Millisecond)
	gen := tab.record("a", t0.Add(10*time.Millisecond), T, sharedPlan("r1"), nil)
	p := tab.m["a"].r.pace
	assert.Equal(t, paceRamp, p.mode)
	assert.Equal(t, time.Duration(float64(time.Second)*1.01/50), p.interval)
	assert.InDelta(t, 50-50/1.01*0.01, p.burst, 1e-9)
	assert.Equal(t, history{}, r.takeHistory(), "the room counts again from the restriction")
	// 5 of the 10 in flight pass after the 429, 5 meet 429 (in flight
	// before T: no pace change).
	for n := 51; n <= 55; n++ {
		r.leave(fixed(t0), 64, uint64(n), 200, -1)
	}
	assert.Equal(t, 0, r.okN, "a request handed over before the restriction is not the next history")
	assert.Equal(t, 5, r.late0)
	_, pl, _ := tab.take("a", T.Add(-time.Millisecond), nil)
	_, pl2, _ := tab.take("a", T.Add(-time.Millisecond), nil)
	tab.succeeded(T, T, pl)
	assert.Equal(t, gen, tab.record("a", T.Add(5*time.Millisecond), T.Add(1005*time.Millisecond), sharedPlan("r2"), &pl2))
	// The burst: the 50 before the 429 and the 5 after it, less what the
	// learnt rate refilled over the 10 ms from the first to the 429 (the
	// one 2xx of the cycle over its 1.005 s, penalty included: any bucket
	// passes one).
	assert.InDelta(t, 55-0.01/1.005, tab.m["a"].r.pace.burst, 1e-6)
	assert.Equal(t, 0, r.late0)
	assert.Equal(t, paceSettle, tab.m["a"].r.pace.mode)
}

// The table's memory: 1,000 scopes are forgotten at the first use after
// their restrictions ended; never more than MaxSharedScopes are kept, the
// one that ends soonest making room.
func TestRestrictionsExpireAndCap(t *testing.T) {
	tab := newRestrictions(nil)
	for i := range 1000 {
		tab.record(fmt.Sprint("scope", i), t0, t0.Add(s1+time.Duration(i)*time.Millisecond), sharedPlan("r"), nil)
	}
	assert.Equal(t, 1000, tab.len())
	_, _, ok := tab.take("other", t0.Add(s1+500*time.Millisecond), nil)
	assert.False(t, ok)
	assert.Equal(t, 499, tab.len(), "the ones that ended are gone, the others kept")
	_, _, ok = tab.take("other", t0.Add(s2), nil)
	assert.False(t, ok)
	assert.Equal(t, 0, tab.len())

	for i := range MaxSharedScopes {
		tab.record(fmt.Sprint("scope", i), t0, t0.Add(s2+time.Duration(i)*time.Millisecond), sharedPlan("r"), nil)
	}
	tab.record("one more", t0, t0.Add(s3), sharedPlan("r"), nil)
	assert.Equal(t, MaxSharedScopes, tab.len())
	_, _, ok = tab.take("scope0", t0, nil)
	assert.False(t, ok, "the restriction that ends soonest made room")
	_, _, ok = tab.take("one more", t0, nil)
	assert.True(t, ok)
	_, _, ok = tab.take("scope1", t0, nil)
	assert.True(t, ok)
}

// The state machine's decision for a restricted scope (docs/policy.md:
// shared-restriction), as step rows at fixed times.
func TestSharedRestrictionRules(t *testing.T) {
	fact := func(until time.Duration, gen uint64) *request {
		return &request{shared: &restricted{until: t0.Add(until), expect: t0.Add(until), gen: gen, plan: sharedPlan("r1")}}
	}
	// ramp: a place due at until on the pace as it stands, expected at
	// expect on its ramp (restriction.expect).
	ramp := func(until, expect time.Duration) *request {
		return &request{shared: &restricted{until: t0.Add(until), expect: t0.Add(expect), gen: 1, plan: sharedPlan("r1")}}
	}
	claimed := func(r *request) *request { c := *r; c.claimed = true; return &c }
	for _, tc := range []struct {
		rule   string
		limits limits
		steps  []decide
	}{
		{"shared-restriction: a restricted scope opens the sequence's window until the place", limits{}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: s1, req: fact(s3, 1), want: waitTill(s3)},
			{at: s3, req: &request{claimed: true}, want: sendLate(2)},
		}},
		{"shared-restriction: the next place of the same restriction moves the window out", limits{}, []decide{
			{at: 0, req: fact(s2, 1), want: waitTill(s2)},
			{at: s2, req: &request{claimed: true}, want: sendLate(1)},
			{at: s2, req: fact(s2+10*time.Millisecond, 1), want: waitTill(s2 + 10*time.Millisecond)},
		}},
		{"shared-restriction: a place beyond the wait ceiling stops before the network", limits{wait: s1, waitSet: true}, []decide{
			{at: 0, req: fact(s2, 1), want: refused(StopRestricted)},
			{at: s3, req: read, want: refused(StopRestricted)},
		}},
		{"release-ramp: a ramp's place expected within the ceiling waits up to the ceiling, then asks again", limits{wait: s2, waitSet: true}, []decide{
			{at: 0, req: ramp(s3, s2), want: waitTill(s2)},
			{at: s2, req: claimed(ramp(s3+s2, s3+s2)), want: refused(StopRestricted)},
		}},
		{"release-ramp: a ramp's place not expected within the ceiling stops", limits{wait: s2, waitSet: true}, []decide{
			{at: 0, req: ramp(s3, s2+time.Millisecond), want: refused(StopRestricted)},
		}},
		{"shared-restriction: a place beyond the total stops", limits{total: s2}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: s1, req: fact(s2, 1), want: refused(StopRestricted)},
		}},
		{"shared-restriction: a new restriction after the sequence's window stops it", limits{}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, in: read429(s1), want: resendAt(s1)},
			{at: s1, req: &request{claimed: true}, want: sendLate(2)},
			{at: s2, req: fact(s3, 7), want: refused(StopRestricted)},
		}},
		{"shared-restriction: a window still open joins the restriction and waits for the later end", limits{}, []decide{
			{at: 0, req: read, want: sendNow(1)},
			{at: 0, in: read429(s2), want: resendAt(s2)},
			{at: s1, req: fact(s3, 1), want: waitTill(s3)},
			{at: s2, req: claimed(fact(s3, 1)), want: waitTill(s3)}, // the re-send too
			{at: s3, req: &request{claimed: true}, want: sendLate(2)},
		}},
		{"shared-restriction: a 429 of the restriction's release is after the window", limits{}, []decide{
			{at: 0, req: fact(s1, 1), want: waitTill(s1)},
			{at: s1, req: &request{claimed: true}, want: sendLate(1)},
			{at: s1, in: late(read429(s1)), want: stopped(StopOpportunityUsed)},
		}},
		{"wait-before-readback: a mutation admitted before T waits like a read", limits{}, []decide{
			{at: 0, req: &request{mutation: true, shared: fact(s2, 1).shared}, want: waitTill(s2)},
			{at: s2, req: &request{mutation: true, claimed: true}, want: sendLate(1)},
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			runSteps(t, &sequence{name: "s", limits: tc.limits}, tc.steps)
		})
	}
}

// sharedFake is a fake whose first blob GET meets 429 "Retry-After: 2",
// with three blobs, and a Transport over it sharing restrictions.
func sharedFake(t *testing.T, opts ...Option) (*fakeserver.Server, *Transport) {
	t.Helper()
	srv := fakeserver.New()
	t.Cleanup(func() { srv.Close() })
	for _, b := range []string{"a", "b", "c"} {
		srv.PutBlob("c", b, []byte(b))
	}
	srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)), fakeserver.Nth(1))
	return srv, New(srv.Transport(), opts...)
}

// arrivals returns the ledger's requests as "METHOD path status +offset"
// from start.
func arrivals(srv *fakeserver.Server, start time.Time) []string {
	var out []string
	for _, r := range srv.Requests() {
		out = append(out, fmt.Sprintf("%s %s %d +%v", r.Method, r.Path, r.Status, r.Arrived.Sub(start)))
	}
	return out
}

// shared-restriction against the fake, in fake time: sequence A's read
// meets 429 "Retry-After: 2"; sequence B, 100 ms later, is not sent before
// T (the ledger shows nothing of it between the 429 and T) and goes at T
// without a 429 of its own; a request without a Budget goes at once, and
// so does a Budget request to another host. Without the option B goes at
// once and meets no 429 either: the difference is the restriction alone.
func TestSharedRestrictionHoldsTheScope(t *testing.T) {
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var opts []Option
				if shared {
					opts = append(opts, WithSharedRestrictions(nil))
				}
				srv, tr := sharedFake(t, opts...)
				start := time.Now()
				a, b, other := NewBudget("A"), NewBudget("B"), NewBudget("other")
				var wg sync.WaitGroup
				statuses := map[string]int{}
				var mu sync.Mutex
				run := func(name string, ctx context.Context, url string, after time.Duration) {
					wg.Go(func() {
						time.Sleep(after)
						resp, err := tr.RoundTrip(get(t, ctx, url))
						require.NoError(t, err)
						drain(resp)
						mu.Lock()
						statuses[name] = resp.StatusCode
						mu.Unlock()
					})
				}
				bg := context.Background()
				run("A", WithBudget(bg, a), "http://acct.example/c/a", 0)
				run("B", WithBudget(bg, b), "http://acct.example/c/b", 100*time.Millisecond)
				run("nobudget", bg, "http://acct.example/c/c", 200*time.Millisecond)
				run("otherhost", WithBudget(bg, other), "http://other.example/c/c", 300*time.Millisecond)
				wg.Wait()

				assert.Equal(t, map[string]int{"A": 200, "B": 200, "nobudget": 200, "otherhost": 200}, statuses)
				if !shared {
					assert.Equal(t, []string{
						"GET /c/a 429 +0s", "GET /c/b 200 +100ms", "GET /c/c 200 +200ms", "GET /c/c 200 +300ms", "GET /c/a 200 +2s",
					}, arrivals(srv, start))
					assert.Equal(t, 0, b.Report().Waits)
					return
				}
				// At T: B, which took the first place at +100 ms, then A's
				// re-send, which asked for its place at T: one place apart
				// (10 ms, or less when B's 2xx came first: the slow start
				// halves the spacing, as nothing passed before A's 429; and
				// never less than half a spacing after B).
				assert.Equal(t, []string{
					"GET /c/a 429 +0s", "GET /c/c 200 +200ms", "GET /c/c 200 +300ms", "GET /c/b 200 +2s",
				}, arrivals(srv, start)[:4])
				last := srv.Requests()[4]
				assert.Equal(t, "/c/a 200", fmt.Sprint(last.Path, " ", last.Status))
				gap := last.Arrived.Sub(start) - s2
				assert.True(t, gap >= paceStart/4 && gap <= paceStart, "A's re-send %v after B", gap)
				id429 := srv.Requests()[0].RequestID
				rb := b.Report()
				require.Len(t, rb.WaitLog, 1)
				assert.Equal(t, otelattr.TriggerSharedRestriction, rb.WaitLog[0].Trigger)
				assert.Equal(t, id429, rb.WaitLog[0].RequestID)
				assert.Equal(t, 1, rb.Requests)
				assert.Equal(t, StopReason(""), rb.Stop)
				assert.Equal(t, 0, other.Report().Waits)
			})
		})
	}
}

// shared-restriction: the wait span names the trigger, the scope's host
// and port and the request ID of the 429 that set T; no query string.
func TestSharedRestrictionWaitSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakeserver.New()
		defer srv.Close()
		srv.PutBlob("c", "a", []byte("a"))
		srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)), fakeserver.Nth(1))
		tr, rec, _ := newTraced(srv.Transport(), WithSharedRestrictions(nil))
		bg := context.Background()
		resp, err := tr.RoundTrip(get(t, WithBudget(bg, NewBudget("A", MaxWait(0))), "http://acct.example:8080/c/a?sig=secret"))
		require.NoError(t, err)
		drain(resp)
		id429 := srv.Requests()[0].RequestID
		resp, err = tr.RoundTrip(get(t, WithBudget(bg, NewBudget("B")), "http://acct.example:8080/c/a"))
		require.NoError(t, err)
		drain(resp)
		var wait []string
		for _, s := range rec.Ended() {
			if s.Name() != otelattr.WaitSpanName {
				continue
			}
			attrs := map[string]string{}
			for _, kv := range s.Attributes() {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			wait = append(wait, fmt.Sprintf("%s %s %s %s %s %s", attrs[string(otelattr.WaitTrigger)], attrs[string(otelattr.SequenceName)],
				attrs[string(otelattr.ServerAddress)], attrs["server.port"], attrs[string(otelattr.RequestID)], attrs["url.full"]))
		}
		assert.Equal(t, []string{fmt.Sprintf("shared-restriction B acct.example 8080 %s http://acct.example:8080/c/a", id429)}, wait)
	})
}

// shared-restriction: a sequence with MaxWait(1s) facing T = +2 s, and one
// whose total ends before T, stop as restricted before any network access,
// with the 429 that set T as evidence.
func TestSharedRestrictionStopsBeyondCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, tr := sharedFake(t, WithSharedRestrictions(nil))
		bg := context.Background()
		resp, err := tr.RoundTrip(get(t, WithBudget(bg, NewBudget("A", MaxWait(0))), "http://acct.example/c/a"))
		require.NoError(t, err)
		drain(resp)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode) // A's own ceiling: no wait
		id429 := srv.Requests()[0].RequestID
		for _, b := range []*Budget{NewBudget("B", MaxWait(time.Second)), NewBudget("C", MaxTotal(1500*time.Millisecond))} {
			before := len(srv.Requests())
			_, err := tr.RoundTrip(get(t, WithBudget(bg, b), "http://acct.example/c/b"))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrSequenceStopped))
			var se *StopError
			require.True(t, errors.As(err, &se))
			assert.Equal(t, StopRestricted, se.Reason)
			assert.Equal(t, id429, se.RequestID)
			assert.Equal(t, http.StatusTooManyRequests, se.StatusCode)
			assert.Equal(t, before, len(srv.Requests()), "no network access")
			r := b.Report()
			assert.Equal(t, StopRestricted, r.Stop)
			assert.Equal(t, 0, r.Requests)
		}
	})
}

// wait-before-readback with shared restrictions: a mutation admitted
// before T waits until T like a read.
func TestSharedRestrictionHoldsMutation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, tr := sharedFake(t, WithSharedRestrictions(nil))
		start := time.Now()
		bg := context.Background()
		resp, err := tr.RoundTrip(get(t, WithBudget(bg, NewBudget("A", MaxWait(0))), "http://acct.example/c/a"))
		require.NoError(t, err)
		drain(resp)
		time.Sleep(500 * time.Millisecond)
		b := NewBudget("B")
		resp, err = tr.RoundTrip(mutation(t, WithBudget(bg, b), http.MethodPut, "http://acct.example/c/new", "data"))
		require.NoError(t, err)
		drain(resp)
		assert.Equal(t, []string{"GET /c/a 429 +0s", "PUT /c/new 201 +2s"}, arrivals(srv, start))
		require.Len(t, b.Report().WaitLog, 1)
		assert.Equal(t, otelattr.TriggerSharedRestriction, b.Report().WaitLog[0].Trigger)
	})
}

// shared-restriction: a 429 without a usable delay (no Retry-After: the
// 1 s fallback; "Retry-After: 0") restricts nothing.
func TestSharedRestrictionNeedsUsableDelay(t *testing.T) {
	for name, ra := range map[string]fakeserver.RetryAfter{"missing": fakeserver.RetryAfterMissing(), "zero": fakeserver.RetryAfterSeconds(0), "malformed": fakeserver.RetryAfterRaw("2.5")} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := fakeserver.New()
				defer srv.Close()
				srv.PutBlob("c", "a", []byte("a"))
				srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(ra), fakeserver.Nth(1))
				tr := New(srv.Transport(), WithSharedRestrictions(nil))
				start := time.Now()
				bg := context.Background()
				resp, err := tr.RoundTrip(get(t, WithBudget(bg, NewBudget("A", MaxWait(0))), "http://acct.example/c/a"))
				require.NoError(t, err)
				drain(resp)
				resp, err = tr.RoundTrip(get(t, WithBudget(bg, NewBudget("B")), "http://acct.example/c/a"))
				require.NoError(t, err)
				drain(resp)
				got := arrivals(srv, start)
				assert.Equal(t, "GET /c/a 429 +0s", got[0])
				assert.Equal(t, "GET /c/a 200 +0s", got[len(got)-1], "B went at once")
				assert.Equal(t, 0, tr.shared.len())
			})
		})
	}
}

// shared-restriction: a 429 of a request without a Budget restricts the
// scope for the sequences too (it is itself untouched: its 429 goes back).
func TestSharedRestrictionFromRequestWithoutBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, tr := sharedFake(t, WithSharedRestrictions(nil))
		start := time.Now()
		resp, err := tr.RoundTrip(get(t, context.Background(), "http://acct.example/c/a"))
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		drain(resp)
		resp, err = tr.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("B")), "http://acct.example/c/b"))
		require.NoError(t, err)
		drain(resp)
		assert.Equal(t, []string{"GET /c/a 429 +0s", "GET /c/b 200 +2s"}, arrivals(srv, start))
	})
}

// paced-release: waiters of a scope go one place apart from T on, never
// before T; with a custom scope (the account), two hosts of one account
// share it.
func TestSharedRestrictionPacedRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, tr := sharedFake(t, WithSharedRestrictions(func(r *http.Request) string { return "account" }))
		start := time.Now()
		bg := context.Background()
		resp, err := tr.RoundTrip(get(t, WithBudget(bg, NewBudget("A", MaxWait(0))), "http://acct.blob.example/c/a"))
		require.NoError(t, err)
		drain(resp)
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				host := []string{"acct.blob.example", "acct.queue.example"}[i%2]
				resp, err := tr.RoundTrip(get(t, WithBudget(bg, NewBudget(fmt.Sprint(i))), "http://"+host+"/c/b"))
				require.NoError(t, err)
				drain(resp)
			})
		}
		wg.Wait()
		var at []time.Duration
		for _, r := range srv.Requests()[1:] {
			require.Equal(t, 200, r.Status)
			at = append(at, r.Arrived.Sub(start))
		}
		// The first at T exactly, then one by one: each gap more than the
		// floor, and the k-th no later than the first pace would put it
		// (the pace quickens with each 2xx; a sleeping waiter wakes at its
		// estimate, never sooner).
		require.Len(t, at, 5)
		t.Logf("arrivals %v", at)
		assert.Equal(t, s2, at[0])
		for i := 1; i < len(at); i++ {
			gap := at[i] - at[i-1]
			assert.True(t, gap > paceMin, "gap %d: %v", i, gap)
			assert.LessOrEqual(t, at[i], s2+time.Duration(i)*paceStart, "arrival %d", i)
		}
		// The release has ended after its last place: the table is empty
		// at the next request.
		time.Sleep(paceStart)
		resp, err = tr.RoundTrip(get(t, WithBudget(bg, NewBudget("late")), "http://acct.blob.example/c/b"))
		require.NoError(t, err)
		drain(resp)
		assert.Equal(t, 0, tr.shared.len())
	})
}

// The Transport's memory returns after 1,000 scopes expire: the table is
// empty and the heap is back within 64 KiB of where it was.
func TestSharedScopesMemoryReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A base that keeps nothing: the heap is the Transport's.
		tr := New(always429{}, WithSharedRestrictions(nil))
		before := heapAlloc()
		for i := range 1000 {
			resp, err := tr.RoundTrip(get(t, context.Background(), fmt.Sprintf("http://h%d.example/c/a", i)))
			require.NoError(t, err)
			drain(resp)
		}
		assert.Equal(t, 1000, tr.shared.len())
		grown := heapAlloc()
		time.Sleep(2 * time.Second)
		resp, err := tr.RoundTrip(get(t, context.Background(), "http://h0.example/c/a"))
		require.NoError(t, err)
		drain(resp)
		assert.Equal(t, 1, tr.shared.len(), "only the new 429's scope")
		after := heapAlloc()
		t.Logf("heap: %d before, %d with 1,000 scopes, %d after", before, grown, after)
		assert.Less(t, int64(after)-int64(before), int64(64<<10))
	})
}

// BenchmarkSharedScopes1000 records 1,000 scopes on a table, lets them
// expire and reports the bytes the table held at its peak and keeps after
// (retained-B/op should be about 0).
func BenchmarkSharedScopes1000(b *testing.B) {
	scopes := make([]string, 1000)
	for i := range scopes {
		scopes[i] = fmt.Sprint("https://acct", i, ".blob.core.windows.net")
	}
	var peak, retained float64
	for b.Loop() {
		tab := newRestrictions(nil)
		h0 := heapAlloc()
		for _, s := range scopes {
			tab.record(s, t0, t0.Add(s1), sharedPlan("r"), nil)
		}
		h1 := heapAlloc()
		tab.take("x", t0.Add(s2), nil)
		h2 := heapAlloc()
		peak += float64(int64(h1) - int64(h0))
		retained += float64(int64(h2) - int64(h0))
		runtime.KeepAlive(tab)
	}
	b.ReportMetric(peak/float64(b.N), "peak-B/op")
	b.ReportMetric(retained/float64(b.N), "retained-B/op")
}

// always429 answers every request 429 "Retry-After: 1" and keeps nothing.
type always429 struct{}

func (always429) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"1"}}, Body: http.NoBody}, nil
}

// The table itself gives its memory back: 1,000 expired scopes leave less
// than 16 KiB (a Go map keeps its buckets after deletes: about 54 KB for
// 1,000 scopes, unless the table copies a map that shrank).
func TestRestrictionsMemoryReturns(t *testing.T) {
	tab := newRestrictions(nil)
	h0 := heapAlloc()
	for i := range 1000 {
		tab.record(fmt.Sprint("https://acct", i, ".blob.core.windows.net"), t0, t0.Add(s1), sharedPlan("r"), nil)
	}
	h1 := heapAlloc()
	tab.take("x", t0.Add(s2), nil)
	h2 := heapAlloc()
	runtime.KeepAlive(tab)
	t.Logf("heap: +%d with 1,000 scopes, %+d after", int64(h1)-int64(h0), int64(h2)-int64(h0))
	assert.Equal(t, 0, tab.len())
	assert.Less(t, int64(h2)-int64(h0), int64(16<<10))
}

// shared-restriction under a random load, in fake time, checked from the
// fake's ledger alone: 3 hosts, each behind TokenBucket(20/s, burst 5)
// per host answering 429 with the whole seconds to the next token; 30
// sequences of 5 pages with random starts and wait ceilings, and a few
// requests without a Budget. For every 429 of a host at t with
// "Retry-After: n", no request of a Budget-carrying sequence of that host
// arrives strictly between t and t+n s (in a bubble, a request in flight
// with the 429 arrives at t itself). Every sequence completes or stops
// with a reason of the policy.
func TestSharedRestrictionRandomLedger(t *testing.T) {
	for seed := range int64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(seed), 1))
				srv := fakeserver.New()
				defer srv.Close()
				srv.PutBlob("c", "p", []byte("page"))
				srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterRemaining()),
					fakeserver.TokenBucket(20, 5), fakeserver.PerHost())
				tr := New(srv.Transport(), WithSharedRestrictions(nil))
				hosts := []string{"h0.example", "h1.example", "h2.example"}
				var wg sync.WaitGroup
				var mu sync.Mutex
				stops := map[StopReason]int{}
				for i := range 30 {
					host := hosts[r.IntN(len(hosts))]
					after := time.Duration(r.IntN(2000)) * time.Millisecond
					ceiling := []time.Duration{500 * time.Millisecond, 2 * time.Second, 30 * time.Second}[r.IntN(3)]
					wg.Go(func() {
						time.Sleep(after)
						b := NewBudget(fmt.Sprint("s", i), MaxWait(ceiling))
						ctx := WithBudget(context.Background(), b)
						for p := range 5 {
							resp, err := tr.RoundTrip(get(t, ctx, fmt.Sprintf("http://%s/c/p?s=%d&p=%d", host, i, p)))
							if err != nil {
								break
							}
							drain(resp)
							if resp.StatusCode != http.StatusOK {
								break
							}
						}
						mu.Lock()
						stops[b.Report().Stop]++
						mu.Unlock()
					})
					if i%10 == 0 {
						wg.Go(func() { // no Budget: never held
							time.Sleep(after)
							resp, err := tr.RoundTrip(get(t, context.Background(), "http://"+host+"/c/p?nobudget=1"))
							require.NoError(t, err)
							drain(resp)
						})
					}
				}
				wg.Wait()
				ledger := srv.Requests()
				var throttled int
				for _, e := range ledger {
					if e.Status != http.StatusTooManyRequests {
						continue
					}
					throttled++
					var wait time.Duration
					for _, d := range e.Decisions {
						if d.Fired {
							wait = d.Wait
						}
					}
					n := (wait + time.Second - 1) / time.Second
					T := e.Arrived.Add(n * time.Second)
					for _, o := range ledger {
						if o.Path == e.Path && slices.Equal(o.QueryKeys, []string{"p", "s"}) && hostOf(o) == hostOf(e) &&
							o.Arrived.After(e.Arrived) && o.Arrived.Before(T) {
							t.Errorf("request %d (%s) arrived at %v, inside the restriction of 429 #%d (%v until %v)",
								o.Seq, hostOf(o), o.Arrived, e.Seq, e.Arrived, T)
						}
					}
				}
				for reason := range stops {
					switch reason {
					case "", StopRestricted, StopOpportunityUsed, StopOverlong, StopPersistent429, StopWaitExceedsTotal:
					default:
						t.Errorf("unexpected stop %q", reason)
					}
				}
				require.Positive(t, throttled, "the load must meet the buckets")
				t.Logf("%d requests, %d 429s, stops %v", len(ledger), throttled, stops)
			})
		})
	}
}

// hostOf is the bucket key the fake recorded for a request ("host=H"), or
// "" when no rule asked about it.
func hostOf(r fakeserver.Request) string {
	for _, d := range r.Decisions {
		return d.Key
	}
	return ""
}

// heapAlloc is the live heap after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// paced-release: places go at least half a spacing apart in fact (a
// waiter that woke late does not go with the next one), and a release
// that fell behind its places goes on from now, a spacing apart, instead
// of bursting to catch up.
func TestRestrictionsOneByOneInFact(t *testing.T) {
	tab := newRestrictions(nil)
	tab.record("a", t0, t0.Add(s1), sharedPlan("r1"), nil)
	var ps []place
	for range 4 {
		_, p, _ := tab.take("a", t0, nil)
		ps = append(ps, p)
	}
	T := t0.Add(s1)
	_, p0, ok := tab.take("a", T, &ps[0])
	require.False(t, ok, "ticket 0 goes at T")
	assert.True(t, p0.went)
	_, _, ok = tab.take("a", T.Add(5*time.Millisecond), &p0)
	assert.False(t, ok, "asked again, a place that went still goes")
	// Ticket 1 is due at T+10ms; its waiter woke 4 ms late: it goes, and
	// ticket 2, due at T+20ms, keeps its place.
	_, p1, ok := tab.take("a", T.Add(14*time.Millisecond), &ps[1])
	require.False(t, ok)
	f, _, _ := tab.take("a", T.Add(14*time.Millisecond), &ps[2])
	assert.Equal(t, T.Add(20*time.Millisecond), f.until)
	_ = p1
	// Ticket 2's waiter wakes 50 ms late (more than two spacings): it
	// goes, and ticket 3 is due a spacing after it, not at once.
	now := T.Add(70 * time.Millisecond)
	_, _, ok = tab.take("a", now, &ps[2])
	require.False(t, ok)
	f, _, ok = tab.take("a", now, &ps[3])
	require.True(t, ok)
	assert.Equal(t, now.Add(paceStart), f.until)
}

// TestRestrictionsLearnOutsideLock (R97): a paced 429 that ends a cycle of
// 4,096 2xx is learnt once the table's lock is given back (the bisection
// costs about 1.7 ms), and the table's pace ends as the step table's pure
// pace.throttled says: the same rate, burst and mode.
func TestRestrictionsLearnOutsideLock(t *testing.T) {
	tab := newRestrictions(nil)
	tab.record("a", t0, t0.Add(time.Second), sharedPlan("r"), nil)
	r := tab.m["a"].r
	since := r.until
	p := pace{interval: 4 * time.Millisecond, mode: paceRamp, burst: 50, since: since}
	for i := range 4096 {
		p.succeeded(since.Add(time.Duration(i) * 4 * time.Millisecond))
	}
	at := since.Add(4096 * 4 * time.Millisecond)
	want := p
	want.times = append([]time.Time(nil), p.times...)
	want.throttled(at, at.Add(time.Second))
	r.pace = p
	r.issued, r.done, r.goneAt, r.base, r.baseK = 4097, 4096, at, at, 4096
	tab.record("a", at, at.Add(time.Second), sharedPlan("r2"), &place{scope: "a", gen: r.gen, k: 4096})
	got := tab.m["a"].r.pace
	assert.Equal(t, paceSettle, got.mode)
	assert.Equal(t, want.settled, got.settled, "the rate learnt")
	assert.Equal(t, want.interval, got.interval)
	assert.InDelta(t, want.burst, got.burst, 1e-9)
	assert.NotEqual(t, intervalOf(4096/(at.Add(time.Second).Sub(since).Seconds())), got.settled, "not the provisional floor")
}

// TestRestrictionsNoBurstToCatchUp (docs/policy.md: paced-release): a
// waiter that comes exactly two spacings after its place does not move
// the release (the next place is half a spacing after it went); one that
// comes later than that makes the release go on from now, a spacing
// apart, with no burst to catch up.
func TestRestrictionsNoBurstToCatchUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		late time.Duration // after ticket 1's place, T + 10 ms
		next time.Duration // ticket 2's place, after T
	}{
		{"two spacings late: the release keeps its places", 2 * paceStart, 35 * time.Millisecond},
		{"more than two spacings late: the release goes on from now", 2*paceStart + time.Nanosecond, 40*time.Millisecond + time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newRestrictions(nil)
			T := t0.Add(s1)
			tab.record("a", t0, T, sharedPlan("r"), nil)
			_, p0, _ := tab.take("a", t0, nil)
			_, p1, _ := tab.take("a", t0, nil)
			_, p2, _ := tab.take("a", t0, nil)
			if _, p, ok := tab.take("a", T, &p0); ok || !p.went {
				t.Fatal("ticket 0 does not go at T")
			}
			at := T.Add(paceStart + tc.late)
			if _, p, ok := tab.take("a", at, &p1); ok || !p.went {
				t.Fatal("ticket 1 does not go when its waiter comes")
			}
			f, _, ok := tab.take("a", at, &p2)
			if !ok || f.until.Sub(T) != tc.next {
				t.Fatalf("ticket 2's place is T+%v (restricted %v), want T+%v", f.until.Sub(T), ok, tc.next)
			}
		})
	}
}

// TestRestrictionExpect (docs/policy.md: release-ramp): a place on a ramp
// is expected where the ramp's doubling rate brings it (40 places at a
// ramp starting at 1/s: 2.909 s, not 40 s), never before T and never
// after its due time; a held pace prices a place at its due time.
func TestRestrictionExpect(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name string
		mode uint8
		iv   time.Duration
		k    uint64
		want time.Duration // after T
	}{
		{"ramp from 1/s, place 40", paceRamp, time.Second, 40, 2909 * time.Millisecond},
		{"ramp from 1/s, place 1", paceRamp, time.Second, 1, 627 * time.Millisecond},
		{"ramp, the first place: T", paceRamp, time.Second, 0, 0},
		{"ramp at 10 ms, place 3", paceRamp, 10 * time.Millisecond, 3, 29 * time.Millisecond},
		{"settled at 1/s, place 40: its due time", paceSettle, time.Second, 40, 40 * time.Second},
		{"slow start at 10 ms, place 40: its due time", paceUnknown, 10 * time.Millisecond, 40, 400 * time.Millisecond},
	} {
		r := &restriction{until: t0, base: t0, pace: pace{mode: tc.mode, interval: tc.iv}}
		got := r.expect(tc.k).Sub(t0).Round(time.Millisecond)
		if got != tc.want {
			t.Errorf("%s: expected at T%+v, want T%+v", tc.name, got, tc.want)
		}
	}
}

// TestPaceCatchUpBoundary (docs/policy.md: release-ramp): a settled pace
// goes at twice its rate while its 2xx are fewer than it owes plus a
// quarter of the burst, and at its rate once they are as many: one 2xx at
// T owes nothing, so a burst of 4 (a quarter: 1) is spent by it, a burst
// of 8 (2) is not.
func TestPaceCatchUpBoundary(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		burst float64
		want  time.Duration
	}{
		{4, 10 * time.Millisecond},
		{8, 5 * time.Millisecond},
	} {
		p := pace{mode: paceSettle, settled: 10 * time.Millisecond, interval: 10 * time.Millisecond, since: t0, last: t0, burst: tc.burst}
		p.succeeded(t0)
		if p.interval != tc.want {
			t.Errorf("burst %v: after one 2xx at T the spacing is %v, want %v", tc.burst, p.interval, tc.want)
		}
	}
}

// TestEndQueueOrder: the table's queue of ends gives them back earliest
// first, whatever order they came in, equal times included.
func TestEndQueueOrder(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	var q endQueue
	var want []time.Time
	for range 500 {
		at := t0.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
		q.push(endAt{at: at})
		want = append(want, at)
	}
	slices.SortFunc(want, func(a, b time.Time) int { return a.Compare(b) })
	for i, w := range want {
		if got := q.pop().at; !got.Equal(w) {
			t.Fatalf("pop %d: %v, want %v", i, got.Sub(t0), w.Sub(t0))
		}
	}
	if len(q) != 0 {
		t.Fatalf("%d left", len(q))
	}
}

// TestFleetSlowStart (docs/policy.md: scope-store): one of four members
// of a fleet slow-starts at a quarter of one process's rate (40 ms, not
// 10 ms) and grows by a quarter of a doubling per 2xx (×2^-¼), so that
// four together start and grow as one process; alone (part 1 or unknown)
// the slow start is one process's.
func TestFleetSlowStart(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		part        float64
		start, next time.Duration
	}{
		{0.25, 40 * time.Millisecond, 33636 * time.Microsecond},
		{0.5, 20 * time.Millisecond, 14142 * time.Microsecond},
		{1, 10 * time.Millisecond, 5 * time.Millisecond},
		{0, 10 * time.Millisecond, 5 * time.Millisecond},
	} {
		p := newPace(t0, t0.Add(time.Second), history{})
		p.fleetStart(tc.part)
		if p.interval != tc.start {
			t.Errorf("part %v: starts at %v, want %v", tc.part, p.interval, tc.start)
		}
		p.succeeded(t0.Add(time.Second))
		if got := p.interval.Round(time.Microsecond); got != tc.next {
			t.Errorf("part %v: after a 2xx %v, want %v", tc.part, got, tc.next)
		}
	}
}
