package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
)

// Scenario (s), SPEC R98: a slow server that never throttles. A loopback
// server (httptest, HTTP/1.1 keep-alive, real sockets; not the fakeserver)
// answers every GET 200 after a fixed latency and never sends a 429, a
// 503 or a quota header. One op is one burst of n concurrent GETs, each
// with a Budget of its own in its context (for the contenders that use
// one), from the burst's start until the last response body is read. R98:
// a scope that has said nothing is never refused and sees the same
// concurrency as without shared restrictions, so rr-shared's burst should
// take about what bare's takes (the target: ≤ 1.10× at 5 s, ≤ 1.25× at
// 1 s). Every contender gets a new Transport per op (a scope the Transport
// has not heard from) over a base whose pool allows n connections to the
// host (newBase(n): MaxConnsPerHost and MaxIdleConnsPerHost n); the server
// is shared.

// Scenario (s)'s grid: bursts of slowBursts requests against a server
// answering after each of slowLatencies; with -short, one small cell.
var (
	slowBursts         = []int{16, 64}
	slowLatencies      = []time.Duration{time.Second, 5 * time.Second}
	slowBurstsShort    = []int{4}
	slowLatenciesShort = []time.Duration{50 * time.Millisecond}
)

// slowContenders are scenario (s)'s contenders: the base alone, and
// readrecovery with shared restrictions by host (rr-shared) and by
// AzureScope (rr-azure: the Azure wirings' default, the same scope as the
// host's for a loopback server).
var slowContenders = []string{"bare", "rr-shared", "rr-azure"}

// slowServer is scenario (s)'s server: GET /slow?after=D answers 200 and
// okBody after D (a Go duration), or earlier when the client goes away.
// It notes the requests that arrived, the most in flight at once (from
// arrival until the answer is written) and the first and last arrival,
// since the last take.
type slowServer struct {
	srv *httptest.Server

	mu          sync.Mutex
	inFlight    int // a gauge, never reset
	maxInFlight int
	seen        int
	first, last time.Time
}

// slowCounts is what a slowServer saw since the last take.
type slowCounts struct {
	seen, maxInFlight int
	first, last       time.Time
}

func newSlowServer(tb testing.TB) *slowServer {
	tb.Helper()
	s := &slowServer{}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.Start()
	tb.Cleanup(s.srv.Close)
	return s
}

func (s *slowServer) url(after time.Duration) string {
	return s.srv.URL + "/slow?after=" + after.String()
}

func (s *slowServer) serve(w http.ResponseWriter, r *http.Request) {
	after, err := time.ParseDuration(r.URL.Query().Get("after"))
	if r.URL.Path != "/slow" || err != nil {
		http.NotFound(w, r)
		return
	}
	now := time.Now()
	s.mu.Lock()
	s.seen++
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	if s.first.IsZero() {
		s.first = now
	}
	s.last = now
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json; charset=utf-8"}
	h["X-Ms-Request-Id"] = []string{benchRequestID}
	h["Content-Length"] = []string{strconv.Itoa(len(okBody))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(okBody)
}

// take returns what the server saw since the last take and starts anew
// (the in-flight gauge goes on: a handler of the last burst may still be
// returning).
func (s *slowServer) take() slowCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := slowCounts{seen: s.seen, maxInFlight: s.maxInFlight, first: s.first, last: s.last}
	s.seen, s.maxInFlight, s.first, s.last = 0, s.inFlight, time.Time{}, time.Time{}
	return c
}

// slowOutcome is what one burst of scenario (s) measured.
type slowOutcome struct {
	burst       time.Duration  // the burst's start until the last body was read
	refused     int            // requests that returned an error
	reasons     map[string]int // what they returned: a StopError's reason, else "error"
	served      int            // requests the server saw
	maxInFlight int            // the most the server had in flight at once
	spread      time.Duration  // the server's first arrival to its last
}

// runSlowBurst runs one burst of n GETs of srv answered after after, over
// a new Transport of spec (a base allowing n connections to the host),
// each GET in a sequence of its own. A status other than 200 is an error
// of the harness (the server sends none).
func runSlowBurst(tb testing.TB, srv *slowServer, spec implSpec, n int, after time.Duration) slowOutcome {
	tb.Helper()
	im := spec.make(newBase(n))
	defer im.close()
	url := srv.url(after)
	srv.take()
	o := slowOutcome{reasons: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		ctx := im.sequence(context.Background())
		wg.Go(func() {
			<-start
			st, err := im.do(ctx, url)
			mu.Lock()
			defer mu.Unlock()
			var stop *readrecovery.StopError
			switch {
			case errors.As(err, &stop):
				o.refused++
				o.reasons[string(stop.Reason)]++
			case err != nil:
				o.refused++
				o.reasons["error"]++
			case st != http.StatusOK:
				tb.Errorf("status %d from a server that answers 200 only", st)
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	o.burst = time.Since(t0)
	c := srv.take()
	o.served, o.maxInFlight = c.seen, c.maxInFlight
	if c.seen > 0 {
		o.spread = c.last.Sub(c.first)
	}
	return o
}

// BenchmarkSlowServer is scenario (s): for each burst size n (16, 64) and
// latency (1 s, 5 s; with -short n=4 and 50 ms), one op is one burst of n
// concurrent GETs, each in a sequence of its own, against a server that
// answers every GET 200 after the latency and never throttles. It reports,
// per op (means over the ops): burst-s, the burst's wall time in seconds;
// refused, the requests that returned an error (a StopError of
// readrecovery's, say "restricted"); max-inflight, the most requests the
// server had in flight at once; first-to-last-arrival-s, the seconds from
// the server's first arrival to its last. bare's burst takes about one
// latency, with all n requests in flight at once.
func BenchmarkSlowServer(b *testing.B) {
	srv := newSlowServer(b)
	bursts, latencies := slowBursts, slowLatencies
	if testing.Short() {
		bursts, latencies = slowBurstsShort, slowLatenciesShort
	}
	for _, n := range bursts {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for _, after := range latencies {
				b.Run("latency="+after.String(), func(b *testing.B) {
					for _, spec := range specsNamed(b, slowContenders) {
						b.Run("impl="+spec.name, func(b *testing.B) {
							var burst, spread time.Duration
							var refused, inFlight int
							for b.Loop() {
								o := runSlowBurst(b, srv, spec, n, after)
								burst += o.burst
								spread += o.spread
								refused += o.refused
								inFlight += o.maxInFlight
								if o.served+o.refused != n {
									b.Errorf("%d requests reached the server and %d were refused, of %d", o.served, o.refused, n)
								}
								if testing.Verbose() {
									b.Logf("burst %v, server saw %d (at most %d at once, arrivals over %v), refused %d %v",
										o.burst.Round(time.Millisecond), o.served, o.maxInFlight, o.spread.Round(time.Millisecond), o.refused, o.reasons)
								}
							}
							ops := float64(b.N)
							b.ReportMetric(burst.Seconds()/ops, "burst-s")
							b.ReportMetric(float64(refused)/ops, "refused")
							b.ReportMetric(float64(inFlight)/ops, "max-inflight")
							b.ReportMetric(spread.Seconds()/ops, "first-to-last-arrival-s")
						})
					}
				})
			}
		})
	}
}

// TestSlowServerHarness checks scenario (s)'s harness on a small burst
// (4 GETs, 200 ms, a latency long enough that bare's 4 requests overlap
// even on a loaded machine): bare and rr-shared both complete every
// request, none refused, the server sees each once, no burst is shorter
// than the latency, and bare has all 4 in flight at once (the base's pool
// and the start barrier let a burst through whole). rr-shared's
// concurrency is what the scenario measures, not asserted here.
func TestSlowServerHarness(t *testing.T) {
	const n, after = 4, 200 * time.Millisecond
	srv := newSlowServer(t)
	for _, name := range []string{"bare", "rr-shared"} {
		t.Run(name, func(t *testing.T) {
			var spec *implSpec
			for i := range implSpecs {
				if implSpecs[i].name == name {
					spec = &implSpecs[i]
				}
			}
			if spec == nil {
				t.Fatalf("no contender %q", name)
			}
			o := runSlowBurst(t, srv, *spec, n, after)
			if o.refused != 0 || o.served != n {
				t.Errorf("refused %d %v, server saw %d; want 0 refused and %d seen", o.refused, o.reasons, o.served, n)
			}
			if o.burst < after {
				t.Errorf("burst took %v, less than the server's latency %v", o.burst, after)
			}
			if o.maxInFlight < 1 || o.maxInFlight > n || o.spread < 0 {
				t.Errorf("max in flight %d, arrivals over %v", o.maxInFlight, o.spread)
			}
			if name == "bare" && o.maxInFlight != n {
				t.Errorf("bare: at most %d of %d requests in flight at once, want all", o.maxInFlight, n)
			}
		})
	}
}
