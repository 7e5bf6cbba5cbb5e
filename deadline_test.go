package readrecovery

import (
	"context"
	"math/rand/v2"
	"net/http"
	"runtime"
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
		pushed, at = pushMostlyInOrder(&d, rng, 5*deadlineChunk, at, 10, 3, pushed)
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

// pushMostlyInOrder pushes n entries from time at on: one in outOfOrder at
// a random earlier time (to the heap), the others at at, which moves on by
// a random step below step (0 included: equal times). It returns pushed
// with the times appended, and the time reached.
func pushMostlyInOrder(d *deadlines, rng *rand.Rand, n int, at int64, outOfOrder int, step int64, pushed []int64) ([]int64, int64) {
	for range n {
		e := deadlineEntry{at: at}
		if rng.IntN(outOfOrder) == 0 {
			e.at = rng.Int64N(at + 1)
		} else {
			at += rng.Int64N(step)
		}
		d.pushLocked(e)
		pushed = append(pushed, e.at)
	}
	return pushed, at
}

// Filtering the queue keeps exactly the entries kept, in time order, in
// both the FIFO and the heap, and the queue goes on working after it.
func TestDeadlineQueueFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, keepEvery := range []int64{1, 2, 3, 7, 1000} {
		var d deadlines
		all, at := pushMostlyInOrder(&d, rng, 3*deadlineChunk+17, 0, 8, 2, nil)
		slices.Sort(all)
		for range 5 { // a head inside the first chunk
			require.Equal(t, all[0], d.popLocked().at)
			all = all[1:]
		}
		var want []int64
		for _, v := range all {
			if v%keepEvery == 0 {
				want = append(want, v)
			}
		}
		d.q.filter(func(e *deadlineEntry) bool { return e.at%keepEvery == 0 })
		d.h.filter(func(e *deadlineEntry) bool { return e.at%keepEvery == 0 })
		require.Equal(t, len(want), d.len(), "keep every %d", keepEvery)
		d.pushLocked(deadlineEntry{at: at + 1})
		want = append(want, at+1)
		slices.Sort(want)
		var got []int64
		for d.len() > 0 {
			got = append(got, d.popLocked().at)
		}
		require.Equal(t, want, got, "keep every %d", keepEvery)
	}
}

// A finished sequence's entry goes once the garbage collector has freed its
// Budget: after 3,000 one-request sequences whose Budgets are dropped, a
// compaction leaves only the entry of the sequence still held, which is
// still cut off at its own deadline.
func TestFinishedSequencesLeaveTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newOK())
		kept := NewBudget("kept", MaxTotal(10*time.Second))
		keptCtx := WithBudget(context.Background(), kept)
		_, err := tr.RoundTrip(get(t, keptCtx, base+"/kept"))
		require.NoError(t, err)
		finishSequences(t, tr, 3000)
		runtime.GC()
		tr.deadlines.mu.Lock()
		tr.deadlines.compactLocked()
		n := tr.deadlines.len()
		tr.deadlines.mu.Unlock()
		assert.Equal(t, 1, n, "only the held sequence's entry stays")

		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.ErrorIs(t, keptCtx.Err(), context.DeadlineExceeded)
		_, err = tr.RoundTrip(get(t, keptCtx, base+"/kept"))
		assert.Equal(t, StopTotalExhausted, stopReason(err))
	})
}

// Compaction keeps an entry whose Budget is gone when it carries the cancel
// functions of contexts made from a cancelable parent: the parent holds
// them until they are released at the deadline.
func TestCompactionKeepsCuts(t *testing.T) {
	var d deadlines
	cuts := &cutList{}
	d.pushLocked(deadlineEntry{at: 1})
	d.pushLocked(deadlineEntry{at: 2, cuts: cuts})
	d.pushLocked(deadlineEntry{at: 3})
	d.compactLocked()
	require.Equal(t, 1, d.len())
	assert.Same(t, cuts, d.popLocked().cuts)
	assert.Equal(t, deadlineCompactMin, d.compactAt)
}

// finishSequences runs n one-request sequences on tr and drops them.
//
//go:noinline
func finishSequences(t *testing.T, tr *Transport, n int) {
	for range n {
		_, err := tr.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("done")), base+"/x"))
		require.NoError(t, err)
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
