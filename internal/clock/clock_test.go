package clock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The real sleeper waits exactly d, and a cancelled context ends
// the wait at once with the context's error.
func TestRealSleepWaitsExactlyAndEndsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Clock = Real{}
		start := c.Now()
		if err := c.Sleep(context.Background(), 3*time.Second); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Fatalf("slept %v, want 3s", got)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		start = c.Now()
		err := c.Sleep(ctx, time.Minute)
		if !errors.Is(err, context.Canceled) || time.Since(start) != time.Second {
			t.Fatalf("Sleep = %v after %v, want context.Canceled after 1s", err, time.Since(start))
		}
		if err := c.Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("Sleep(0) on a cancelled context = %v", err)
		}
		fired := false
		stop := c.AfterFunc(time.Second, func() { fired = true })
		if !stop() {
			t.Fatal("stop of a pending AfterFunc must report true")
		}
		time.Sleep(2 * time.Second)
		if fired {
			t.Fatal("a stopped AfterFunc fired")
		}
	})
}
