package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Scenario 3's shape.
const (
	concurrentSequences = 1000
	// throttledEvery: one sequence in throttledEvery meets one 429
	// ("Retry-After: 0") on a page drawn at random.
	throttledEvery = 4
	// concurrentConns is every contender's per-host connection limit in
	// scenario 3 (go-cleanhttp's pooled default keeps GOMAXPROCS+1 idle
	// connections and opens without bound: 1,000 sequences would churn
	// through ephemeral ports).
	concurrentConns = 64
)

// BenchmarkConcurrentSequences is scenario 3: one op runs 1,000 concurrent
// sequences of 10 pages each over the loopback server; a quarter of them
// meet one 429 ("Retry-After: 0") on a random page, which every contender
// recovers (impl=bare re-sends it by hand). It reports the throughput in
// pages per second, the mean over ops of each op's p50 and p99 page latency
// (a page's latency includes its 429 and re-send), the peak heap above
// the heap at the start, sampled every millisecond, the new
// connections the server accepted per op, and the process's CPU time per
// page (cpu-us/page). impl=rr-drained is a control
// (see implSpecs): rr-budget without R12's re-dial.
func BenchmarkConcurrentSequences(b *testing.B) {
	srv := newBenchServer(b)
	for _, spec := range specsInRunOrder(b) {
		if spec.name == "rr-nobudget" {
			continue
		}
		b.Run("impl="+spec.name, func(b *testing.B) {
			im := spec.make(newBase(concurrentConns))
			defer im.close()
			runConcurrent(b, srv, spec, im)
		})
	}
}

func runConcurrent(b *testing.B, srv *benchServer, spec implSpec, im *impl) {
	do := recovering(spec, im)
	bg := context.Background()
	urls := make([][]string, concurrentSequences)
	for s := range urls {
		urls[s] = make([]string, pagesPerSequence)
		for p := range urls[s] {
			urls[s][p] = srv.url(fmt.Sprintf("/seq/%d/%d", s, p))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	plan := func() *throttlePlan {
		pages := make([]int, concurrentSequences)
		for s := range pages {
			pages[s] = -1
			if rng.IntN(throttledEvery) == 0 {
				pages[s] = rng.IntN(pagesPerSequence)
			}
		}
		return newThrottlePlan(pages)
	}
	lat := make([]time.Duration, concurrentSequences*pagesPerSequence)
	var failures atomic.Int64
	var firstErr atomic.Value
	one := func() {
		var wg sync.WaitGroup
		for s := range concurrentSequences {
			wg.Go(func() {
				ctx := im.sequence(bg)
				for p := range pagesPerSequence {
					t0 := time.Now()
					st, err := do(ctx, urls[s][p])
					lat[s*pagesPerSequence+p] = time.Since(t0)
					if err != nil || st != http.StatusOK {
						failures.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("sequence %d page %d: status %d, %v", s, p, st, err))
					}
				}
			})
		}
		wg.Wait()
	}

	// Warm-up: connections open, pools filled.
	srv.plan.Store(plan())
	one()
	srv.plan.Store(nil)
	if n := failures.Load(); n > 0 {
		b.Fatalf("warm-up: %d pages failed, first: %v", n, firstErr.Load())
	}

	runtime.GC()
	base := heapObjects()
	conns := srv.conns.Load()
	peak := newPeakSampler(time.Millisecond)
	var p50, p99 time.Duration
	var cpu int64
	ops := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		srv.plan.Store(plan())
		b.StartTimer()
		c0 := processCPU()
		one()
		cpu += processCPU() - c0
		b.StopTimer()
		slices.Sort(lat)
		p50 += lat[len(lat)/2]
		p99 += lat[len(lat)*99/100]
		ops++
		b.StartTimer()
	}
	top := peak.stop()
	srv.plan.Store(nil)
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d pages failed, first: %v", n, firstErr.Load())
	}
	b.ReportMetric(float64(ops*concurrentSequences*pagesPerSequence)/b.Elapsed().Seconds(), "pages/s")
	b.ReportMetric(float64(p50.Nanoseconds())/float64(ops), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds())/float64(ops), "p99-ns")
	b.ReportMetric(float64(max(top-base, 0)), "peak-heap-B")
	// The process's CPU time per page over the ops (client, server, GC):
	// less moved by other work on the machine than pages/s.
	b.ReportMetric(float64(cpu)/1e3/float64(max(ops, 1)*concurrentSequences*pagesPerSequence), "cpu-us/page")
	// New connections per op (after the warm-up filled the pools): a 429
	// body closed unread (R12) costs its keep-alive connection, so
	// rr-budget dials about once per 429, about 250 times an op.
	b.ReportMetric(float64(srv.conns.Load()-conns)/float64(max(ops, 1)), "conns/op")
}

// heapObjects is the heap's object bytes now, live and not yet swept
// (runtime/metrics, no stop-the-world).
func heapObjects() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// peakSampler records the highest heapObjects seen every period.
type peakSampler struct {
	done chan struct{}
	out  chan int64
}

func newPeakSampler(period time.Duration) *peakSampler {
	p := &peakSampler{done: make(chan struct{}), out: make(chan int64, 1)}
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		top := heapObjects()
		for {
			select {
			case <-p.done:
				p.out <- max(top, heapObjects())
				return
			case <-t.C:
				top = max(top, heapObjects())
			}
		}
	}()
	return p
}

func (p *peakSampler) stop() int64 {
	close(p.done)
	return <-p.out
}
