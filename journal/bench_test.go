package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkAppendEntry measures Begin+Backoff with real fsyncs on this
// machine's disk: one marker and one entry, 7 fsyncs. A new run is started
// every 200 entries (outside the timer).
func BenchmarkAppendEntry(b *testing.B) {
	var j *Journal
	var clk *fakeClock
	n := 0
	req := putReq(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if j == nil || n == MaxEntries {
			b.StopTimer()
			clk = newFakeClock(t0)
			var err error
			j, err = Open(filepath.Join(b.TempDir(), "run"), withClock(clk))
			if err != nil {
				b.Fatal(err)
			}
			n = 0
			b.StartTimer()
		}
		now := t0.Add(time.Duration(n) * time.Second)
		clk.Set(now)
		if err := j.Begin(ctx, req); err != nil {
			b.Fatal(err)
		}
		if _, err := j.Backoff(ctx, req, out429("r"), secs(0), timing(now, 0)); err != nil {
			b.Fatal(err)
		}
		n++
	}
}

// BenchmarkStatusFull measures OpenExisting (full verification) and Status
// of a run holding 200 entries. Target: at most 10 ms. The sub-benchmarks
// add 100 receipts, and 800 receipts (the 1001-file maximum at rest).
func BenchmarkStatusFull(b *testing.B) {
	for _, receipts := range []int{0, 100, 800} {
		b.Run(fmt.Sprintf("receipts=%d", receipts), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "run")
			plan := manyFiles(receipts)
			writeRun(b, dir, plan, t0, make([]int64, MaxEntries), ids(plan))
			now := t0.Add(time.Hour)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j, err := OpenExisting(dir)
				if err != nil {
					b.Fatal(err)
				}
				if st := j.Status(now); st.State != Elapsed {
					b.Fatal(st)
				}
			}
		})
	}
}
