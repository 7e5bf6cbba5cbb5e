package readrecovery

import (
	"net/http"
	"testing"
	"time"
)

// TestRoomSteps is the step table of a scope's room (docs/policy.md:
// scope-room, quota-headers): each row is one event, in order, and the
// state after it. enter is a request asking to be handed over (want: its
// hand-off number, 0 when it must wait); leave is the response of the
// request handed over as number n.
func TestRoomSteps(t *testing.T) {
	type row struct {
		name      string
		at        time.Duration // the event's time after t0
		op        string        // "enter", "leave"
		n         uint64        // leave: which request
		status    int
		remaining int
		want      uint64 // enter: hand-off number
		limit     int
		inflight  int
		quota     int
	}
	const cap = 4
	for _, tc := range []struct {
		name string
		rows []row
	}{
		{"start-growth-cap", []row{
			{name: "start: a scope not heard from takes one", op: "enter", want: 1, limit: 1, inflight: 1, quota: -1},
			{name: "start: the second waits", op: "enter", want: 0, limit: 1, inflight: 1, quota: -1},
			{name: "growth: a 2xx adds one", op: "leave", n: 1, status: 200, remaining: -1, limit: 2, inflight: 0, quota: -1},
			{op: "enter", want: 2, limit: 2, inflight: 1, quota: -1},
			{op: "enter", want: 3, limit: 2, inflight: 2, quota: -1},
			{name: "growth: at most doubling per round trip", op: "enter", want: 0, limit: 2, inflight: 2, quota: -1},
			{op: "leave", n: 2, status: 200, remaining: -1, limit: 3, inflight: 1, quota: -1},
			{op: "leave", n: 3, status: 200, remaining: -1, limit: 4, inflight: 0, quota: -1},
			{op: "enter", want: 4, limit: 4, inflight: 1, quota: -1},
			{op: "enter", want: 5, limit: 4, inflight: 2, quota: -1},
			{op: "enter", want: 6, limit: 4, inflight: 3, quota: -1},
			{op: "enter", want: 7, limit: 4, inflight: 4, quota: -1},
			{name: "cap: never above it", op: "leave", n: 4, status: 200, remaining: -1, limit: 4, inflight: 3, quota: -1},
			{op: "enter", want: 8, limit: 4, inflight: 4, quota: -1},
			{op: "enter", want: 0, limit: 4, inflight: 4, quota: -1},
		}},
		{"halving", []row{
			{op: "enter", want: 1, limit: 1, inflight: 1, quota: -1},
			{op: "leave", n: 1, status: 200, remaining: -1, limit: 2, inflight: 0, quota: -1},
			{op: "enter", want: 2, limit: 2, inflight: 1, quota: -1},
			{op: "enter", want: 3, limit: 2, inflight: 2, quota: -1},
			{op: "leave", n: 2, status: 200, remaining: -1, limit: 3, inflight: 1, quota: -1},
			{op: "leave", n: 3, status: 200, remaining: -1, limit: 4, inflight: 0, quota: -1},
			{op: "enter", want: 4, limit: 4, inflight: 1, quota: -1},
			{op: "enter", want: 5, limit: 4, inflight: 2, quota: -1},
			{op: "enter", want: 6, limit: 4, inflight: 3, quota: -1},
			{name: "halving: a 429 halves", op: "leave", n: 4, status: http.StatusTooManyRequests, remaining: -1, limit: 2, inflight: 2, quota: -1},
			{name: "halving: once per round trip (5 was in flight)", op: "leave", n: 5, status: http.StatusTooManyRequests, remaining: -1, limit: 2, inflight: 1, quota: -1},
			{op: "enter", want: 7, limit: 2, inflight: 2, quota: -1},
			{op: "leave", n: 6, status: http.StatusTooManyRequests, remaining: -1, limit: 2, inflight: 1, quota: -1},
			{name: "halving: a 429 of one sent after the cut halves again", op: "leave", n: 7, status: http.StatusTooManyRequests, remaining: -1, limit: 1, inflight: 0, quota: -1},
			{op: "enter", want: 8, limit: 1, inflight: 1, quota: -1},
			{name: "halving: never below 1", op: "leave", n: 8, status: http.StatusTooManyRequests, remaining: -1, limit: 1, inflight: 0, quota: -1},
			{name: "release ramp: 2xx grow it again", op: "enter", want: 9, limit: 1, inflight: 1, quota: -1},
			{op: "leave", n: 9, status: 200, remaining: -1, limit: 2, inflight: 0, quota: -1},
			{name: "a 404 changes nothing", op: "enter", want: 10, limit: 2, inflight: 1, quota: -1},
			{op: "leave", n: 10, status: 404, remaining: -1, limit: 2, inflight: 0, quota: -1},
			{name: "a transport error changes nothing", op: "enter", want: 11, limit: 2, inflight: 1, quota: -1},
			{op: "leave", n: 11, status: 0, remaining: -1, limit: 2, inflight: 0, quota: -1},
		}},
		{"quota", []row{
			{op: "enter", want: 1, limit: 1, inflight: 1, quota: -1},
			{name: "quota: the server says 2 remain", op: "leave", n: 1, status: 200, remaining: 2, limit: 2, inflight: 0, quota: 2},
			{op: "enter", want: 2, limit: 2, inflight: 1, quota: 1},
			{op: "enter", want: 3, limit: 2, inflight: 2, quota: 0},
			{name: "quota: 3 remain less the one in flight", op: "leave", n: 2, status: 200, remaining: 3, limit: 3, inflight: 1, quota: 2},
			{op: "enter", want: 4, limit: 3, inflight: 2, quota: 1},
			{op: "enter", want: 5, limit: 3, inflight: 3, quota: 0},
			{op: "leave", n: 3, status: 200, remaining: 0, limit: 4, inflight: 2, quota: 0},
			{name: "quota: at 0 none while others are in flight", op: "enter", want: 0, limit: 4, inflight: 2, quota: 0},
			{op: "leave", n: 4, status: 200, remaining: -1, limit: 4, inflight: 1, quota: 0},
			{op: "leave", n: 5, status: 200, remaining: -1, limit: 4, inflight: 0, quota: 0},
			{name: "quota: at 0 one at a time", op: "enter", want: 6, limit: 4, inflight: 1, quota: 0},
			{op: "enter", want: 0, limit: 4, inflight: 1, quota: 0},
			{name: "quota: renewed", op: "leave", n: 6, status: 200, remaining: 100, limit: 4, inflight: 0, quota: 100},
			{op: "enter", want: 7, limit: 4, inflight: 1, quota: 99},
		}},
		{"acceptance", []row{
			{name: "start: one (its hand-off time is read only once someone waits)", op: "enter", want: 1, limit: 1, inflight: 1, quota: -1},
			{name: "a waiter: the one in flight was handed over by now", op: "enter", want: 0, limit: 1, inflight: 1, quota: -1},
			{name: "acceptance: not before 50 ms without a 429 heard", at: 49 * time.Millisecond, op: "enter", want: 0, limit: 1, inflight: 1, quota: -1},
			{name: "acceptance: at 50 ms the first was accepted: it leaves, the limit doubles", at: 50 * time.Millisecond, op: "enter", want: 2, limit: 2, inflight: 1, quota: -1},
			{at: 50 * time.Millisecond, op: "enter", want: 3, limit: 2, inflight: 2, quota: -1},
			{at: 50 * time.Millisecond, op: "enter", want: 0, limit: 2, inflight: 2, quota: -1},
			{name: "acceptance: each accepted one doubles, within the cap", at: 100 * time.Millisecond, op: "enter", want: 4, limit: 4, inflight: 1, quota: -1},
			{name: "acceptance: an accepted one's 2xx grows nothing more", at: 35 * time.Second, op: "leave", n: 1, status: 200, remaining: -1, limit: 4, inflight: 1, quota: -1},
			{at: 100 * time.Millisecond, op: "enter", want: 5, limit: 4, inflight: 2, quota: -1},
			{at: 100 * time.Millisecond, op: "enter", want: 6, limit: 4, inflight: 3, quota: -1},
			{at: 100 * time.Millisecond, op: "enter", want: 7, limit: 4, inflight: 4, quota: -1},
			{name: "a waiter stamps 4 to 7 at 100 ms", at: 100 * time.Millisecond, op: "enter", want: 0, limit: 4, inflight: 4, quota: -1},
			{name: "acceptance: a 429 that took 400 ms sets the time to 800 ms, and halves", at: 500 * time.Millisecond, op: "leave", n: 4, status: http.StatusTooManyRequests, remaining: -1, limit: 2, inflight: 3, quota: -1},
			{at: 899 * time.Millisecond, op: "enter", want: 0, limit: 2, inflight: 3, quota: -1},
			{name: "acceptance: 800 ms after they were known in flight", at: 900 * time.Millisecond, op: "enter", want: 8, limit: 4, inflight: 1, quota: -1},
			{at: 900 * time.Millisecond, op: "enter", want: 9, limit: 4, inflight: 2, quota: -1},
			{at: 900 * time.Millisecond, op: "enter", want: 10, limit: 4, inflight: 3, quota: -1},
			{at: 900 * time.Millisecond, op: "enter", want: 11, limit: 4, inflight: 4, quota: -1},
			{at: 900 * time.Millisecond, op: "enter", want: 0, limit: 4, inflight: 4, quota: -1},
			{at: 1700 * time.Millisecond, op: "enter", want: 12, limit: 4, inflight: 1, quota: -1},
			{name: "acceptance: an accepted one's 429 still halves", at: 2 * time.Second, op: "leave", n: 9, status: http.StatusTooManyRequests, remaining: -1, limit: 2, inflight: 1, quota: -1},
		}},
		{"acceptance-quota", []row{
			{op: "enter", want: 1, limit: 1, inflight: 1, quota: -1},
			{name: "the server says none remains", op: "leave", n: 1, status: 200, remaining: 0, limit: 2, inflight: 0, quota: 0},
			{op: "enter", want: 2, limit: 2, inflight: 1, quota: 0},
			{name: "at quota 0 none is accepted: one at a time, however long", at: 10 * time.Second, op: "enter", want: 0, limit: 2, inflight: 1, quota: 0},
		}},
		{"quota-expires", []row{
			{op: "enter", want: 1, limit: 1, inflight: 1, quota: -1},
			{name: "3 remain", op: "leave", n: 1, status: 200, remaining: 3, limit: 2, inflight: 0, quota: 3},
			{op: "enter", want: 2, limit: 2, inflight: 1, quota: 2},
			{at: 10 * time.Millisecond, op: "leave", n: 2, status: 200, remaining: -1, limit: 3, inflight: 0, quota: 2},
			{name: "fresh for a minute after it was said", at: 59 * time.Second, op: "enter", want: 3, limit: 3, inflight: 1, quota: 1},
			{at: 59 * time.Second, op: "leave", n: 3, status: 200, remaining: -1, limit: 4, inflight: 0, quota: 1},
			{name: "then unknown: it binds nothing", at: time.Minute, op: "enter", want: 4, limit: 4, inflight: 1, quota: -1},
			{name: "newer news binds again", at: time.Minute, op: "leave", n: 4, status: 200, remaining: 1, limit: 4, inflight: 0, quota: 1},
			{at: time.Minute, op: "enter", want: 5, limit: 4, inflight: 1, quota: 0},
			{at: time.Minute, op: "enter", want: 0, limit: 4, inflight: 1, quota: 0},
		}},
		{"503-changes-nothing", []row{
			{op: "enter", want: 1, limit: 1, inflight: 1, quota: -1},
			{op: "leave", n: 1, status: 200, remaining: -1, limit: 2, inflight: 0, quota: -1},
			{op: "enter", want: 2, limit: 2, inflight: 1, quota: -1},
			{name: "a 503 neither grows nor halves (only a restricting 429 halves)", op: "leave", n: 2, status: http.StatusServiceUnavailable, remaining: -1, limit: 2, inflight: 0, quota: -1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRoom()
			for i, s := range tc.rows {
				switch s.op {
				case "enter":
					if got := r.enter(fixed(t0.Add(s.at)), cap, nil); got != s.want {
						t.Fatalf("row %d %q: enter = %d, want %d", i, s.name, got, s.want)
					}
				case "leave":
					r.leave(fixed(t0.Add(s.at)), cap, s.n, s.status, s.remaining)
				}
				if r.limit != s.limit || r.inflight != s.inflight || r.quota != s.quota {
					t.Fatalf("row %d %q: limit %d in flight %d quota %d, want %d %d %d", i, s.name, r.limit, r.inflight, r.quota, s.limit, s.inflight, s.quota)
				}
			}
		})
	}
}

// TestRoomQueueOrder: a waiter that queued is handed over before one that
// comes later, and the next waiter is woken only when there is room.
func TestRoomQueueOrder(t *testing.T) {
	r := newRoom()
	if r.enter(fixed(t0), 4, nil) != 1 {
		t.Fatal("first enter waited")
	}
	a, b := &roomWaiter{}, &roomWaiter{}
	r.queue = append(r.queue, a, b)
	r.wakeHead(4)
	if a.woken || b.woken {
		t.Fatal("woken without room")
	}
	if r.enter(fixed(t0), 4, b) != 0 || r.enter(fixed(t0), 4, nil) != 0 {
		t.Fatal("b or a newcomer went before a")
	}
	r.leave(fixed(t0), 4, 1, 200, -1)
	r.wakeHead(4)
	if !a.woken || b.woken {
		t.Fatalf("woken a=%v b=%v, want a only", a.woken, b.woken)
	}
	if r.enter(fixed(t0), 4, a) != 2 || len(r.queue) != 1 || r.queue[0] != b {
		t.Fatalf("a not handed over first; queue %v", r.queue)
	}
	if r.enter(fixed(t0), 4, b) != 3 {
		t.Fatal("b not handed over with room left")
	}
}

func TestRemainingQuota(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    map[string]string
		want int
	}{
		{"none", map[string]string{"Content-Type": "text/plain"}, -1},
		{"openai requests", map[string]string{"x-ratelimit-remaining-requests": "7"}, 7},
		{"openai least of requests and tokens", map[string]string{"x-ratelimit-remaining-requests": "7", "x-ratelimit-remaining-tokens": "0"}, 0},
		{"arm reads", map[string]string{"x-ms-ratelimit-remaining-subscription-reads": "11999"}, 11999},
		{"arm malformed resource form ignored", map[string]string{"x-ms-ratelimit-remaining-resource": "Microsoft.Compute/GetVM3Min;107", "x-ms-ratelimit-remaining-subscription-writes": "5"}, 5},
		{"negative is unknown", map[string]string{"x-ratelimit-remaining-requests": "-1"}, -1},
		{"malformed is unknown", map[string]string{"x-ratelimit-remaining-requests": "7.5"}, -1},
		{"empty is unknown", map[string]string{"x-ratelimit-remaining-requests": ""}, -1},
		{"overlong is unknown", map[string]string{"x-ratelimit-remaining-tokens": "99999999999999999999"}, -1},
		{"reset headers are not quota", map[string]string{"x-ratelimit-reset-requests": "1s"}, -1},
	} {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		if got := remainingQuota(h); got != tc.want {
			t.Errorf("%s: remainingQuota = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestRoomSoftCap: the base's own connection limit is a soft cap (-n):
// the room ramps to it as to a cap, then holds nothing back while no quota
// is known; a restricting 429 makes it hold again, and a quota too.
func TestRoomSoftCap(t *testing.T) {
	r := newRoom()
	const soft = -2
	if r.enter(fixed(t0), soft, nil) != 1 || r.enter(fixed(t0), soft, nil) != 0 {
		t.Fatal("start: want one, then wait")
	}
	r.leave(fixed(t0), soft, 1, 200, -1)
	if r.enter(fixed(t0), soft, nil) != 2 {
		t.Fatal("after a 2xx: want a second one")
	}
	r.leave(fixed(t0), soft, 2, 200, -1)
	if r.limit != 2 {
		t.Fatalf("limit %d, want 2", r.limit)
	}
	for i := range 5 {
		if r.enter(fixed(t0), soft, nil) == 0 {
			t.Fatalf("grown to the soft cap: request %d held", i)
		}
	}
	if r.inflight != 5 {
		t.Fatalf("in flight %d, want 5 (counted, not held)", r.inflight)
	}
	r.leave(fixed(t0), soft, r.handed, http.StatusTooManyRequests, -1)
	if r.limit != 1 || r.enter(fixed(t0), soft, nil) != 0 {
		t.Fatalf("after a 429: limit %d and not held", r.limit)
	}
	for n := uint64(3); n <= 5; n++ {
		r.leave(fixed(t0), soft, n, http.StatusNotFound, -1) // statuses that change nothing
	}
	r.leave(fixed(t0), soft, 6, 200, 3) // the latest answer: a 2xx (limit 2) and a quota
	if r.quota != 3 || r.enter(fixed(t0), soft, nil) == 0 || r.enter(fixed(t0), soft, nil) == 0 || r.enter(fixed(t0), soft, nil) != 0 {
		t.Fatalf("a known quota: want the hard cap 2 to hold (quota %d)", r.quota)
	}
}

func TestQuotaReset(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    map[string]string
		want time.Duration
	}{
		{"none", map[string]string{"x-ratelimit-remaining-requests": "0"}, -1},
		{"openai duration", map[string]string{"x-ratelimit-reset-requests": "1s"}, time.Second},
		{"openai minutes", map[string]string{"x-ratelimit-reset-tokens": "6m0s"}, 6 * time.Minute},
		{"above an hour is unknown", map[string]string{"x-ratelimit-reset-tokens": "61m"}, -1},
		{"openai milliseconds", map[string]string{"x-ratelimit-reset-requests": "12ms"}, 12 * time.Millisecond},
		{"the longer of requests and tokens", map[string]string{"x-ratelimit-reset-requests": "200ms", "x-ratelimit-reset-tokens": "1.5s"}, 1500 * time.Millisecond},
		{"decimal seconds", map[string]string{"x-ratelimit-reset-requests": "0.25"}, 250 * time.Millisecond},
		{"zero is unknown", map[string]string{"x-ratelimit-reset-requests": "0s"}, -1},
		{"negative is unknown", map[string]string{"x-ratelimit-reset-requests": "-1s"}, -1},
		{"malformed is unknown", map[string]string{"x-ratelimit-reset-requests": "soon"}, -1},
		{"NaN is unknown", map[string]string{"x-ratelimit-reset-requests": "NaN"}, -1},
		{"a date is unknown", map[string]string{"x-ratelimit-reset-requests": "Wed, 02 Dec 2026 01:00:00 GMT"}, -1},
		{"a malformed one leaves the valid other", map[string]string{"x-ratelimit-reset-requests": "x", "x-ratelimit-reset-tokens": "2s"}, 2 * time.Second},
	} {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		if got := quotaReset(h); got != tc.want {
			t.Errorf("%s: quotaReset = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRoomQuotaResetSteps (docs/policy.md: quota-headers), at fixed times:
// a quota at 0 with a reset holds every request, the one-at-a-time probe
// included, until the reset; at the reset the quota is unknown again and
// the room hands over as its limit allows; a quota above 0 ends a hold.
func TestRoomQuotaResetSteps(t *testing.T) {
	r := newRoom()
	if r.enter(fixed(t0), 4, nil) != 1 {
		t.Fatal("start: want one")
	}
	r.leave(fixed(t0), 4, 1, 200, 0)
	r.noteReset(t0, 0, time.Second)
	if r.quota != 0 || !r.quotaUntil.Equal(t0.Add(time.Second)) {
		t.Fatalf("quota %d until %v, want 0 until +1s", r.quota, r.quotaUntil)
	}
	if got := r.renew(t0.Add(999 * time.Millisecond)); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("renew before the reset = %v, want the hold kept", got)
	}
	if r.enter(fixed(t0), 4, nil) != 0 {
		t.Fatal("held: the probe went before the reset, with nothing in flight")
	}
	r.noteReset(t0, 0, 500*time.Millisecond)
	if !r.quotaUntil.Equal(t0.Add(time.Second)) {
		t.Fatal("a shorter reset shortened the hold")
	}
	if got := r.renew(t0.Add(time.Second)); !got.IsZero() || r.quota != 1 {
		t.Fatalf("at the reset: hold %v quota %d, want none and the peak (0 remained after the one that asked: 1)", got, r.quota)
	}
	if r.enter(fixed(t0), 4, nil) != 2 || r.enter(fixed(t0), 4, nil) != 0 {
		t.Fatal("renewed: want the peak quota (1) handed over, no more")
	}
	r.quota = -1 // (as if a peak of 2 had been seen)
	if r.enter(fixed(t0), 4, nil) != 3 {
		t.Fatal("renewed: want the room's limit (2)")
	}
	// The answers of 2 and 3 come back in the other order: 3 says 5
	// remain (4 less 2 in flight), 2 then says 0: the lower wins, and its
	// reset holds again.
	if !r.leave(fixed(t0), 4, 3, 200, 5) || r.quota != 4 {
		t.Fatalf("3's answer: quota %d, want 4", r.quota)
	}
	r.noteReset(t0.Add(time.Second), r.quota, -1)
	if !r.leave(fixed(t0), 4, 2, 200, 0) || r.quota != 0 {
		t.Fatalf("2's answer: quota %d, want 0", r.quota)
	}
	r.noteReset(t0.Add(time.Second), r.quota, time.Second)
	if !r.quotaUntil.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("hold until %v, want +2s", r.quotaUntil)
	}
	// An answer of a request handed over before 2's answer came, saying
	// more remain, is older news.
	r.inflight++ // (one more, handed over before 2's answer came)
	if r.leave(fixed(t0), 4, 3, 200, 7) || r.quota != 0 {
		t.Fatalf("an older answer raised the quota to %d", r.quota)
	}
	// A quota above 0 from a request handed over later ends a hold.
	r.noteReset(t0.Add(time.Second), 5, -1)
	if !r.quotaUntil.IsZero() {
		t.Fatalf("a quota of 5 kept the hold until %v", r.quotaUntil)
	}
}

// TestRoomRules: the state machine's decision for a request the scope's
// room has no place for (docs/policy.md: scope-room, quota-headers), as
// step rows at fixed times: a wait against the ceiling and the total that
// opens no window; a quota that renews (its reset headers) beyond the
// ceiling or the total stops the sequence at once, before any network
// access, not when the ceiling comes.
func TestRoomRules(t *testing.T) {
	noRoom := func(renew time.Duration, claimed bool) *request {
		r := &request{noRoom: true, roomSince: t0, claimed: claimed, roomPlan: &waitPlan{trigger: triggerRoom}}
		if renew > 0 {
			r.roomRenew = t0.Add(renew)
		}
		return r
	}
	for _, tc := range []struct {
		rule   string
		limits limits
		steps  []decide
	}{
		{"scope-room: no room is a wait until the ceiling; it opens no window", limits{}, []decide{
			{at: 0, req: noRoom(0, false), want: waitTill(MaxServerWait)},
			{at: s1, req: &request{claimed: true}, want: sendNow(1)},
			{at: s1, in: read429(s1), want: resendAt(s2)}, // its own 429 still has its window
		}},
		{"scope-room: past the ceiling the sequence stops as restricted", limits{wait: s1, waitSet: true}, []decide{
			{at: 0, req: noRoom(0, false), want: waitTill(s1)},
			{at: s1, req: noRoom(0, true), want: refused(StopRestricted)},
		}},
		{"quota-headers: a quota that renews within the ceiling waits (the call asks again at the renewal)", limits{}, []decide{
			{at: 0, req: noRoom(s1, false), want: waitTill(MaxServerWait)},
			{at: s1, req: &request{claimed: true}, want: sendNow(1)},
		}},
		{"quota-headers: a quota that renews beyond the ceiling stops at once", limits{wait: s1, waitSet: true}, []decide{
			{at: 0, req: noRoom(s2, false), want: refused(StopRestricted)},
		}},
		{"quota-headers: a quota that renews at the total's end stops at once", limits{total: s2}, []decide{
			{at: 0, req: noRoom(s2, false), want: refused(StopRestricted)},
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			runSteps(t, &sequence{name: "s", limits: tc.limits}, tc.steps)
		})
	}
}

// TestRoomHistory (docs/policy.md: release-ramp, "Start"): what a new
// restriction's pace starts from is the 2xx since the scope's last
// restriction, the first's arrival its start; a 2xx of a request handed
// over before that restriction is its burst (a straggler), not history.
func TestRoomHistory(t *testing.T) {
	r := newRoom()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r.enter(fixed(at(0)), 4, nil)
	r.leave(fixed(at(10)), 4, 1, 200, -1)
	r.enter(fixed(at(10)), 4, nil)
	r.enter(fixed(at(10)), 4, nil)
	if h := r.takeHistory(); h != (history{ok: 1, first: at(10)}) {
		t.Fatalf("history %+v, want 1 2xx from +10 ms", h)
	}
	r.leave(fixed(at(20)), 4, 2, 200, -1) // handed over before the restriction
	if r.okN != 0 || !r.okFirst.IsZero() || r.late0 != 1 {
		t.Fatalf("a straggler's 2xx: okN %d first %v late %d, want 0, none, 1", r.okN, r.okFirst, r.late0)
	}
	r.enter(fixed(at(30)), 4, nil)
	r.leave(fixed(at(30)), 4, 4, 200, -1)
	r.enter(fixed(at(40)), 4, nil)
	r.leave(fixed(at(40)), 4, 5, 200, -1)
	if n := r.takeStragglers(); n != 1 {
		t.Fatalf("stragglers %d, want 1", n)
	}
	if h := r.takeHistory(); h != (history{ok: 2, first: at(30)}) {
		t.Fatalf("history %+v, want 2 2xx from +30 ms (the first after the restriction starts it)", h)
	}
}

// fixed is the instant t, as the step tables give it.
func fixed(t time.Time) *instant { return &instant{t: t, known: true} }

// TestRoomQuotaPeakRenews (docs/policy.md: quota-headers): a reset renews
// the quota to the most the server ever said remain plus the one that
// asked: 5 remained after one request, so 6 at the reset (not 5: the
// request that was answered "5" was one of them).
func TestRoomQuotaPeakRenews(t *testing.T) {
	r := newRoom()
	if r.enter(fixed(t0), 8, nil) != 1 {
		t.Fatal("start: want one")
	}
	if !r.leave(fixed(t0), 8, 1, 200, 5) || r.quota != 5 {
		t.Fatalf("1's answer: quota %d, want 5", r.quota)
	}
	if r.enter(fixed(t0), 8, nil) != 2 {
		t.Fatal("want 2 handed over")
	}
	if !r.leave(fixed(t0), 8, 2, 200, 0) || r.quota != 0 {
		t.Fatalf("2's answer: quota %d, want 0", r.quota)
	}
	r.noteReset(t0, 0, time.Second)
	if got := r.renew(t0.Add(time.Second)); !got.IsZero() || r.quota != 6 {
		t.Fatalf("at the reset: hold %v quota %d, want none and 6 (5 remained after the one that asked)", got, r.quota)
	}
}
