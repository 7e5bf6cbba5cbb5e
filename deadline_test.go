package readrecovery

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The deadline heap pops entries in time order, however they were pushed.
func TestDeadlineHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h deadlineHeap
	for range 1000 {
		h.push(deadlineEntry{at: rng.Int64N(1_000_000)})
	}
	last := int64(-1)
	for len(h) > 0 {
		e := h.pop()
		require.GreaterOrEqual(t, e.at, last)
		last = e.at
	}
}

// The deadline queue pops entries in time order when most come in order
// (the FIFO) and some do not (the heap), across many chunks, and reuses an
// emptied chunk.
func TestDeadlineQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var d deadlines
	var pushed []int64
	at := int64(0)
	for round := range 3 {
		for range 5 * deadlineChunk {
			e := deadlineEntry{at: at}
			if rng.IntN(10) == 0 {
				e.at = rng.Int64N(at + 1) // out of order
			} else {
				at += rng.Int64N(3)
			}
			d.pushLocked(e)
			pushed = append(pushed, e.at)
		}
		require.Equal(t, len(pushed), d.len())
		require.NotZero(t, len(d.h), "some entries went to the heap")
		slices.Sort(pushed)
		var popped []int64
		for d.len() > 0 {
			popped = append(popped, d.popLocked().at)
		}
		require.Equal(t, pushed, popped, "round %d", round)
		require.Empty(t, d.q.chunks)
		require.NotNil(t, d.q.spare, "an emptied chunk is kept for reuse")
		pushed = pushed[:0]
	}
}

// One timer serves every sequence of a transport: three sequences with
// totals of 3, 1 and 2 s each have a request in flight cut at exactly its
// own deadline.
func TestOneTimerCutsEachSequenceAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			<-req.Context().Done()
			return nil, req.Context().Err()
		})
		tr := New(srv)
		t0 := time.Now()
		ended := make(chan time.Duration, 3)
		for _, total := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
			go func() {
				b := NewBudget("s", MaxTotal(total))
				_, err := tr.RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
				assert.Equal(t, StopTotalExhausted, stopReason(err))
				ended <- time.Since(t0)
			}()
		}
		got := []time.Duration{<-ended, <-ended, <-ended}
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, got)
		tr.deadlines.mu.Lock()
		assert.Zero(t, tr.deadlines.len(), "every entry popped")
		tr.deadlines.mu.Unlock()
	})
}
