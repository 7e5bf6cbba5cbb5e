package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The scenarios of issue 14, each against bare, readrecovery (with a
// Budget per sequence), go-retryablehttp, azcore and failsafe-go in one
// run: a recovered 429 over HTTP/2 with TLS and with Retry-After: 1, a
// throttle burst, the goroutines an in-flight request costs, and what
// finished sequences leave on the heap.

// dialTracer sums, over the requests whose context carries it, the time
// from asking for a connection to getting a new one (dial and TLS
// handshake); a reused connection adds nothing.
type dialTracer struct {
	asked atomic.Int64 // unix ns of the last GetConn (one request at a time)
	sum   atomic.Int64 // ns waiting for new connections
	dials atomic.Int64
}

func (d *dialTracer) context(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) { d.asked.Store(time.Now().UnixNano()) },
		GotConn: func(info httptrace.GotConnInfo) {
			if !info.Reused {
				d.sum.Add(time.Now().UnixNano() - d.asked.Load())
				d.dials.Add(1)
			}
		},
	})
}

// benchRecovered runs one recovered request per op (a 429 with the
// server's Retry-After, the re-send, its 200, a new sequence each time)
// against every recovering contender over srv, and reports new
// connections, the time spent getting them, and that time's share of the
// whole recovered request.
//
// impl=bare re-sends the 429 by hand after wait, the server's Retry-After
// (the floor: the same two round trips and the same wait, no policy).
func benchRecovered(b *testing.B, srv *benchServer, path string, wait time.Duration, wantH2 bool) {
	url := srv.url(path)
	for _, spec := range specsInRunOrder(b) {
		if spec.name == "rr-nobudget" {
			continue // no budget, no recovery (R5)
		}
		b.Run("impl="+spec.name, func(b *testing.B) {
			im := spec.make(srv.base(0))
			defer im.close()
			do := recovering(spec, im)
			if !spec.recovers {
				do = func(ctx context.Context, url string) (int, error) {
					st, err := im.do(ctx, url)
					if err != nil || st != http.StatusTooManyRequests {
						return st, err
					}
					time.Sleep(wait)
					return im.do(ctx, url)
				}
			}
			bg := context.Background()
			if st, err := do(im.sequence(bg), url); err != nil || st != http.StatusOK {
				b.Fatalf("warm-up: status %d, %v", st, err)
			}
			var tr dialTracer
			hits, conns, h2 := srv.hits.Load(), srv.conns.Load(), srv.h2.Load()
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				st, err := do(tr.context(im.sequence(bg)), url)
				if err != nil || st != http.StatusOK {
					b.Fatalf("status %d, %v", st, err)
				}
				n++
			}
			if got := srv.hits.Load() - hits; got != int64(2*n) {
				b.Fatalf("the server saw %d requests for %d recovered requests, want %d", got, n, 2*n)
			}
			if got := srv.h2.Load() - h2; wantH2 && got != int64(2*n) {
				b.Fatalf("%d of %d requests arrived over HTTP/2, want all", got, 2*n)
			}
			b.ReportMetric(float64(srv.conns.Load()-conns)/float64(n), "conns/op")
			b.ReportMetric(float64(tr.sum.Load())/float64(n), "dial-ns/op")
			b.ReportMetric(100*float64(tr.sum.Load())/float64(b.Elapsed().Nanoseconds()), "dial-%")
		})
	}
}

// BenchmarkRecovered429H2 is scenario (a): scenario 2 (429 with
// "Retry-After: 0", then 200) over TLS and HTTP/2. A 429 whose body is
// closed unread resets only its stream, not the connection: no contender
// should need a new connection (conns/op 0).
func BenchmarkRecovered429H2(b *testing.B) {
	benchRecovered(b, newBenchServerTLS(b, true), "/recover", 0, true)
}

// BenchmarkRecovered429After1 is scenario (b): a recovered 429 with
// "Retry-After: 1", so one op lasts a second; over plain HTTP/1.1
// (proto=h1) and over TLS with HTTP/1.1 (proto=h1tls, where a new
// connection costs a handshake). dial-% is the time spent getting new
// connections as a share of the whole recovered request.
func BenchmarkRecovered429After1(b *testing.B) {
	b.Run("proto=h1", func(b *testing.B) { benchRecovered(b, newBenchServer(b), "/recover1", time.Second, false) })
	b.Run("proto=h1tls", func(b *testing.B) { benchRecovered(b, newBenchServerTLS(b, false), "/recover1", time.Second, false) })
}

// Scenario (c)'s shape.
const (
	burstSequences = 200
	burstPages     = 5
	burstWindow    = 2 * time.Second
)

// BenchmarkThrottleBurst is scenario (c): one op starts 200 concurrent
// sequences of 5 pages just as the server opens a 2 s throttle window
// (every request inside it meets a 429 whose Retry-After is the window's
// remaining whole seconds). It reports the requests that reached the
// server inside the window per op (200 is the floor: each sequence's
// first page), the pages that failed, and the goodput: pages answered 200
// per second of the op. impl=bare re-sends a 429 once by hand, at once.
func BenchmarkThrottleBurst(b *testing.B) {
	srv := newBenchServer(b)
	for _, spec := range specsInRunOrder(b) {
		if spec.name == "rr-nobudget" {
			continue
		}
		b.Run("impl="+spec.name, func(b *testing.B) {
			im := spec.make(srv.base(concurrentConns))
			defer im.close()
			do := recovering(spec, im)
			bg := context.Background()
			urls := make([][]string, burstSequences)
			for s := range urls {
				urls[s] = make([]string, burstPages)
				for p := range urls[s] {
					urls[s][p] = srv.url(fmt.Sprintf("/burst/%d/%d", s, p))
				}
			}
			var ok, failed, inWindow int64
			b.ReportAllocs()
			for b.Loop() {
				srv.inWindow.Store(0)
				srv.windowEnd.Store(time.Now().Add(burstWindow).UnixNano())
				var wg sync.WaitGroup
				var good, bad atomic.Int64
				for s := range burstSequences {
					wg.Go(func() {
						ctx := im.sequence(bg)
						for p := range burstPages {
							if st, err := do(ctx, urls[s][p]); err == nil && st == http.StatusOK {
								good.Add(1)
							} else {
								bad.Add(1)
							}
						}
					})
				}
				wg.Wait()
				ok += good.Load()
				failed += bad.Load()
				inWindow += srv.inWindow.Load()
			}
			srv.windowEnd.Store(0)
			ops := float64(b.N)
			b.ReportMetric(float64(inWindow)/ops, "in-window-reqs/op")
			b.ReportMetric(float64(failed)/ops, "failed-pages/op")
			b.ReportMetric(float64(ok)/b.Elapsed().Seconds(), "goodput-pages/s")
		})
	}
}

// inFlight is how many requests BenchmarkGoroutinesInFlight keeps in
// flight at once.
const inFlight = 20

// BenchmarkGoroutinesInFlight counts the goroutines a request in flight
// costs: 20 GETs of one sequence wait on a blocked loopback server over
// 20 kept-alive connections (made by a warm-up round), and goroutines/req
// is the growth of runtime.NumGoroutine over the idle state, per request
// (the callers' goroutines included, the same for every contender: the
// difference to impl=bare is the contender's own); created/req counts the
// goroutines created per request from start to end (runtime/metrics
// /sched/goroutines-created). A report, not an assertion.
func BenchmarkGoroutinesInFlight(b *testing.B) {
	srv := newBenchServer(b)
	url := srv.url("/block")
	for _, spec := range specsInRunOrder(b) {
		b.Run("impl="+spec.name, func(b *testing.B) {
			im := spec.make(srv.base(inFlight))
			defer im.close()
			bg := context.Background()
			// one round: 20 blocked GETs of one sequence; the goroutines
			// above idle while they wait, and those created from start
			// to end, per request.
			round := func() (during, created float64) {
				runtime.GC()
				idle := runtime.NumGoroutine()
				c0 := goroutinesCreated()
				release := make(chan struct{})
				srv.release.Store(&release)
				ctx := im.sequence(bg)
				var wg sync.WaitGroup
				errs := make(chan error, inFlight)
				for range inFlight {
					wg.Go(func() {
						if st, err := im.do(ctx, url); err != nil || st != http.StatusOK {
							errs <- fmt.Errorf("status %d, %v", st, err)
						}
					})
				}
				for srv.blocked.Load() < inFlight {
					runtime.Gosched()
				}
				n := runtime.NumGoroutine()
				close(release)
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				return float64(n-idle) / inFlight, float64(goroutinesCreated()-c0) / inFlight
			}
			// Warm-up: the 20 connections (and their goroutines) exist
			// before the first measured round, so every round measures
			// the requests, not the dials.
			round()
			var during, created float64
			for b.Loop() {
				d, c := round()
				during += d
				created += c
			}
			b.ReportMetric(during/float64(b.N), "goroutines/req")
			b.ReportMetric(created/float64(b.N), "created/req")
		})
	}
}

func goroutinesCreated() int64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// finishedSequences is how many one-request sequences
// BenchmarkFinishedSequences runs per op.
const finishedSequences = 200_000

// BenchmarkFinishedSequences measures what finished sequences leave
// behind: one op runs 200,000 one-request sequences over the in-process
// stub (a new Budget each for rr-budget), drops every reference to them,
// and reports the live heap growth per sequence right after (HeapAlloc
// after two full collections), while their totals would still run.
// runtime/metrics offers no count of live timers (Go 1.26), so a timer
// left behind shows as heap: a runtime timer and what its function holds.
func BenchmarkFinishedSequences(b *testing.B) {
	for _, spec := range specsInRunOrder(b) {
		b.Run("impl="+spec.name, func(b *testing.B) {
			im := spec.make(newStub())
			defer im.close()
			bg := context.Background()
			var sum float64
			for b.Loop() {
				b.StopTimer()
				before := liveHeap()
				b.StartTimer()
				for range finishedSequences {
					if st, err := im.do(im.sequence(bg), "http://stub.invalid/ok"); err != nil || st != http.StatusOK {
						b.Fatalf("status %d, %v", st, err)
					}
				}
				b.StopTimer()
				sum += float64(int64(liveHeap())-int64(before)) / finishedSequences
				b.StartTimer()
			}
			b.ReportMetric(sum/float64(b.N), "B/seq")
		})
	}
}
