package readrecovery

import (
	"context"
	"net/http"
	"runtime"
	"testing"
)

// okTransport answers every request in-process with a shared 200 response,
// so the benchmarks measure the decorator, not a network.
type okTransport struct{ resp *http.Response }

func newOK() *okTransport {
	return &okTransport{resp: &http.Response{
		StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"X-Ms-Request-Id": {"0f8c2a1e-601e-0051-3b2f-7f5e8f000000"}, "Etag": {`"0x8DCAFE"`}},
		Body:   http.NoBody,
	}}
}

func (o *okTransport) RoundTrip(*http.Request) (*http.Response, error) { return o.resp, nil }

// BenchmarkRoundTripPassThrough measures a 200 with no 429: the base alone,
// the decorator without a budget (no-budget-no-recovery path) and with one. The decorator's
// own cost is the difference to "base".
func BenchmarkRoundTripPassThrough(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "https://acct.blob.core.windows.net/c/blob", nil)
	b.Run("base", func(b *testing.B) {
		rt := newOK()
		b.ReportAllocs()
		for b.Loop() {
			rt.RoundTrip(req)
		}
	})
	b.Run("no-budget", func(b *testing.B) {
		rt := New(newOK())
		b.ReportAllocs()
		for b.Loop() {
			rt.RoundTrip(req)
		}
	})
	b.Run("budget", func(b *testing.B) {
		rt := New(newOK())
		// A sequence sends at most 200 requests: a new budget every 200,
		// its cost spread over them as in real use.
		var bud *Budget
		var r *http.Request
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if i%MaxSequenceRequests == 0 {
				bud = NewBudget("bench")
				r = req.WithContext(WithBudget(context.Background(), bud))
			}
			i++
			rt.RoundTrip(r)
		}
	})
	b.Run("budget-per-10", func(b *testing.B) {
		// Short sequences: a new budget every 10 requests, as an index's
		// readback or a small inventory.
		rt := New(newOK())
		var r *http.Request
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if i%10 == 0 {
				r = req.WithContext(WithBudget(context.Background(), NewBudget("bench")))
			}
			i++
			rt.RoundTrip(r)
		}
	})
	b.Run("budget-each", func(b *testing.B) {
		// A new sequence for every request: the set-up of a sequence
		// (NewBudget, WithBudget, the first request's cut-off) over a stub.
		rt := New(newOK())
		b.ReportAllocs()
		for b.Loop() {
			rt.RoundTrip(req.WithContext(WithBudget(context.Background(), NewBudget("bench"))))
		}
	})
	b.Run("budget-cancelable-ctx", func(b *testing.B) {
		rt := New(newOK())
		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		var r *http.Request
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if i%MaxSequenceRequests == 0 {
				r = req.WithContext(WithBudget(parent, NewBudget("bench")))
			}
			i++
			rt.RoundTrip(r)
		}
	})
}

// BenchmarkFinishedSequences measures what 200,000 finished one-request
// sequences leave behind while their totals would still run: live heap per
// sequence after a GC, and the runtime timers (one for the transport, not
// one per sequence). The caller drops each Budget once its request is done.
func BenchmarkFinishedSequences(b *testing.B) {
	const sequences = 200_000
	req, _ := http.NewRequest(http.MethodGet, "https://acct.blob.core.windows.net/c/blob", nil)
	for b.Loop() {
		rt := New(newOK())
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range sequences {
			resp, _ := rt.RoundTrip(req.WithContext(WithBudget(context.Background(), NewBudget("bench"))))
			resp.Body.Close()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/sequences, "live-B/seq")
		rt.cuts.mu.Lock()
		b.ReportMetric(float64(rt.cuts.h.Len()), "entries")
		b.ReportMetric(float64(boolInt(rt.cuts.stop != nil)), "timers")
		rt.cuts.mu.Unlock()
		runtime.KeepAlive(rt)
	}
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
