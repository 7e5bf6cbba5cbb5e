package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
)

// Concurrent sequences: several goroutines share one Budget, as Azure SDK
// clients do (azblob downloads the ranges of a blob in parallel; a caller
// lists pages while it reads others). Each such sequence gets a fakeserver
// of its own, so that the server's whole ledger is that sequence's, and
// every request the caller issues carries a query parameter of its own
// name ("rq0001=1", a name because the ledger keeps query names, never
// values). With it the checks tell apart, from the ledger alone:
//
//   - the transport's re-send (a second arrival of the same key after a
//     429) from the caller's own retry (a new key);
//   - net/http's replay of a GET (a second arrival of the same key right
//     after the first was reset without an answer), see nethttpReplay;
//   - a request in flight when the window opened from one issued during
//     it, by the time the caller issued it (the harness notes the time
//     before it calls Do, on the same clock the server stamps arrivals
//     with).
//
// The invariants checked (docs/policy.md: the window rules, one-window-per-sequence to count-what-was-sent), besides the request limit and
// the total that every sequence is checked against:
//
//   - no request of a sequence arrives inside its window: between the
//     arrival of the 429 that opened it (the sequence's first 429 with a
//     Retry-After that allows a re-send) and that 429's not-before T, no
//     request issued after the window opened arrives, and no re-send;
//   - at most one window: a 429 on a request sent at or after T (or
//     issued while the window was open, so sent at T) is never re-sent,
//     and nothing the caller issues after such a stop reaches the server;
//   - every re-send arrives no earlier than its own 429's not-before;
//   - a mutation is re-sent only on the queue route, and nothing is sent
//     more than twice (net/http's replays aside).

// soakWindowGrace bounds how long after a 429 reaches the server the
// transport may take to open the window: a request the caller issued
// within it may have been in flight when the window opened (it may join,
// R43). Past it, or past the time the caller itself saw that 429, a
// request was issued while the window was open.
const soakWindowGrace = 250 * time.Millisecond

// nethttpReplay names the findings of net/http's own replays. When a
// keep-alive connection that http.Transport reused is reset before any
// byte of the answer, the Transport re-sends a replayable request (a GET
// without a body) by itself, beneath every RoundTripper above it: the
// Budget never sees that second send and cannot count it. The soak
// recognizes such a replay in the ledger (the same request arriving again
// right after a reset), counts and reports it under this name, and leaves
// it out of the request counts it compares with the Budget's. It is not a
// violation of the policy: the policy cannot see it, and it happens with
// every RoundTripper, the bare transport included.
const nethttpReplay = "net/http replays after a reset (beneath the policy)"

// issued is what the caller noted of one request it issued.
type issued struct {
	at, done time.Time // before Do; after the body was read and closed
	status   int       // the status the caller saw, 0 for an error
	stopped  bool      // the caller got ErrSequenceStopped
}

// concSeq is one concurrent sequence: its keys and what the caller saw.
type concSeq struct {
	s    *soak
	next atomic.Int64
	mu   sync.Mutex
	reqs map[string]*issued
}

func newConcSeq(s *soak) *concSeq { return &concSeq{s: s, reqs: map[string]*issued{}} }

// send issues one request under a key of its own and notes the times.
func (cs *concSeq) send(c *http.Client, ctx context.Context, method, url string, body []byte, hdr ...string) outcome {
	key := fmt.Sprintf("rq%04d", cs.next.Add(1))
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	rec := &issued{at: time.Now()}
	cs.mu.Lock()
	cs.reqs[key] = rec
	cs.mu.Unlock()
	o := cs.s.send(c, ctx, method, url+sep+key+"=1", body, hdr...)
	cs.mu.Lock()
	rec.done, rec.status, rec.stopped = time.Now(), o.status, o.stopped()
	cs.mu.Unlock()
	return o
}

// requestKey returns the harness key of a ledger entry, "" when none.
func requestKey(e fakeserver.Request) string {
	for _, k := range e.QueryKeys {
		if len(k) > 2 && strings.HasPrefix(k, "rq") {
			if _, err := strconv.Atoi(k[2:]); err == nil {
				return k
			}
		}
	}
	return ""
}

// concurrentBudget draws a concurrent sequence's limits and parent
// context: a total of 4–10 s, now and then a lowered request limit.
func (s *soak) concurrentBudget(r *rand.Rand, name string, hint int) (*readrecovery.Budget, int, time.Duration, context.Context, context.CancelFunc) {
	b, maxReq, total := newBudget(r, name, hint)
	parent, cancel := s.parent(r, total)
	return b, maxReq, total, readrecovery.WithBudget(parent, b), cancel
}

// burst scripts a throttle burst on route: the next 1–3 matching requests
// from the nth on meet a 429, all with the same Retry-After form.
func burst(sc *fakeserver.Script, route string, r *rand.Rand, nth int) {
	sc.Add(route, fakeserver.Throttle(pickRetryAfter(r)), fakeserver.Nth(nth), fakeserver.Times(1+r.IntN(3)))
}

// runRanges reads 4–8 ranges of one checkpoint in parallel in one
// sequence, as azblob's DownloadBuffer does (the fakeserver does not
// serve Range, so each range is a blob of its own under the checkpoint's
// prefix: the request shape, parallel GETs under one Budget, is the
// same). A burst of 429s meets the first parallel GETs more often than
// not; a failed range is read once more by the caller.
func (s *soak) runRanges(r *rand.Rand, id int64) {
	srv, base := startFake(s.t)
	n := 4 + r.IntN(5)
	for i := range n {
		srv.PutBlob("ckpt", fmt.Sprintf("p%06d/range-%02d", id, i), fmt.Appendf(nil, `{"range":%d,"checkpoint":%d}`, i, id))
	}
	sc := srv.Script()
	if r.IntN(5) < 3 {
		burst(sc, fakeserver.RouteBlobGet, r, 1)
	}
	addReadFault(sc, fakeserver.RouteBlobGet, r, base+"/elsewhere", func() []fakeserver.RuleOption {
		return []fakeserver.RuleOption{fakeserver.Nth(1 + r.IntN(n))}
	})
	name := fmt.Sprintf("ranges %06d", id)
	b, maxReq, total, ctx, cancel := s.concurrentBudget(r, name, n)
	defer cancel()
	cs := newConcSeq(s)
	c := s.client(r)
	t0 := time.Now()
	var wg sync.WaitGroup
	var stopped atomic.Bool
	for i := range n {
		wg.Go(func() {
			url := fmt.Sprintf("%s/ckpt/p%06d/range-%02d", base, id, i)
			for range 2 {
				o := cs.send(c, ctx, http.MethodGet, url, nil, "x-ms-range", fmt.Sprintf("bytes=%d-%d", i*4096, i*4096+4095))
				if o.stopped() {
					stopped.Store(true)
					return
				}
				if o.err == nil && o.status == http.StatusOK {
					return
				}
			}
		})
	}
	wg.Wait()
	if stopped.Load() {
		cs.probe(c, ctx, http.MethodGet, fmt.Sprintf("%s/ckpt/p%06d/range-00", base, id), "ranges")
	}
	s.timed(name, t0, total)
	s.finishConcurrent(srv, cs, &seqRecord{kind: "ranges", maxRequests: maxReq, maxTotal: total, report: b.Report()})
}

// runReadbacks PUTs an index definition, which meets a write 429 more
// often than not, then reads it back with 3–6 concurrent GETs of the same
// Budget, each read once more by the caller when it is not a 200. After a
// kept write-429 delay every readback must wait for it (R8, R42).
func (s *soak) runReadbacks(r *rand.Rand, id int64) {
	srv, base := startFake(s.t)
	idx := fmt.Sprintf("rb-%06d", id)
	url := base + "/indexes/" + idx + "?api-version=2024-07-01"
	sc := srv.Script()
	if r.IntN(5) < 3 {
		sc.Add(fakeserver.RouteSearchPut, fakeserver.Throttle(pickRetryAfter(r)), fakeserver.Nth(1))
	} else if f, persistent, ok := pickWriteFault(r, base+"/elsewhere"); ok {
		opts := []fakeserver.RuleOption{fakeserver.Nth(1)}
		if persistent {
			opts = append(opts, fakeserver.Always())
		}
		sc.Add(fakeserver.RouteSearchPut, f, opts...)
	}
	k := 3 + r.IntN(4)
	addReadFault(sc, fakeserver.RouteSearchGet, r, base+"/elsewhere", func() []fakeserver.RuleOption {
		return []fakeserver.RuleOption{fakeserver.Nth(1 + r.IntN(k))}
	})
	name := "readbacks " + idx
	b, maxReq, total, ctx, cancel := s.concurrentBudget(r, name, k+1)
	defer cancel()
	cs := newConcSeq(s)
	c := s.client(r)
	t0 := time.Now()
	def := fmt.Appendf(nil, `{"name":%q,"fields":[{"name":"id","type":"Edm.String","key":true}],"nonce":%d}`, idx, id)
	o := cs.send(c, ctx, http.MethodPut, url, def, "Content-Type", "application/json")
	stopped := o.stopped()
	if !stopped {
		var wg sync.WaitGroup
		var st atomic.Bool
		for range k {
			wg.Go(func() {
				for range 2 {
					o := cs.send(c, ctx, http.MethodGet, url, nil)
					if o.stopped() {
						st.Store(true)
						return
					}
					if o.err == nil && o.status == http.StatusOK {
						return
					}
				}
			})
		}
		wg.Wait()
		stopped = st.Load()
	}
	if stopped {
		cs.probe(c, ctx, http.MethodGet, url, "readbacks")
	}
	s.timed(name, t0, total)
	s.finishConcurrent(srv, cs, &seqRecord{kind: "readbacks", maxRequests: maxReq, maxTotal: total, report: b.Report()})
}

// runPagesAndReads lists a File share page by page in one goroutine while
// 2–4 others read blobs, all in one sequence; faults on both routes.
func (s *soak) runPagesAndReads(r *rand.Rand, id int64) {
	srv, base := startFake(s.t)
	files, limit := 10+r.IntN(40), 2+r.IntN(9)
	for i := range files {
		srv.AddFile(fmt.Sprintf("pr-%06d-%03d.bin", id, i), fmt.Appendf(nil, "%d/%d", id, i))
	}
	pages := (files + limit - 1) / limit
	readers, perReader := 2+r.IntN(3), 2+r.IntN(4)
	for i := range readers * perReader {
		srv.PutBlob("ckpt", fmt.Sprintf("r%06d/obj-%02d", id, i), fmt.Appendf(nil, `{"obj":%d}`, i))
	}
	sc := srv.Script()
	addReadFault(sc, fakeserver.RouteFileList, r, base+"/elsewhere", func() []fakeserver.RuleOption {
		return []fakeserver.RuleOption{fakeserver.Nth(1 + r.IntN(pages))}
	})
	if r.IntN(2) == 0 {
		burst(sc, fakeserver.RouteBlobGet, r, 1+r.IntN(readers*perReader))
	}
	name := fmt.Sprintf("pages+reads %06d", id)
	b, maxReq, total, ctx, cancel := s.concurrentBudget(r, name, pages+readers*perReader)
	defer cancel()
	cs := newConcSeq(s)
	c := s.client(r)
	t0 := time.Now()
	var wg sync.WaitGroup
	var stopped atomic.Bool
	wg.Go(func() {
		cursor := ""
		for {
			url := base + "/files?limit=" + strconv.Itoa(limit)
			if cursor != "" {
				url += "&after=" + cursor
			}
			o := cs.send(c, ctx, http.MethodGet, url, nil)
			if o.stopped() {
				stopped.Store(true)
				return
			}
			if o.err != nil || o.status != http.StatusOK {
				return // the caller gives up the listing
			}
			var p inventoryPage
			if err := json.Unmarshal(o.body, &p); err != nil || p.Next == "" {
				return
			}
			cursor = p.Next
		}
	})
	for g := range readers {
		wg.Go(func() {
			for j := range perReader {
				url := fmt.Sprintf("%s/ckpt/r%06d/obj-%02d", base, id, g*perReader+j)
				if o := cs.send(c, ctx, http.MethodGet, url, nil); o.stopped() {
					stopped.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	if stopped.Load() {
		cs.probe(c, ctx, http.MethodGet, base+"/files?limit=1", "pages+reads")
	}
	s.timed(name, t0, total)
	s.finishConcurrent(srv, cs, &seqRecord{kind: "pages+reads", maxRequests: maxReq, maxTotal: total, report: b.Report()})
}

// runCapBurst has 8 goroutines read 40 blobs each in one sequence with
// the default limits: 320 requests asked, so the 200-request ceiling
// must hold exactly under concurrency (R2, R43); a 429 burst somewhere in
// the middle opens a window.
func (s *soak) runCapBurst(r *rand.Rand, id int64) {
	srv, base := startFake(s.t)
	const goroutines, each = 8, 40
	for g := range goroutines {
		srv.PutBlob("ckpt", fmt.Sprintf("c%06d/obj-%d", id, g), fmt.Appendf(nil, `{"obj":%d}`, g))
	}
	sc := srv.Script()
	sc.Add(fakeserver.RouteBlobGet, fakeserver.Throttle(fakeserver.RetryAfterSeconds(int64(r.IntN(2)))), fakeserver.Nth(20+r.IntN(100)), fakeserver.Times(1+r.IntN(3)))
	name := fmt.Sprintf("cap %06d", id)
	b := readrecovery.NewBudget(name, readrecovery.MaxTotal(soakMaxTotal))
	ctx := readrecovery.WithBudget(context.Background(), b)
	cs := newConcSeq(s)
	c := s.noFollow
	t0 := time.Now()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			url := fmt.Sprintf("%s/ckpt/c%06d/obj-%d", base, id, g)
			for range each {
				if o := cs.send(c, ctx, http.MethodGet, url, nil); o.stopped() {
					return
				}
			}
		})
	}
	wg.Wait()
	s.timed(name, t0, soakMaxTotal)
	s.finishConcurrent(srv, cs, &seqRecord{kind: "cap-200", maxRequests: readrecovery.MaxSequenceRequests, maxTotal: soakMaxTotal, report: b.Report()})
}

// probe sends one more request of a stopped sequence (marked "probe"):
// the transport must refuse it before the network.
func (cs *concSeq) probe(c *http.Client, ctx context.Context, method, url, kind string) {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	o := cs.send(c, ctx, method, url+sep+"probe=1", nil)
	if !o.stopped() {
		cs.s.violate("request after a stop not refused", "%s: a request after the sequence stopped was not refused with ErrSequenceStopped: status %d, %v", kind, o.status, o.err)
	}
	cs.s.tot.add("probes refused", 1)
}

// finishConcurrent closes a concurrent sequence's server and checks its
// ledger.
func (s *soak) finishConcurrent(srv *fakeserver.Server, cs *concSeq, rec *seqRecord) {
	if err := srv.Close(); err != nil {
		s.violate("harness error", "closing a fakeserver: %v", err)
	}
	s.checkServer(srv)
	cs.mu.Lock()
	reqs := cs.reqs
	cs.mu.Unlock()
	s.tot.add("concurrent requests issued by callers", len(reqs))
	s.checkConcurrent(rec, srv.Requests(), srv.Script().Rules(), reqs)
	stop := string(rec.report.Stop)
	if stop == "" {
		stop = "none (ran to its end)"
	}
	s.tot.add("cstop "+rec.kind+": "+stop, 1)
	s.finish(rec, false)
}

// checkConcurrent checks one concurrent sequence's ledger (es, the whole
// ledger of its own server) against what its callers issued (reqs, by
// key). See the comment at the top of this file for the invariants.
func (s *soak) checkConcurrent(rec *seqRecord, es []fakeserver.Request, rules []fakeserver.Rule, reqs map[string]*issued) {
	name := rec.report.Sequence
	violate := func(category, format string, args ...any) {
		s.violate(category+" ["+rec.kind+"]", format, args...)
	}
	if len(es) == 0 {
		return
	}
	es = append([]fakeserver.Request(nil), es...)
	sort.Slice(es, func(i, j int) bool { return es[i].Seq < es[j].Seq })
	debug := func() {
		if os.Getenv("SOAK_DEBUG") == "" || s.t == nil {
			return
		}
		for _, e := range es {
			s.t.Logf("   %d %s %s %v status %d fault %q +%v", e.Seq, e.Method, e.Path, e.QueryKeys, e.Status, e.Fault, e.Arrived.Sub(es[0].Arrived))
		}
	}

	// Attempts per key, net/http's replays set apart.
	replay := make([]bool, len(es))
	attempt := make([]int, len(es)) // 1 for the first send of a key, 2 for its re-send...
	prev := make([]int, len(es))    // index of the previous non-replayed arrival of the key, -1
	last := map[string]int{}        // last arrival of a key
	counted := map[string]int{}     // non-replayed arrivals of a key
	lastSent := map[string]int{}
	replays := 0
	for i, e := range es {
		prev[i] = -1
		k := requestKey(e)
		if k == "" || reqs[k] == nil {
			violate("harness error", "%s: request %d %s %s carries no key the caller issued", name, e.Seq, e.Method, e.Path)
			continue
		}
		if j, ok := last[k]; ok && es[j].Status == 0 && e.Method == http.MethodGet {
			replay[i] = true
			replays++
			last[k] = i
			continue
		}
		if j, ok := lastSent[k]; ok {
			prev[i] = j
		}
		counted[k]++
		attempt[i] = counted[k]
		last[k], lastSent[k] = i, i
	}
	s.tot.add(nethttpReplay, replays)

	// The request limit and the Budget's count, net/http's replays aside.
	if n := len(es) - replays; n > rec.report.Requests {
		violate("server saw more than the Budget counted", "%s: the server saw %d requests (%d more replayed by net/http), the report counts %d", name, n, replays, rec.report.Requests)
		debug()
	} else if n > rec.maxRequests || n > readrecovery.MaxSequenceRequests {
		violate("more requests than the limit", "%s: the server saw %d requests (%d more replayed by net/http), limit %d", name, n, replays, rec.maxRequests)
	}
	// Nothing after the total ran out.
	end := es[0].Arrived.Add(rec.maxTotal + soakArrivalSlack)
	for _, e := range es {
		if e.Arrived.After(end) {
			violate("request after the total ran out", "%s: request %d arrived %v after the sequence's first, past its total %v",
				name, e.Seq, e.Arrived.Sub(es[0].Arrived).Round(time.Millisecond), rec.maxTotal)
		}
	}

	// The window: opened by the first 429 whose Retry-After allows a
	// re-send; none when the first 429 must stop the sequence.
	open := -1
	var windowStart, windowEnd, openedBy time.Time
	// Which 429 opened it is the client's view: 429s of requests in flight
	// together reach the client in any order, so the first the server
	// answered need not be the first the transport decided. The report
	// names the one that did.
	opener := ""
	if rec.report.Window != nil {
		opener = rec.report.Window.RequestID
	}
	for i, e := range es {
		if replay[i] || e.Status != http.StatusTooManyRequests {
			continue
		}
		if opener != "" && e.RequestID != opener {
			continue
		}
		if nb, ok := s.notBefore(name, e, rules); ok {
			open, windowStart, windowEnd = i, e.Arrived, nb
			openedBy = e.Arrived.Add(soakWindowGrace)
			if in := reqs[requestKey(e)]; in.status == http.StatusTooManyRequests && in.done.Before(openedBy) {
				openedBy = in.done // the caller saw this 429: the window was open by then
			}
			s.tot.add("windows opened (ledger)", 1)
		}
		break
	}
	// joinable: the original of es[i] may have been in flight when the
	// window opened (issued before it surely was). A request issued after
	// that waited in the window (R42) and was sent at or after its end, so
	// a 429 on it stops the sequence (R43), as does one on a re-send.
	joinable := func(i int) bool {
		return open >= 0 && reqs[requestKey(es[i])].at.Before(openedBy)
	}
	// stops: 429s after which the sequence must stop, and when the caller
	// learned of each.
	var stops []int
	windows := 0
	if open >= 0 {
		windows = 1
	}
	for i, e := range es {
		if replay[i] || requestKey(e) == "" || slices.Contains(e.QueryKeys, "probe") {
			continue
		}
		in := reqs[requestKey(e)]
		if attempt[i] == 1 {
			if open >= 0 && i != open && e.Arrived.After(windowStart) && e.Arrived.Before(windowEnd) && !in.at.Before(openedBy) {
				violate("request inside the window (R42)", "%s: request %d (%s %s) was issued %v after the 429 of request %d (which opened the window) arrived, and reached the server %v before the window's end",
					name, e.Seq, e.Method, e.Path, in.at.Sub(windowStart).Round(time.Millisecond), es[open].Seq, windowEnd.Sub(e.Arrived).Round(time.Millisecond))
				debug()
			}
		} else {
			p := es[prev[i]]
			if attempt[i] > 2 {
				violate("request sent more than twice", "%s: request %d is the %d. send of the same request", name, e.Seq, attempt[i])
			}
			if e.Mutation() && p.Route != fakeserver.RouteFileUpload {
				violate("mutation re-sent outside the queue route", "%s: request %d re-sent the %s of request %d (%s)", name, e.Seq, e.Method, p.Seq, p.Route)
			}
			if p.Status != http.StatusTooManyRequests {
				violate("re-sent after an answer other than 429", "%s: request %d re-sent request %d, which was answered %d", name, e.Seq, p.Seq, p.Status)
			} else if nb, ok := s.notBefore(name, p, rules); !ok {
				violate("request after a stopping Retry-After", "%s: request %d re-sent request %d, whose Retry-After must stop the sequence", name, e.Seq, p.Seq)
			} else if e.Arrived.Before(nb) {
				violate("re-send before its own not-before", "%s: request %d re-sent request %d %v after its 429, %v before its not-before",
					name, e.Seq, p.Seq, e.Arrived.Sub(p.Arrived).Round(time.Millisecond), nb.Sub(e.Arrived).Round(time.Millisecond))
			} else {
				s.tot.addWait(e.Arrived.Sub(p.Arrived), nb.Sub(p.Arrived))
			}
			if open >= 0 && e.Arrived.Before(windowEnd) {
				violate("re-send inside the window (R43)", "%s: request %d (re-send of %d) arrived %v before the end of the window request %d opened",
					name, e.Seq, p.Seq, windowEnd.Sub(e.Arrived).Round(time.Millisecond), es[open].Seq)
			}
			if prev[i] != open && p.Status == http.StatusTooManyRequests {
				if attempt[prev[i]] == 1 && joinable(prev[i]) {
					s.tot.add("in-flight 429s that joined the window (ledger)", 1)
				} else {
					windows++
					violate("more than one window", "%s: request %d re-sent request %d, whose 429 came after the window (sent at or after its end, or a re-send)", name, e.Seq, p.Seq)
				}
			}
		}
		if e.Status == http.StatusTooManyRequests && i != open {
			_, ok := s.notBefore(name, e, rules)
			if !ok || attempt[i] > 1 || open < 0 || !joinable(i) {
				stops = append(stops, i)
			}
		}
	}
	s.tot.add("ledger waits", windows)
	// Nothing the caller issued after it learned of a stop arrives.
	for _, z := range stops {
		learned := reqs[requestKey(es[z])].done
		for i, e := range es {
			if replay[i] || attempt[i] != 1 || slices.Contains(e.QueryKeys, "probe") {
				continue
			}
			if reqs[requestKey(e)].at.After(learned) {
				violate("request after a stop", "%s: request %d was issued after the caller got the answer to request %d, whose 429 stops the sequence (R43), yet it reached the server",
					name, e.Seq, es[z].Seq)
			}
		}
	}
}

// notBefore returns the not-before time of a 429 in the ledger, and false
// when its Retry-After must stop the sequence.
func (s *soak) notBefore(name string, e fakeserver.Request, rules []fakeserver.Rule) (time.Time, bool) {
	if e.Rule < 0 || e.Rule >= len(rules) {
		s.violate("harness error", "%s: request %d: 429 without its rule", name, e.Seq)
		return time.Time{}, false
	}
	return earliestAfter(rules[e.Rule].Fault.RetryAfter(), e.Arrived)
}
