package readrecovery

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The list keeps the hand-offs in order whichever one goes: the oldest,
// the newest, one in the middle, one it never held.
func TestHandoffsTake(t *testing.T) {
	for _, tc := range []struct {
		name  string
		take  uint64
		ok    bool
		after []uint64
	}{
		{"oldest", 1, true, []uint64{2, 3, 4, 5}},
		{"second", 2, true, []uint64{1, 3, 4, 5}},
		{"middle", 3, true, []uint64{1, 2, 4, 5}},
		{"newest", 5, true, []uint64{1, 2, 3, 4}},
		{"none such", 6, false, []uint64{1, 2, 3, 4, 5}},
		{"older than all", 0, false, []uint64{1, 2, 3, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q handoffs
			for n := uint64(1); n <= 5; n++ {
				q.push(handoff{n: n, at: t0.Add(time.Duration(n))})
			}
			h, ok := q.take(tc.take)
			if ok != tc.ok || (ok && (h.n != tc.take || !h.at.Equal(t0.Add(time.Duration(tc.take))))) {
				t.Fatalf("take(%d) = %+v, %v; want it, %v", tc.take, h, ok, tc.ok)
			}
			if got := numbers(q.all()); !slices.Equal(got, tc.after) || q.len() != len(tc.after) {
				t.Fatalf("after: %v (len %d), want %v", got, q.len(), tc.after)
			}
		})
	}
}

// Against a plain slice as the model, over random pushes, takes and pops,
// the list holds the same hand-offs in the same order; answered mostly in
// order with a thousand in flight, its memory does not grow with the
// hand-offs it has seen.
func TestHandoffsModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var q handoffs
	var model []handoff
	next := uint64(1)
	for step := range 200_000 {
		switch k := rng.IntN(10); {
		case len(model) < 1000 && k < 5:
			h := handoff{n: next, at: t0.Add(time.Duration(next))}
			next++
			q.push(h)
			model = append(model, h)
		case len(model) > 0 && k < 9:
			i := min(rng.IntN(len(model)), rng.IntN(8)) // mostly the oldest few
			if rng.IntN(20) == 0 {
				i = rng.IntN(len(model))
			}
			h, ok := q.take(model[i].n)
			if !ok || h != model[i] {
				t.Fatalf("step %d: take(%d) = %+v, %v", step, model[i].n, h, ok)
			}
			model = slices.Delete(model, i, i+1)
		case len(model) > 0:
			q.popOldest()
			model = model[1:]
		default:
			if _, ok := q.take(next); ok {
				t.Fatalf("step %d: took %d, never pushed", step, next)
			}
			if gone := next - 1 - uint64(rng.IntN(int(next))); !slices.ContainsFunc(model, func(h handoff) bool { return h.n == gone }) {
				if _, ok := q.take(gone); ok {
					t.Fatalf("step %d: took %d, taken already", step, gone)
				}
			}
		}
		if !slices.Equal(q.all(), model) {
			t.Fatalf("step %d: list %v, model %v", step, numbers(q.all()), numbers(model))
		}
	}
	if c := cap(q.list); c > 4096 {
		t.Fatalf("the list's capacity grew to %d for at most 1,000 in flight", c)
	}
}

func numbers(hs []handoff) []uint64 {
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = h.n
	}
	return out
}
