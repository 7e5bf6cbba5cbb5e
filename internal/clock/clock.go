// Package clock is the module's internal seam for time: the transport, the
// budget and the journal read "now" and sleep through a Clock, so tests can
// drive them with a fake. It is not a public option, nor a flag of the
// command (docs/policy.md, "clock-is-internal").
package clock

import (
	"context"
	"time"
)

// Clock tells the time and sleeps.
type Clock interface {
	// Now returns the current time, with a monotonic reading when real.
	Now() time.Time
	// Sleep waits for d or until ctx is done, whichever comes first, and
	// returns ctx's error in the second case. d <= 0 returns at once.
	Sleep(ctx context.Context, d time.Duration) error
	// AfterFunc calls f in its own goroutine after d; stop cancels it.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Real is the clock of the time package. Under testing/synctest it is the
// bubble's fake clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Sleep waits with a timer that honours ctx.
func (Real) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
