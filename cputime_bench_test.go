//go:build linux

package readrecovery

import (
	"context"
	"net/http"
	"runtime"
	"syscall"
	"testing"
)

// BenchmarkOwnCPU is BenchmarkRoundTripPassThrough measured in the CPU time
// of the benchmark's own thread (getrusage RUSAGE_THREAD, the goroutine
// locked to it), reported as cpu-ns/op: on a machine shared with other
// work, wall time per op moves by ±100 % between runs, the thread's CPU
// time far less. Background GC workers run on other threads and are not
// counted; allocation and GC assists are.
func BenchmarkOwnCPU(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "https://acct.blob.core.windows.net/c/blob", nil)
	for _, bc := range []struct {
		name  string
		every int // a new Budget every n requests; 0: none
	}{{"no-budget", 0}, {"budget-per-10", 10}, {"budget-each", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			rt := New(newOK())
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r := req
			i := 0
			start := threadCPU()
			b.ReportAllocs()
			for b.Loop() {
				if bc.every > 0 && i%bc.every == 0 {
					r = req.WithContext(WithBudget(context.Background(), NewBudget("bench")))
				}
				i++
				rt.RoundTrip(r)
			}
			b.ReportMetric(float64(threadCPU()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

func threadCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
