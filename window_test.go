package readrecovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the wait window: one per sequence, from the first decision to
// wait to the server's not-before time T, whatever runs at once.

// gate blocks the script's handler for chosen requests until released,
// so a test decides which requests are in flight together.
type gate struct{ ch chan struct{} }

func newGate() *gate     { return &gate{ch: make(chan struct{})} }
func (g *gate) wait()    { <-g.ch }
func (g *gate) release() { close(g.ch) }

// A PUT meets 429 with Retry-After: 3; five concurrent readback GETs of the
// same sequence all reach the server at T, none before, each in its own
// wait.
func TestWindowHoldsEveryConcurrentReadback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPut {
				return reply(429, "Retry-After", "3", "x-ms-request-id", "put-1")(req), nil
			}
			return reply(200)(req), nil
		})
		tr, rec, _ := newTraced(srv)
		b := NewBudget("index-a")
		ctx := WithBudget(context.Background(), b)
		t0 := time.Now()
		resp, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}"))
		require.NoError(t, err)
		require.Equal(t, 429, resp.StatusCode)
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				resp, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
				if assert.NoError(t, err) {
					assert.Equal(t, 200, resp.StatusCode)
				}
			})
		}
		wg.Wait()
		hits := srv.Hits()
		require.Len(t, hits, 6)
		assert.Equal(t, "PUT", hits[0].Method)
		for _, h := range hits[1:] {
			assert.Equal(t, "GET", h.Method)
			assert.Equal(t, 3*time.Second, h.At.Sub(t0), "every readback at T, none before")
		}
		r := b.Report()
		assert.Equal(t, 5, r.Waits)
		for _, w := range r.WaitLog {
			assert.Equal(t, "write-429", w.Trigger)
			assert.Equal(t, "GET", w.Method)
			assert.False(t, w.Resend)
			assert.Equal(t, 3*time.Second, w.Actual)
			assert.Equal(t, "put-1", w.RequestID)
		}
		require.NotNil(t, r.Window)
		assert.Equal(t, "write-429", r.Window.Trigger)
		assert.Equal(t, 3*time.Second, r.Window.Length)
		assert.Len(t, rec.Ended(), 5, "one wait span per readback")
		for _, s := range rec.Ended() {
			assert.Equal(t, "readrecovery.wait", s.Name())
		}
	})
}

// Three requests in flight when the window opens meet 429 with different
// delays: each joins, the window's end moves out to the longest (3 s), and
// each is re-sent once, at that end.
func TestWindowJoinedByInFlight429s(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		delays := map[string]string{"/r1": "1", "/r2": "3", "/r3": "2"}
		inFlight := make(chan struct{})
		var mu sync.Mutex
		first := map[string]bool{}
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			mu.Lock()
			again := first[req.URL.Path]
			first[req.URL.Path] = true
			mu.Unlock()
			if again {
				return reply(200)(req), nil
			}
			if n == 4 {
				close(inFlight)
			}
			<-inFlight
			if d, ok := delays[req.URL.Path]; ok {
				return reply(429, "Retry-After", d, "x-ms-request-id", "rid"+req.URL.Path[2:])(req), nil
			}
			return reply(200)(req), nil
		})
		tr := New(srv)
		b := NewBudget("checkpoint")
		ctx := WithBudget(context.Background(), b)
		t0 := time.Now()
		var wg sync.WaitGroup
		for _, p := range []string{"/r1", "/r2", "/r3", "/r4"} {
			wg.Go(func() {
				resp, err := tr.RoundTrip(get(t, ctx, base+p))
				if assert.NoError(t, err, p) {
					assert.Equal(t, 200, resp.StatusCode, p)
				}
			})
		}
		wg.Wait()
		at := map[string][]int{}
		for _, h := range srv.Hits() {
			p := h.URL[len(base):]
			at[p] = append(at[p], int(h.At.Sub(t0)/time.Second))
		}
		assert.Equal(t, map[string][]int{"/r1": {0, 3}, "/r2": {0, 3}, "/r3": {0, 3}, "/r4": {0}}, at)
		r := b.Report()
		require.NotNil(t, r.Window)
		assert.Equal(t, 2, r.Window.Joined)
		assert.Equal(t, 3*time.Second, r.Window.Length)
		assert.Equal(t, 3, r.Waits)
		assert.Equal(t, 7, r.Requests)
		assert.Equal(t, StopReason(""), r.Stop)
	})
}

// A stop during the window wakes every waiter at once, before any network
// access: a request in flight when a write 429 opened a 10 s window meets
// an overlong Retry-After 2 s later.
func TestWindowStopWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := newGate()
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			switch {
			case req.URL.Path == "/slow":
				slow.wait()
				return reply(429, "Retry-After", "45", "x-ms-request-id", "slow-429")(req), nil
			case req.Method == http.MethodPut:
				return reply(429, "Retry-After", "10", "x-ms-request-id", "put-429")(req), nil
			}
			return reply(200)(req), nil
		})
		tr := New(srv)
		b := NewBudget("index-a")
		ctx := WithBudget(context.Background(), b)
		t0 := time.Now()
		slowDone := make(chan *http.Response)
		go func() {
			resp, _ := tr.RoundTrip(get(t, ctx, base+"/slow"))
			slowDone <- resp
		}()
		synctest.Wait() // the slow GET is in flight
		resp, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}"))
		require.NoError(t, err)
		require.Equal(t, 429, resp.StatusCode)
		errs := make(chan error, 3)
		ended := make(chan time.Duration, 3)
		for range 3 {
			go func() {
				_, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
				ended <- time.Since(t0)
				errs <- err
			}()
		}
		synctest.Wait() // the readbacks wait in the window
		time.Sleep(2 * time.Second)
		slow.release()
		resp = <-slowDone
		require.NotNil(t, resp)
		assert.Equal(t, 429, resp.StatusCode, "the overlong 429 goes back untouched")
		for range 3 {
			assert.Equal(t, 2*time.Second, <-ended, "woken at the stop, not at T (10 s)")
			err := <-errs
			require.ErrorIs(t, err, ErrSequenceStopped)
			assert.Equal(t, StopOverlong, stopReason(err))
		}
		assert.Len(t, srv.Hits(), 2, "the server saw the slow GET and the PUT only")
		r := b.Report()
		assert.Equal(t, StopOverlong, r.Stop)
		assert.Equal(t, 2, r.Requests)
		for _, w := range r.WaitLog {
			assert.True(t, w.Canceled)
			assert.Equal(t, 2*time.Second, w.Actual)
		}
	})
}

// A re-send refused after its wait keeps its own evidence: its own 429's
// status and request ID, with the reason of the stop another request made.
func TestWindowRefusedResendKeepsOwnEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		both := make(chan struct{})
		var once sync.Once
		later := newGate()
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			if n == 2 {
				once.Do(func() { close(both) })
			}
			<-both
			if req.URL.Path == "/a" {
				return reply(429, "Retry-After", "5", "x-ms-request-id", "a-429")(req), nil
			}
			later.wait()
			return reply(429, "Retry-After", "120", "x-ms-request-id", "b-429")(req), nil
		})
		tr := New(srv)
		b := NewBudget("s")
		ctx := WithBudget(context.Background(), b)
		errA := make(chan error)
		go func() {
			_, err := tr.RoundTrip(get(t, ctx, base+"/a"))
			errA <- err
		}()
		go func() {
			resp, err := tr.RoundTrip(get(t, ctx, base+"/b"))
			if assert.NoError(t, err) {
				assert.Equal(t, 429, resp.StatusCode)
			}
		}()
		synctest.Wait()
		time.Sleep(time.Second)
		later.release()
		err := <-errA
		var se *StopError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, StopOverlong, se.Reason)
		assert.Equal(t, 429, se.StatusCode)
		assert.Equal(t, "a-429", se.RequestID, "its own 429, not b's")
		assert.Equal(t, "b-429", b.Report().FailedReads[1].RequestID)
		assert.Len(t, srv.Hits(), 2)
	})
}

// The request limit and the total hold exactly with 400 requests of one
// sequence at once.
func TestWindowLimitsExactUnderConcurrency(t *testing.T) {
	t.Run("200 requests of 400", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(200)))
			tr := New(srv)
			b := NewBudget("inventory")
			ctx := WithBudget(context.Background(), b)
			var wg sync.WaitGroup
			var mu sync.Mutex
			refused := 0
			for range 400 {
				wg.Go(func() {
					resp, err := tr.RoundTrip(get(t, ctx, base+"/files"))
					if err != nil {
						assert.Equal(t, StopRequestsExhausted, stopReason(err))
						mu.Lock()
						refused++
						mu.Unlock()
						return
					}
					drain(resp)
				})
			}
			wg.Wait()
			assert.Len(t, srv.Hits(), 200)
			assert.Equal(t, 200, refused)
			assert.Equal(t, 200, b.Report().Requests)
		})
	})
	t.Run("total cuts 150 in flight at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
				<-req.Context().Done() // never answers
				return nil, req.Context().Err()
			})
			tr := New(srv)
			b := NewBudget("inventory", MaxTotal(7*time.Second))
			ctx := WithBudget(context.Background(), b)
			t0 := time.Now()
			var wg sync.WaitGroup
			for range 150 {
				wg.Go(func() {
					_, err := tr.RoundTrip(get(t, ctx, base+"/files"))
					assert.Equal(t, StopTotalExhausted, stopReason(err))
					assert.ErrorIs(t, err, context.DeadlineExceeded)
					assert.Equal(t, 7*time.Second, time.Since(t0))
				})
			}
			wg.Wait()
			assert.Len(t, srv.Hits(), 150)
			_, err := tr.RoundTrip(get(t, ctx, base+"/files"))
			assert.Equal(t, StopTotalExhausted, stopReason(err))
			assert.Len(t, srv.Hits(), 150, "nothing after the total")
		})
	})
}

// The repeat guard: a mutation that repeats one that met 429 (same method,
// URL and x-ms-client-request-id, as azcore's own retry sends it) is refused
// before network access; the sequence goes on, and its readback waits.
func TestRepeatGuardRefusesThrottledMutation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "2", "x-ms-request-id", "put-1"), reply(201), reply(200)))
		tr := New(srv)
		b := NewBudget("index-a")
		ctx := WithBudget(context.Background(), b)
		put := func(crid string) *http.Request {
			req := mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}")
			req.Header.Set("x-ms-client-request-id", crid)
			return req
		}
		t0 := time.Now()
		resp, err := tr.RoundTrip(put("c1"))
		require.NoError(t, err)
		require.Equal(t, 429, resp.StatusCode)
		_, err = tr.RoundTrip(put("c1"))
		require.ErrorIs(t, err, ErrRequestRefused)
		assert.NotErrorIs(t, err, ErrSequenceStopped)
		assert.Equal(t, StopRepeatRefused, stopReason(err))
		var nr interface{ NonRetriable() }
		assert.True(t, errors.As(err, &nr))
		assert.Len(t, srv.Hits(), 1, "refused before network access")
		// Another operation (its own client request ID) is not a repeat:
		// it waits for the window like every request.
		resp, err = tr.RoundTrip(put("c2"))
		require.NoError(t, err)
		assert.Equal(t, 201, resp.StatusCode)
		resp, err = tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		hits := srv.Hits()
		require.Len(t, hits, 3)
		assert.Equal(t, 2*time.Second, hits[1].At.Sub(t0))
		r := b.Report()
		assert.Equal(t, StopReason(""), r.Stop)
		assert.Equal(t, 3, r.Requests)
	})
}

// Report.Requests counts only requests handed to the base transport, and
// Report.Mutations keeps each upload's own outcomes: q1's 500 stays beside
// q2's 429 and q2's re-send.
func TestReportAccounting(t *testing.T) {
	t.Run("refused requests are not counted", func(t *testing.T) {
		srv := newScript(sequenceOf(reply(200)))
		b := NewBudget("s")
		ctx, cancel := context.WithCancel(WithBudget(context.Background(), b))
		cancel()
		_, err := New(srv).RoundTrip(get(t, ctx, base+"/x"))
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 0, b.Report().Requests)
		assert.Empty(t, srv.Hits())
		assert.Equal(t, StopReason(""), b.Report().Stop)
	})
	t.Run("per-upload outcomes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(500, "x-ms-request-id", "q1"), reply(429, "Retry-After", "1", "x-ms-request-id", "q2"), reply(201, "x-ms-request-id", "q2-again")))
			b := NewBudget("batch")
			ctx := WithQueueRetry(WithBudget(context.Background(), b))
			tr := New(srv)
			resp, err := tr.RoundTrip(mutation(t, ctx, http.MethodPost, base+"/files", "one"))
			require.NoError(t, err)
			assert.Equal(t, 500, resp.StatusCode)
			resp, err = tr.RoundTrip(mutation(t, ctx, http.MethodPost, base+"/files", "two"))
			require.NoError(t, err)
			assert.Equal(t, 201, resp.StatusCode)
			r := b.Report()
			assert.Equal(t, []MutationOutcome{
				{Request: 1, Method: "POST", StatusCode: 500, RequestID: "q1", Attempt: 1, Ownership: Unproven},
				{Request: 2, Method: "POST", StatusCode: 429, RequestID: "q2", Attempt: 1, Ownership: Owned},
				{Request: 2, Method: "POST", StatusCode: 201, RequestID: "q2-again", Acked: true, Attempt: 2, Ownership: Owned},
			}, r.Mutations)
			assert.Equal(t, Unproven, r.Ownership, "a batch with an unacknowledged upload is not owned")
			assert.Equal(t, 3, r.Requests)
		})
	})
}

// Nothing panics: a 429 with a nil Body, a context value of a type that
// cannot be compared, the zero Transport and the zero Budget.
func TestZeroValuesAndOddInputs(t *testing.T) {
	t.Run("429 with nil body", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(sequenceOf(func(r *http.Request) *http.Response {
				resp := reply(429, "Retry-After", "1")(r)
				resp.Body = nil
				return resp
			}, reply(200)))
			b := NewBudget("s")
			resp, err := New(srv).RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
			require.NoError(t, err)
			assert.Equal(t, 200, resp.StatusCode)
			assert.Len(t, srv.Hits(), 2)
		})
	})
	t.Run("uncomparable context value", func(t *testing.T) {
		type key struct{}
		type holder struct{ s []int }
		srv := newScript(sequenceOf(reply(200)))
		b := NewBudget("s")
		ctx := context.WithValue(WithBudget(context.Background(), b), key{}, holder{s: []int{1}})
		for range 2 {
			_, err := New(srv).RoundTrip(get(t, ctx, base+"/x"))
			require.NoError(t, err)
		}
		assert.Equal(t, 2, b.Report().Requests)
	})
	t.Run("zero Transport and zero Budget", func(t *testing.T) {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok")
		}))
		defer hs.Close()
		var tr Transport
		b := &Budget{}
		req, _ := http.NewRequestWithContext(WithBudget(context.Background(), b), http.MethodGet, hs.URL, nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, "ok", drain(resp))
		r := b.Report()
		assert.Equal(t, 1, r.Requests)
		assert.Equal(t, StopReason(""), r.Stop)
		l := b.s.limits
		requests, total, wait := l.maxRequests(), l.maxTotal(), l.maxWait()
		assert.Equal(t, []any{200, 60 * time.Second, 30 * time.Second}, []any{requests, total, wait})
	})
}

// No goroutine per request: 20 requests of one sequence in flight against
// a real server that holds them cost the same goroutines as 20 without a
// Budget.
func TestNoGoroutinePerRequest(t *testing.T) {
	hold := make(chan struct{})
	var arrived sync.WaitGroup
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-hold
	}))
	defer hs.Close()
	// count returns the goroutines while 20 requests are in flight (other
	// tests' goroutines may come and go meanwhile: the least of three).
	count := func(ctx context.Context, tr http.RoundTripper) int {
		least := 1 << 30
		for range 3 {
			var wg sync.WaitGroup
			arrived.Add(20)
			hold = make(chan struct{})
			for range 20 {
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
					if resp, err := tr.RoundTrip(req); err == nil {
						drain(resp)
					}
				})
			}
			arrived.Wait()
			least = min(least, runtime.NumGoroutine())
			close(hold)
			wg.Wait()
		}
		return least
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	tr := New(base)
	without := count(context.Background(), tr)
	with := count(WithBudget(context.Background(), NewBudget("s")), tr)
	cancelable, cancel := context.WithCancel(context.Background())
	defer cancel()
	withCancelable := count(WithBudget(cancelable, NewBudget("s")), tr)
	t.Logf("goroutines with 20 requests in flight: %d without a Budget, %d with, %d with a cancelable parent", without, with, withCancelable)
	assert.LessOrEqual(t, with-without, 2, "a Budget adds no goroutine per request")
	assert.LessOrEqual(t, withCancelable-without, 2, "nor with a cancelable parent")
}

// A randomized check of the window over many schedules, in fake time: each
// sequence runs several workers (GET, PUT, queue POST) against a server
// that answers 429 at random with random delays and latencies. From the
// server's ledger: no request of a sequence arrives inside its window; every
// re-send arrives no earlier than its own not-before; a PUT is never sent
// twice, a queue upload at most twice; the request limit holds.
func TestWindowInvariantsRandomSchedules(t *testing.T) {
	const seeds = 300
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { checkSchedule(t, uint64(seed)) })
		})
	}
}

type ledgerEntry struct {
	id         string // the logical request (kept across a re-send)
	method     string
	at, answer time.Time
	status     int
	delay      time.Duration
}

func checkSchedule(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	var mu sync.Mutex
	var ledger []ledgerEntry
	latencies := map[string]time.Duration{}
	srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
		id := req.Header.Get("x-test-id")
		mu.Lock()
		at := time.Now()
		lat := time.Duration(rng.IntN(4)) * 500 * time.Millisecond
		latencies[id] = lat
		status, ra := 200, 0
		if rng.IntN(3) == 0 {
			status, ra = 429, rng.IntN(4)
		}
		mu.Unlock()
		time.Sleep(lat)
		mu.Lock()
		ledger = append(ledger, ledgerEntry{id: id, method: req.Method, at: at, answer: time.Now(), status: status, delay: time.Duration(ra) * time.Second})
		mu.Unlock()
		if status == 429 {
			return reply(429, "Retry-After", fmt.Sprint(ra))(req), nil
		}
		return reply(status)(req), nil
	})
	tr := New(srv)
	maxReq := 5 + rng.IntN(30)
	b := NewBudget("s", MaxRequests(maxReq))
	ctx := WithBudget(context.Background(), b)
	type worker struct {
		kind, count int
		start       time.Duration
	}
	workers := make([]worker, 1+rng.IntN(6))
	for i := range workers {
		workers[i] = worker{kind: rng.IntN(3), count: 1 + rng.IntN(5), start: time.Duration(rng.IntN(6)) * 250 * time.Millisecond}
	}
	var wg sync.WaitGroup
	for w, wk := range workers {
		kind, count, start := wk.kind, wk.count, wk.start
		wg.Go(func() {
			time.Sleep(start)
			for i := range count {
				id := fmt.Sprintf("w%d-%d", w, i)
				var req *http.Request
				switch kind {
				case 0:
					req = get(t, ctx, base+"/r")
				case 1:
					req = mutation(t, ctx, http.MethodPut, base+"/p", "x")
				default:
					req = mutation(t, WithQueueRetry(ctx), http.MethodPost, base+"/q", "x")
				}
				req.Header.Set("x-test-id", id)
				if resp, err := tr.RoundTrip(req); err == nil {
					drain(resp)
				}
			}
		})
	}
	wg.Wait()
	r := b.Report()
	b.s.mu.Lock()
	win := b.s.win
	b.s.mu.Unlock()
	if win != nil {
		assert.Equal(t, r.Window.Length, win.until.Sub(win.opened))
	}
	require.LessOrEqual(t, len(ledger), maxReq, "request limit")
	assert.Equal(t, len(ledger), r.Requests)
	sent := map[string][]ledgerEntry{}
	for _, e := range ledger {
		sent[e.id] = append(sent[e.id], e)
		// Once the client holds a 429, nothing of the sequence is sent
		// before that 429's not-before: it opened or joined the window
		// (whose end is then at least that), or it stopped the sequence.
		for _, r := range ledger {
			if r.status == 429 && e.at.After(r.answer) {
				assert.False(t, e.at.Before(r.answer.Add(r.delay)),
					"seed %d: %s %s arrived at %v, after %s's 429 (answered %v, Retry-After %v) and before its not-before",
					seed, e.method, e.id, e.at, r.id, r.answer, r.delay)
			}
		}
	}
	for id, es := range sent {
		switch es[0].method {
		case http.MethodPut:
			assert.Len(t, es, 1, "seed %d: PUT %s sent twice", seed, id)
		default:
			require.LessOrEqual(t, len(es), 2, "seed %d: %s sent more than twice", seed, id)
		}
		if len(es) == 2 {
			first := es[0]
			if es[1].at.Before(es[0].at) {
				first = es[1]
			}
			again := es[0]
			if again == first {
				again = es[1]
			}
			require.Equal(t, 429, first.status)
			assert.False(t, again.at.Before(first.answer.Add(first.delay)), "seed %d: %s re-sent before its own not-before", seed, id)
		}
	}
	if win == nil {
		assert.Zero(t, r.Waits)
	}
}

// A method the transport does not know (Azure Table storage's MERGE) is a
// mutation: its 429 goes back untouched, it is never re-sent, and its
// delay holds the sequence's readback; HEAD passes through and holds
// nothing.
func TestUnknownMethodIsAMutation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "2"), reply(429, "Retry-After", "5"), reply(200)))
		b := NewBudget("entity")
		ctx := WithBudget(context.Background(), b)
		tr := New(srv)
		t0 := time.Now()
		resp, err := tr.RoundTrip(mutation(t, ctx, "MERGE", base+"/table(PartitionKey='a',RowKey='b')", "{}"))
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		head, _ := http.NewRequestWithContext(ctx, http.MethodHead, base+"/x", nil)
		resp, err = tr.RoundTrip(head)
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode, "HEAD's 429 passes through")
		resp, err = tr.RoundTrip(get(t, ctx, base+"/table"))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		hits := srv.Hits()
		require.Len(t, hits, 3)
		assert.Equal(t, []string{"MERGE", "HEAD", "GET"}, []string{hits[0].Method, hits[1].Method, hits[2].Method})
		assert.Equal(t, 2*time.Second, hits[1].At.Sub(t0), "the HEAD waited for the window too: it is a request of the sequence")
		assert.Equal(t, 2*time.Second, hits[2].At.Sub(t0))
		r := b.Report()
		require.Len(t, r.Mutations, 1)
		assert.Equal(t, "MERGE", r.Mutations[0].Method)
		assert.Equal(t, "write-429", r.Window.Trigger)
		assert.Equal(t, StopReason(""), r.Stop)
	})
}
