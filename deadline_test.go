package readrecovery

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One timer serves every sequence of a transport: three sequences with
// totals of 3, 1 and 2 s each have a request in flight cut at exactly its
// own deadline, and the heap of cut-offs is empty after.
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
		tr.cuts.mu.Lock()
		assert.Zero(t, tr.cuts.h.Len(), "every cut-off done")
		assert.Nil(t, tr.cuts.stop, "no timer left")
		tr.cuts.mu.Unlock()
	})
}

// total-cuts-off: the context WithBudget returns keeps the context contract
// (its Deadline is the same on every call, before and after the first
// request), and when the total runs out the context and every context
// derived from it report the total's stop as their cause.
func TestBudgetContextContract(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newScript(sequenceOf(reply(200))))
		for _, parent := range []struct {
			name string
			ctx  func() (context.Context, context.CancelFunc)
		}{
			{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
			{"parent deadline", func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), time.Hour)
			}},
		} {
			pctx, cancel := parent.ctx()
			b := NewBudget("readback", MaxTotal(5*time.Second))
			ctx := WithBudget(pctx, b)
			wantD, wantOK := pctx.Deadline()
			d, ok := ctx.Deadline()
			assert.Equal(t, [2]any{wantD, wantOK}, [2]any{d, ok}, parent.name)
			child, cancelChild := context.WithCancel(ctx)
			resp, err := tr.RoundTrip(get(t, ctx, base+"/a"))
			require.NoError(t, err)
			drain(resp)
			d, ok = ctx.Deadline()
			assert.Equal(t, [2]any{wantD, wantOK}, [2]any{d, ok}, "%s: the same after the first request", parent.name)
			assert.NoError(t, child.Err())

			time.Sleep(5 * time.Second)
			synctest.Wait()
			for _, c := range []context.Context{ctx, child} {
				require.Error(t, c.Err(), parent.name)
				cause := context.Cause(c)
				assert.ErrorIs(t, cause, ErrSequenceStopped, parent.name)
				assert.ErrorIs(t, cause, context.DeadlineExceeded, parent.name)
				assert.Equal(t, StopTotalExhausted, stopReason(cause), parent.name)
			}
			// A context made from the Budget after its total ran out is cut
			// off at once.
			late := WithBudget(pctx, b)
			synctest.Wait()
			assert.Equal(t, StopTotalExhausted, stopReason(context.Cause(late)))
			cancelChild()
			cancel()
		}
	})
}

// total-cuts-off: a body cut off by the total returns an error matching
// ErrSequenceStopped, and the report records the stop.
func TestTotalCutsOffBodyRecordsStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			r := reply(200)(req)
			r.Body = stalledBody{ctx: req.Context()}
			return r, nil
		})
		b := NewBudget("download", MaxTotal(4*time.Second))
		ctx := WithBudget(context.Background(), b)
		resp, err := New(srv).RoundTrip(get(t, ctx, base+"/blob"))
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.ErrorIs(t, err, ErrSequenceStopped)
		assert.Equal(t, StopTotalExhausted, stopReason(err))
		assert.Equal(t, StopTotalExhausted, b.Report().Stop)
		var nr interface{ NonRetriable() }
		assert.True(t, errors.As(err, &nr))
	})
}

// The heap of cut-offs drops the entries of finished sequences once it has
// doubled since the last sweep: 3000 sequences whose Budgets are dropped
// leave fewer than 2·minSweep entries, while a live sequence and a pinned
// context (made from a cancelable parent, which alone still holds it) keep
// theirs and are still cut off at their deadline.
func TestCutoffsSweepFinishedSequences(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := New(newScript(sequenceOf(reply(http.StatusOK))))
		send := func(ctx context.Context) {
			resp, err := tr.RoundTrip(get(t, ctx, base+"/x"))
			require.NoError(t, err)
			resp.Body.Close()
		}
		live := NewBudget("live", MaxTotal(10*time.Second))
		liveCtx := WithBudget(context.Background(), live)
		send(liveCtx)
		parent, cancelParent := context.WithCancel(context.Background())
		defer cancelParent()
		// The pinned context and its Budget are dropped: only parent holds
		// the context, and the test its Done channel.
		pinnedDone := func() <-chan struct{} {
			ctx := WithBudget(parent, NewBudget("pinned", MaxTotal(10*time.Second)))
			send(ctx)
			return ctx.Done()
		}()
		for range 3000 {
			send(WithBudget(context.Background(), NewBudget("dropped")))
			if tr.cuts.h.Len()%500 == 0 {
				runtime.GC() // the dropped Budgets' weak pointers go nil
			}
		}
		runtime.GC()
		send(WithBudget(context.Background(), NewBudget("last")))
		tr.cuts.mu.Lock()
		n := tr.cuts.h.Len()
		tr.cuts.mu.Unlock()
		assert.Less(t, n, 2*minSweep, "entries of dropped sequences swept")
		assert.Greater(t, n, 1, "the live and the pinned entries kept")

		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.Equal(t, StopTotalExhausted, stopReason(context.Cause(liveCtx)), "the live sequence still cut off")
		select {
		case <-pinnedDone:
		default:
			t.Error("the pinned context was not cut off at its deadline")
		}
		runtime.KeepAlive(live)
	})
}
