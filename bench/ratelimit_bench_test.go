package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// Scenarios (e) and (f) of issue 21: many sequences against a server that
// throttles at a rate per account, as Azure does, instead of on the n-th
// request. The server is the fakeserver over loopback, with
// fakeserver.TokenBucket(200/s, burst 50) on one storage account: (e)
// answers a request without a token 429 with Retry-After rounded up to
// the next token (so "1" for a token 5 ms away), (f) 503 ServerBusy as
// Azure Storage does (no Retry-After).

// The shape of (e) and (f).
const (
	rateSequences      = 500
	rateSequencesShort = 20 // with -short: CI runs the scenario in about a second
	ratePages          = 10
	bucketRate         = 200 // tokens per second
	bucketBurst        = 50
)

// rateOutcome is what one op of a rate scenario measured.
type rateOutcome struct {
	sequences  int
	completed  int             // sequences whose every page was answered 200
	pages      int             // pages answered 200
	throttled  int             // answers of the rule (429 for (e), 503 for (f)) the server sent
	requests   int             // requests the server saw
	elapsed    time.Duration   // the op, first request to last answer
	seqTimes   []time.Duration // completed sequences, start to last page
	failedWith map[string]int  // what ended the failed sequences: "status 429", "error"
	start      time.Time       // when the first sequence was let go
	ledger     []fakeserver.Request
}

// rateShape is the load and the bucket of a rate scenario.
type rateShape struct {
	sequences, pages int
	rate             float64
	burst            int
}

// runRateScenario runs shape.sequences concurrent sequences of
// shape.pages pages each against a fresh fakeserver whose blob GETs on one
// account go through TokenBucket(shape.rate, shape.burst) answering fault.
// A sequence stops at its first page not answered 200 (a listing cannot go
// on without its page). Each contender gets its own base transport with
// scenario 3's connection limit; impl=bare re-sends a 429 once, at once,
// as in the other scenarios.
func runRateScenario(tb testing.TB, spec implSpec, fault fakeserver.Fault, shape rateShape) rateOutcome {
	sequences := shape.sequences
	srv := fakeserver.New()
	srv.PutBlob("bench", "page", okBody)
	srv.Script().Add(fakeserver.RouteBlobGet, fault, fakeserver.TokenBucket(shape.rate, shape.burst))
	base, err := srv.Start()
	if err != nil {
		tb.Fatal(err)
	}
	defer srv.Close()

	im := spec.make(newBase(concurrentConns))
	defer im.close()
	do := recovering(spec, im)
	bg := context.Background()

	out := rateOutcome{sequences: sequences, failedWith: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for s := range sequences {
		wg.Go(func() {
			t0 := time.Now()
			ctx := im.sequence(bg)
			pages := 0
			why := ""
			for p := range shape.pages {
				st, err := do(ctx, fmt.Sprintf("%s/%s/bench/page?s=%d&p=%d", base, fakeserver.DefaultAccount, s, p))
				if err != nil {
					why = "error"
					break
				}
				if st != http.StatusOK {
					why = fmt.Sprintf("status %d", st)
					break
				}
				pages++
			}
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			out.pages += pages
			if why == "" {
				out.completed++
				out.seqTimes = append(out.seqTimes, d)
			} else {
				out.failedWith[why]++
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	out.start, out.ledger = start, srv.Requests()
	for _, r := range out.ledger {
		out.requests++
		if r.Status == fault.StatusCode() {
			out.throttled++
		}
	}
	return out
}

// p99 is the 99th percentile (nearest rank) of ds, 0 for none.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}

// benchRate runs a rate scenario once per op for every contender but
// rr-nobudget (which never recovers) and reports, per op: completed
// sequences, the throttled answers the server sent (unit names it: 429s
// or 503s), the requests it saw, the pages answered 200 and their rate per
// second of the op (a contender that gives up early has a short op: read
// pages/s next to pages/op), and the p99 time of a completed sequence (0
// when none completed).
// A non-nil tl gets the first op of each contender (its samples file).
func benchRate(b *testing.B, fault fakeserver.Fault, unit string, tl *timeline) {
	shape := rateShape{sequences: rateSequences, pages: ratePages, rate: bucketRate, burst: bucketBurst}
	if testing.Short() {
		shape.sequences = rateSequencesShort
	}
	for _, spec := range specsInRunOrder(b) {
		if spec.name == "rr-nobudget" {
			continue
		}
		b.Run("impl="+spec.name, func(b *testing.B) {
			var completed, throttled, requests, pages float64
			var elapsed, p99sum time.Duration
			for b.Loop() {
				o := runRateScenario(b, spec, fault, shape)
				if err := tl.record(spec.name, o.start, o.ledger); err != nil {
					b.Fatal(err)
				}
				completed += float64(o.completed)
				throttled += float64(o.throttled)
				requests += float64(o.requests)
				pages += float64(o.pages)
				elapsed += o.elapsed
				p99sum += p99(o.seqTimes)
				if testing.Verbose() {
					b.Logf("%d/%d sequences completed, %d pages, %d %s, %d requests in %v; failed: %v",
						o.completed, o.sequences, o.pages, o.throttled, unit, o.requests, o.elapsed.Round(time.Millisecond), o.failedWith)
				}
			}
			n := float64(b.N)
			b.ReportMetric(completed/n, "completed-seqs/op")
			b.ReportMetric(throttled/n, unit+"/op")
			b.ReportMetric(requests/n, "server-reqs/op")
			b.ReportMetric(pages/n, "pages/op")
			b.ReportMetric(pages/elapsed.Seconds(), "pages/s")
			b.ReportMetric(float64(p99sum.Milliseconds())/n, "p99-seq-ms")
		})
	}
}

// BenchmarkTokenBucket is scenario (e): 500 concurrent sequences of 10
// pages (20 with -short) against TokenBucket(200/s, burst 50) on one
// account answering 429 with the time to the next token, rounded up to
// whole seconds. Issue 21's target, for readrecovery with shared
// restrictions: at least as many completed sequences as the best peer,
// with at most a tenth of its 429s. With TIMELINE_E=path, the first op of
// each contender writes what the server saw to path (timeline_test.go),
// for cmd/timeline to draw.
func BenchmarkTokenBucket(b *testing.B) {
	benchRate(b, fakeserver.Throttle(fakeserver.RetryAfterRemaining()), "429s", timelineE)
}

// BenchmarkServerBusy is scenario (f), for the record: the same load
// against the same bucket answering Azure Storage's 503 ServerBusy
// (no Retry-After). readrecovery passes a 503 to its base (the policy's
// other-statuses-pass-through); the peers retry it with their own
// back-off, which the bench configures to 0 for every contender.
func BenchmarkServerBusy(b *testing.B) {
	benchRate(b, fakeserver.ServerBusy(), "503s", nil)
}

// TestRateScenarioCounts checks the harness on a bucket so slow that its
// outcome does not depend on the order of arrival: 3 sequences of 1 page
// against a bucket of 2 tokens that never refills within the test (a
// token every 1,000 s, so Retry-After 1000). (With 2 pages a sequence
// could take both tokens before the others start: the counts would depend
// on the scheduler.)
//
//   - bare: 2 pages pass, the third meets a 429 and its one immediate
//     re-send another: 4 requests, 2 of them 429, 2 sequences completed.
//   - rr-budget: a Retry-After of 1,000 s is beyond the wait ceiling, so
//     the 429 is returned as it is (its sequence stopped), no re-send:
//     3 requests, 1 429.
//   - rr-shared: the same: a delay above the wait ceiling restricts
//     nothing (not a usable delay).
//   - ServerBusy: the same requests as rr-budget for bare (a 503 is not
//     re-sent by hand) and readrecovery (a 503 passes through).
func TestRateScenarioCounts(t *testing.T) {
	shape := rateShape{sequences: 3, pages: 1, rate: 0.001, burst: 2}
	cases := []struct {
		impl      string
		fault     fakeserver.Fault
		requests  int
		throttled int
		failed    map[string]int
	}{
		{"bare", fakeserver.Throttle(fakeserver.RetryAfterRemaining()), 4, 2, map[string]int{"status 429": 1}},
		{"rr-budget", fakeserver.Throttle(fakeserver.RetryAfterRemaining()), 3, 1, map[string]int{"status 429": 1}},
		{"rr-shared", fakeserver.Throttle(fakeserver.RetryAfterRemaining()), 3, 1, map[string]int{"status 429": 1}},
		{"bare", fakeserver.ServerBusy(), 3, 1, map[string]int{"status 503": 1}},
		{"rr-budget", fakeserver.ServerBusy(), 3, 1, map[string]int{"status 503": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.impl+"/"+tc.fault.Kind(), func(t *testing.T) {
			var spec implSpec
			for _, s := range implSpecs {
				if s.name == tc.impl {
					spec = s
				}
			}
			o := runRateScenario(t, spec, tc.fault, shape)
			got := fmt.Sprintf("completed=%d pages=%d requests=%d throttled=%d failed=%v", o.completed, o.pages, o.requests, o.throttled, o.failedWith)
			want := fmt.Sprintf("completed=2 pages=2 requests=%d throttled=%d failed=%v", tc.requests, tc.throttled, tc.failed)
			if got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			if len(o.seqTimes) != 2 || p99(o.seqTimes) <= 0 {
				t.Errorf("sequence times %v for 2 completed sequences", o.seqTimes)
			}
		})
	}
}

func TestP99(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := p99(ds); got != 99*time.Millisecond {
		t.Errorf("p99 of 1..100 ms = %v, want 99ms", got)
	}
	if got := p99(ds[:1]); got != 100*time.Millisecond {
		t.Errorf("p99 of one = %v", got)
	}
}

// TestFailsafeExceededReleasesConnection: when failsafe's retries run out
// it returns an ExceededError and no response; the contender closes that
// last response (OnRetriesExceeded). Without it, scenario (e) stalls once
// 64 pages (the connection limit) have run out of retries: every body the
// base returned must be closed when do returns.
func TestFailsafeExceededReleasesConnection(t *testing.T) {
	srv := fakeserver.New()
	defer srv.Close()
	srv.Script().Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterSeconds(0)))
	base, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	var spec implSpec
	for _, s := range implSpecs {
		if s.name == "failsafe" {
			spec = s
		}
	}
	tr := &bodyCounter{base: newBase(1)}
	im := spec.make(tr)
	defer im.close()
	for i := range 3 {
		_, err := im.do(context.Background(), base+"/c/b")
		if err == nil || !strings.Contains(err.Error(), "retries exceeded") {
			t.Fatalf("request %d: %v, want failsafe's ExceededError", i, err)
		}
		if open := tr.open.Load(); open != 0 {
			t.Fatalf("request %d: %d response bodies left open", i, open)
		}
	}
	if got := srv.Count(fakeserver.RouteBlobGet, "GET"); got != 9 {
		t.Errorf("the server saw %d GETs, want 9 (3 attempts each)", got)
	}
}

// bodyCounter counts the response bodies its base returned and not yet
// closed.
type bodyCounter struct {
	base http.RoundTripper
	open atomic.Int64
}

func (c *bodyCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		c.open.Add(1)
		resp.Body = &countedBody{ReadCloser: resp.Body, open: &c.open}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	open   *atomic.Int64
	closed bool
}

func (b *countedBody) Close() error {
	if !b.closed {
		b.closed = true
		b.open.Add(-1)
	}
	return b.ReadCloser.Close()
}
