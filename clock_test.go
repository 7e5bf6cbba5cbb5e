package readrecovery

import (
	"context"
	"sync"
	"time"
)

// fakeClock is a manual clock: Sleep advances it at once and records the
// duration.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	t0    time.Time
	slept []time.Duration
}

func (c *fakeClock) start() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t0.IsZero() {
		return c.now
	}
	return c.t0
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t0.IsZero() {
		c.t0 = c.now
	}
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func (c *fakeClock) AfterFunc(time.Duration, func()) func() bool { return func() bool { return true } }
