package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
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
		if j == nil || n == record.MaxEntries {
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
			writeRun(b, dir, plan, t0, make([]int64, record.MaxEntries), ids(plan))
			now := t0.Add(time.Hour)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j, err := Open(dir, Existing())
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

// BenchmarkStagePart measures Begin+Complete of one part of a staged upload
// (claim, check under the claim, part receipt): the cost of
// claim-then-check is the second directory scan. A new run is started
// every 900 parts (outside the timer).
func BenchmarkStagePart(b *testing.B) {
	var j *Journal
	n := 0
	req := putReq(b)
	ctx := WithUploadPart(context.Background(), "a.bin")
	for i := 0; i < b.N; i++ {
		if j == nil || n == 900 {
			b.StopTimer()
			var err error
			j, err = Open(filepath.Join(b.TempDir(), "run"), withClock(newFakeClock(t0)), WithPlan(plan3))
			if err != nil {
				b.Fatal(err)
			}
			n = 0
			b.StartTimer()
		}
		if err := j.Begin(ctx, req); err != nil {
			b.Fatal(err)
		}
		if err := j.Complete(ctx, req, readrecovery.JournalOutcome{StatusCode: 201}); err != nil {
			b.Fatal(err)
		}
		n++
	}
}

// BenchmarkJournaledRequest measures one journaled upload (Begin, then
// Complete with its commit receipt: marker, receipt, head, marker removed)
// per store (the local directory with real fsyncs, the in-memory Store,
// the in-memory Store with ListPrefix, and that store with 2 ms before
// every operation: a store across a network, where the time is the
// store's round trips, not this machine's CPU), per run (shards=0: one marker;
// shards=4: a run WithParallel(4)) and per number of workers: each worker
// is a Journal of its own on the same run (WithPendingWait, as the
// workers of a shared run). Without shards the one marker serializes them
// and they share one queue of files; with shards each worker takes the
// files of its own shards (Shard(id) modulo the workers), as workers that
// split a plan by shard do. Each upload is preceded by Admit, as the
// transport does. files/s is the run's rate. A new run is made every 900
// files (outside the timer).
func BenchmarkJournaledRequest(b *testing.B) {
	const perRun = 900
	plan := manyFiles(perRun)
	for _, store := range []string{"dir", "mem", "mem+prefix", "mem+prefix+2ms"} {
		for _, shards := range []int{0, 4} {
			for _, workers := range []int{1, 2, 4} {
				b.Run(fmt.Sprintf("store=%s/shards=%d/workers=%d", store, shards, workers), func(b *testing.B) {
					benchJournaled(b, store, shards, workers, plan)
				})
			}
		}
	}
}

func benchJournaled(b *testing.B, store string, shards, workers int, plan []PlannedFile) {
	perRun := len(plan)
	if store == "mem+prefix+2ms" && b.N > 200 {
		perRun = 200 // a few seconds per run
	}
	var mems []*memStore
	open := func() []*Journal {
		var st Store
		switch store {
		case "dir":
			st = DirStore(filepath.Join(b.TempDir(), "run"))
		case "mem":
			m := newMemStore()
			st, mems = m, append(mems, m)
		default:
			m := newMemStore()
			st, mems = prefixMem{m}, append(mems, m)
		}
		opts := []Option{WithPlan(plan), WithPendingWait(time.Minute)}
		if shards > 0 {
			opts = append(opts, WithParallel(shards))
		}
		js := make([]*Journal, workers)
		for w := range js {
			j, err := OpenStore(context.Background(), st, opts...)
			if err != nil {
				b.Fatal(err)
			}
			js[w] = j
		}
		if m := mems; len(m) > 0 {
			m[len(m)-1].mu.Lock()
			m[len(m)-1].ops = nil // count the requests' operations only
			if store == "mem+prefix+2ms" {
				m[len(m)-1].delay = 2 * time.Millisecond
			}
			m[len(m)-1].mu.Unlock()
		}
		return js
	}
	start := time.Now()
	var paused time.Duration
	for done := 0; done < b.N; {
		n := min(perRun, b.N-done)
		b.StopTimer()
		t := time.Now()
		js := open()
		queues := make([]chan int, workers)
		for w := range queues {
			queues[w] = make(chan int, n)
		}
		for i := range n {
			w := 0
			if shards > 0 {
				w = (js[0].Shard(plan[i].ID) - 1) % workers
			}
			queues[w] <- i
		}
		for _, q := range queues {
			close(q)
		}
		paused += time.Since(t)
		b.StartTimer()
		errs := make(chan error, workers)
		for w, j := range js {
			q := queues[w]
			if shards == 0 {
				q = queues[0] // one queue shared by all
			}
			go func() {
				for i := range q {
					ctx := WithUpload(context.Background(), plan[i].ID)
					if err := j.Admit(ctx, time.Now()); err != nil {
						errs <- err
						return
					}
					if err := j.Begin(ctx, putReq(b)); err != nil {
						errs <- err
						return
					}
					if err := j.Complete(ctx, putReq(b), ok201("r")); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range js {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		done += n
	}
	b.ReportMetric(float64(b.N)/(time.Since(start)-paused).Seconds(), "files/s")
	if len(mems) > 0 {
		ops := map[string]int{}
		for _, m := range mems {
			m.mu.Lock()
			for _, op := range m.ops {
				verb, _, _ := strings.Cut(op, " ")
				ops[verb]++
			}
			m.mu.Unlock()
		}
		for _, verb := range []string{"list", "read", "create", "remove"} {
			b.ReportMetric(float64(ops[verb])/float64(b.N), verb+"s/file")
		}
	}
}
