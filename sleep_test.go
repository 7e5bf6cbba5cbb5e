package readrecovery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heldClock's Sleep blocks until its context ends or the test lets the
// sleep run out (ranOut), so that a test decides what ends a wait.
type heldClock struct {
	fakeClock
	sleeping chan struct{} // a Sleep began
	ranOut   chan struct{} // the sleep's duration passes
}

func (c *heldClock) Sleep(ctx context.Context, d time.Duration) error {
	c.sleeping <- struct{}{}
	select {
	case <-c.ranOut:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSleepForEndings: how a wait ends decides what the waiting request
// gets and whether it keeps its claim on the sequence's request limit
// (sleepUntil's and sleepRoom's one tail, call.sleepFor).
func TestSleepForEndings(t *testing.T) {
	errFree := errors.New("test: the waker's good news")
	tests := []struct {
		name       string
		end        func(c *call, wake context.CancelCauseFunc, cancelReq context.CancelFunc, clk *heldClock)
		done       error
		wantErr    error      // nil: the wait ended well
		wantStop   StopReason // with ErrSequenceStopped
		wantClaims int        // the request's claim: kept (1) or given back (0)
	}{
		{name: "ran-out", end: func(_ *call, _ context.CancelCauseFunc, _ context.CancelFunc, clk *heldClock) {
			clk.ranOut <- struct{}{}
		}, wantClaims: 1},
		{name: "woken-with-done", done: errFree, end: func(_ *call, wake context.CancelCauseFunc, _ context.CancelFunc, _ *heldClock) {
			wake(errFree)
		}, wantClaims: 1},
		{name: "sequence-stopped", end: func(c *call, _ context.CancelCauseFunc, _ context.CancelFunc, _ *heldClock) {
			c.b.s.stopWith(StopPersistent429, "test", 429, "id-1", nil)
		}, wantErr: ErrSequenceStopped, wantStop: StopPersistent429, wantClaims: 0},
		{name: "request-context-ended", end: func(_ *call, _ context.CancelCauseFunc, cancelReq context.CancelFunc, _ *heldClock) {
			cancelReq()
		}, wantErr: context.Canceled, wantClaims: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &heldClock{sleeping: make(chan struct{}), ranOut: make(chan struct{})}
			tr := New(newScript(sequenceOf(reply(200))), withClock(clk))
			b := NewBudget("sleep")
			b.s.claimed = 1 // the waiting request's claim
			ctx, cancelReq := context.WithCancel(context.Background())
			defer cancelReq()
			c := &call{t: tr, ctx: ctx, b: b}
			wctx, wake := context.WithCancelCause(ctx)
			defer wake(nil)

			got := make(chan error, 1)
			go func() { got <- c.sleepFor(wctx, wake, time.Second, tc.done) }()
			<-clk.sleeping
			tc.end(c, wake, cancelReq, clk)
			err := <-got

			switch {
			case tc.wantErr == nil:
				assert.NoError(t, err)
			default:
				require.ErrorIs(t, err, tc.wantErr)
			}
			if tc.wantStop != "" {
				assert.Equal(t, tc.wantStop, stopReason(err))
			}
			assert.Equal(t, tc.wantClaims, b.s.claimed, "the request's claim")
			assert.Empty(t, b.s.rare.waiters, "the waiter is removed")
		})
	}
}
