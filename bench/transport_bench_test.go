package bench

import (
	"context"
	"net/http"
	"testing"
)

// pagesPerSequence is the length of a sequence in scenarios 1 and 3: a
// 10-page inventory. readrecovery with a budget makes one Budget per
// sequence, and that cost is part of what it measures (rr-budget-each
// makes one per request).
const pagesPerSequence = 10

// BenchmarkPassThrough is scenario 1: a 200 with no throttling, one GET at
// a time over the loopback server, body read and closed. B/op and
// allocs/op include the in-process server's share, the same for everyone:
// the difference to impl=bare is the contender's own.
func BenchmarkPassThrough(b *testing.B) {
	srv := newBenchServer(b)
	url := srv.url("/ok")
	for _, spec := range specsInRunOrder(b) {
		b.Run("impl="+spec.name, func(b *testing.B) {
			im := spec.make(newBase(0))
			defer im.close()
			runPassThrough(b, im, url)
		})
	}
}

// BenchmarkOwnCost is scenario 1 over an in-process stub transport instead
// of the network: what each contender adds to a request, without the noise
// of a socket. The difference to impl=bare is the decorator's own cost.
func BenchmarkOwnCost(b *testing.B) {
	for _, spec := range specsInRunOrder(b) {
		b.Run("impl="+spec.name, func(b *testing.B) {
			im := spec.make(newStub())
			defer im.close()
			runPassThrough(b, im, "http://stub.invalid/ok")
		})
	}
}

func runPassThrough(b *testing.B, im *impl, url string) {
	bg := context.Background()
	if st, err := im.do(im.sequence(bg), url); err != nil || st != http.StatusOK {
		b.Fatalf("warm-up: status %d, %v", st, err)
	}
	var ctx context.Context
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if i%pagesPerSequence == 0 {
			ctx = im.sequence(bg)
		}
		i++
		st, err := im.do(ctx, url)
		if err != nil || st != http.StatusOK {
			b.Fatalf("status %d, %v", st, err)
		}
	}
}

// BenchmarkRecovered429 is scenario 2: the first request meets a 429 with
// "Retry-After: 0", its re-send a 200; one op is one recovered request (two
// round trips), a new sequence each time. impl=bare is the floor: the same
// two round trips re-sent by hand, without any policy. impl=rr-drained is a
// control (see implSpecs): rr-budget without R12's re-dial.
func BenchmarkRecovered429(b *testing.B) {
	srv := newBenchServer(b)
	url := srv.url("/recover")
	for _, spec := range specsInRunOrder(b) {
		if spec.name == "rr-nobudget" {
			continue // no budget, no recovery (R5): nothing to measure
		}
		b.Run("impl="+spec.name, func(b *testing.B) {
			im := spec.make(newBase(0))
			defer im.close()
			do := recovering(spec, im)
			bg := context.Background()
			if st, err := do(im.sequence(bg), url); err != nil || st != http.StatusOK {
				b.Fatalf("warm-up: status %d, %v", st, err)
			}
			hits, conns := srv.hits.Load(), srv.conns.Load()
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				st, err := do(im.sequence(bg), url)
				if err != nil || st != http.StatusOK {
					b.Fatalf("status %d, %v", st, err)
				}
				n++
			}
			if got := srv.hits.Load() - hits; got != int64(2*n) {
				b.Fatalf("the server saw %d requests for %d recovered requests, want %d", got, n, 2*n)
			}
			// New connections per recovered request: a 429 body closed
			// unread (R12) costs its keep-alive connection.
			b.ReportMetric(float64(srv.conns.Load()-conns)/float64(max(n, 1)), "conns/op")
		})
	}
}

// recovering returns im's do, or for a contender that never re-sends a 429
// (the bare transport) a do that re-sends it once by hand, at once.
func recovering(spec implSpec, im *impl) func(ctx context.Context, url string) (int, error) {
	if spec.recovers {
		return im.do
	}
	return func(ctx context.Context, url string) (int, error) {
		st, err := im.do(ctx, url)
		if err != nil || st != http.StatusTooManyRequests {
			return st, err
		}
		return im.do(ctx, url)
	}
}
