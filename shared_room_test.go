package readrecovery

import (
	"net/http"
	"testing"
)

// TestRoomSteps is the step table of a scope's room (docs/policy.md:
// scope-room, quota-headers): each row is one event, in order, and the
// state after it. enter is a request asking to be handed over (want: its
// hand-off number, 0 when it must wait); leave is the response of the
// request handed over as number n.
func TestRoomSteps(t *testing.T) {
	type row struct {
		name      string
		op        string // "enter", "leave"
		n         uint64 // leave: which request
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRoom()
			for i, s := range tc.rows {
				switch s.op {
				case "enter":
					if got := r.enter(cap, nil); got != s.want {
						t.Fatalf("row %d %q: enter = %d, want %d", i, s.name, got, s.want)
					}
				case "leave":
					r.leave(cap, s.n, s.status, s.remaining)
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
	if r.enter(4, nil) != 1 {
		t.Fatal("first enter waited")
	}
	a, b := &roomWaiter{}, &roomWaiter{}
	r.queue = append(r.queue, a, b)
	r.wakeHead(4)
	if a.woken || b.woken {
		t.Fatal("woken without room")
	}
	if r.enter(4, b) != 0 || r.enter(4, nil) != 0 {
		t.Fatal("b or a newcomer went before a")
	}
	r.leave(4, 1, 200, -1)
	r.wakeHead(4)
	if !a.woken || b.woken {
		t.Fatalf("woken a=%v b=%v, want a only", a.woken, b.woken)
	}
	if r.enter(4, a) != 2 || len(r.queue) != 1 || r.queue[0] != b {
		t.Fatalf("a not handed over first; queue %v", r.queue)
	}
	if r.enter(4, b) != 3 {
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
	if r.enter(soft, nil) != 1 || r.enter(soft, nil) != 0 {
		t.Fatal("start: want one, then wait")
	}
	r.leave(soft, 1, 200, -1)
	if r.enter(soft, nil) != 2 {
		t.Fatal("after a 2xx: want a second one")
	}
	r.leave(soft, 2, 200, -1)
	if r.limit != 2 {
		t.Fatalf("limit %d, want 2", r.limit)
	}
	for i := range 5 {
		if r.enter(soft, nil) == 0 {
			t.Fatalf("grown to the soft cap: request %d held", i)
		}
	}
	if r.inflight != 5 {
		t.Fatalf("in flight %d, want 5 (counted, not held)", r.inflight)
	}
	r.leave(soft, r.handed, http.StatusTooManyRequests, -1)
	if r.limit != 1 || r.enter(soft, nil) != 0 {
		t.Fatalf("after a 429: limit %d and not held", r.limit)
	}
	r.inflight, r.limit = 1, 2 // (the others came back with statuses that change nothing)
	r.leave(soft, 0, 200, 3)
	if r.quota != 3 || r.enter(soft, nil) == 0 || r.enter(soft, nil) == 0 || r.enter(soft, nil) != 0 {
		t.Fatalf("a known quota: want the hard cap 2 to hold (quota %d)", r.quota)
	}
}
