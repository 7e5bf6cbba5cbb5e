package bench

import (
	"context"
	"net/http"
	"runtime"
	"testing"

	"github.com/readrecovery/readrecovery"
)

// maxHeapPerLiveBudget is issue 6's target: at most 1 KiB of heap per live
// budget.
const maxHeapPerLiveBudget = 1024

// heapPerLiveBudget makes n sequences over the loopback server, each with
// its Budget and its context kept alive and one request made (so the
// Budget's clock runs, its total's timer is set and its evidence holds one
// read with a request ID from the network), and returns the growth of the
// live heap (HeapAlloc after a full GC) divided by n. The sequences share
// one constant name: a caller's own name strings are not counted.
func heapPerLiveBudget(tb testing.TB, srv *benchServer, n int) float64 {
	tb.Helper()
	base := newBase(0)
	defer base.CloseIdleConnections()
	c := &http.Client{Transport: readrecovery.New(base), CheckRedirect: noRedirect}
	url := srv.url("/ok")
	get := func(ctx context.Context) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			tb.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			tb.Fatalf("status %d", resp.StatusCode)
		}
	}
	bg := context.Background()
	get(readrecovery.WithBudget(bg, readrecovery.NewBudget("warm-up"))) // the connection
	budgets := make([]*readrecovery.Budget, n)
	ctxs := make([]context.Context, n)
	before := liveHeap()
	for i := range n {
		budgets[i] = readrecovery.NewBudget("inventory")
		ctxs[i] = readrecovery.WithBudget(bg, budgets[i])
		get(ctxs[i])
	}
	after := liveHeap()
	for i, b := range budgets {
		if r := b.Report(); r.Requests != 1 || r.Stop != "" {
			tb.Fatalf("budget %d: %d requests, stop %q", i, r.Requests, r.Stop)
		}
	}
	runtime.KeepAlive(ctxs)
	return float64(int64(after)-int64(before)) / float64(n)
}

// liveHeap returns HeapAlloc after two full collections (the second
// finishes the sweep of what the first freed).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkHeapPerLiveBudget reports the heap per live budget, "B/budget",
// over 1,000 live sequences per op (ns/op is the time of those 1,000
// first requests and the collections around them).
func BenchmarkHeapPerLiveBudget(b *testing.B) {
	srv := newBenchServer(b)
	var sum float64
	ops := 0
	for b.Loop() {
		sum += heapPerLiveBudget(b, srv, 1000)
		ops++
	}
	b.ReportMetric(sum/float64(ops), "B/budget")
}

// TestHeapPerLiveBudget checks issue 6's target of at most 1 KiB of heap
// per live budget, over 10,000 live sequences.
func TestHeapPerLiveBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 loopback requests")
	}
	srv := newBenchServer(t)
	got := heapPerLiveBudget(t, srv, 10000)
	t.Logf("heap per live budget: %.0f B (target ≤ %d B)", got, maxHeapPerLiveBudget)
	if got > maxHeapPerLiveBudget {
		t.Errorf("heap per live budget is %.0f B, want at most %d B", got, maxHeapPerLiveBudget)
	}
}
