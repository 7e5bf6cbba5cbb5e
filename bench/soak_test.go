package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
	"go.uber.org/goleak"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// The soak's knobs: a flag, else an environment variable, else the default.
var (
	soakFlag         = flag.Bool("soak", false, "run TestSoak, the long soak (also with SOAK=1; bench/ci.sh sets it)")
	soakDurationFlag = flag.Duration("soak.duration", 0, "how long the soak starts new sequences (default $SOAK_DURATION or 40s; 5s with -short)")
	soakWorkersFlag  = flag.Int("soak.workers", 0, "concurrent sequences (default $SOAK_WORKERS or 48)")
	soakSeedFlag     = flag.Uint64("soak.seed", 0, "random seed (default $SOAK_SEED or the clock; printed)")
)

// Bounds of the soak's sequences: every total is short so that the soak
// ends within a few seconds of its duration, and every Retry-After small
// (0–2 s) so that waits fit in it.
const (
	soakMinTotal = 4 * time.Second
	soakMaxTotal = 10 * time.Second
	// soakArrivalSlack is how long after a sequence's deadline a request
	// admitted just before it may still reach the server.
	soakArrivalSlack = 250 * time.Millisecond
	// soakHeapSlack is how far above its start the live heap may end.
	soakHeapSlack = 16 << 20
)

// TestSoak runs many concurrent sequences against fakeservers on loopback
// for about a minute, with faults injected at random, and then checks the
// invariants of the read-recovery policy from the servers' ledgers (what
// the servers saw, not what the client says):
//
//   - no mutation sent twice, except the queue route's one re-send, which
//     carries the same body;
//   - at most one wait per sequence: at most one 429 of a sequence is
//     followed by another request of it to the same path;
//   - never more than 200 requests per sequence (nor more than its own
//     MaxRequests);
//   - no wait shorter than asked: the request that follows a 429 arrives
//     no sooner than its Retry-After allows (delay-seconds, HTTP-date, the
//     1 s fallback of a missing, malformed or duplicated field);
//   - nothing sent after a stop: an oversized or overlong Retry-After is
//     never followed by a request of its sequence; nothing of a serial
//     sequence follows a 429 it did not recover; nothing arrives after the
//     sequence's total ran out; the probe every caller sends after
//     ErrSequenceStopped never reaches a server;
//   - no redirect followed: nothing ever arrives at a redirect's Location;
//   - no goroutine leak after shutdown (goleak), and the live heap back
//     near its start.
//
// Concurrent sequences (soak_concurrent_test.go) add the window's
// invariants (R42–R46). GETs that net/http replays by itself after a
// connection reset are a named category of findings (nethttpReplay),
// counted and reported, not violations.
//
// It prints the totals: sequences, requests, waits, stops by reason,
// faults injected. It runs about a minute, so only when asked: -soak or
// SOAK=1 (bench/ci.sh). A plain go test runs TestSoakChecks instead, which
// proves the checks on ledgers made by hand.
func TestSoak(t *testing.T) {
	if !*soakFlag && os.Getenv("SOAK") != "1" {
		t.Skip("the soak runs about a minute: go test -run TestSoak -soak (or SOAK=1; bench/ci.sh does)")
	}
	cfg := soakConfigFromEnv(t)
	t.Logf("soak: %s of new sequences, %d workers, seed %d (SOAK_SEED=%d reproduces the plan)", cfg.duration, cfg.workers, cfg.seed, cfg.seed)
	ignore := goleak.IgnoreCurrent()
	heapStart := liveHeap()

	tot := runSoak(t, cfg)

	// Everything is closed: no goroutine may remain, the heap must shrink
	// back. Budgets' total timers keep their sequences for at most
	// soakMaxTotal after their first request.
	goleak.VerifyNone(t, ignore)
	heapEnd := liveHeap()
	for deadline := time.Now().Add(soakMaxTotal + time.Second); heapEnd > heapStart+soakHeapSlack && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		heapEnd = liveHeap()
	}
	tot.heapStart, tot.heapEnd = heapStart, heapEnd
	fmt.Print(tot.String())
	if heapEnd > heapStart+soakHeapSlack {
		t.Errorf("live heap %d B after the soak, %d B before: more than %d B above its start", heapEnd, heapStart, soakHeapSlack)
	}
	if tot.sequences() == 0 || tot.requests == 0 {
		t.Errorf("the soak ran no sequence")
	}
}

type soakConfig struct {
	duration time.Duration
	workers  int
	seed     uint64
}

func soakConfigFromEnv(t *testing.T) soakConfig {
	t.Helper()
	c := soakConfig{duration: 40 * time.Second, workers: 48, seed: uint64(time.Now().UnixNano())}
	if testing.Short() {
		c.duration = 5 * time.Second
	}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK_DURATION: %v", err)
		}
		c.duration = d
	}
	if v := os.Getenv("SOAK_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SOAK_WORKERS: %q", v)
		}
		c.workers = n
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED: %v", err)
		}
		c.seed = n
	}
	if *soakDurationFlag > 0 {
		c.duration = *soakDurationFlag
	}
	if *soakWorkersFlag > 0 {
		c.workers = *soakWorkersFlag
	}
	if *soakSeedFlag != 0 {
		c.seed = *soakSeedFlag
	}
	return c
}

// soak is one run: two shared fakeservers (Search indexes, Blob
// checkpoints) that every worker uses at once, and a fresh fakeserver per
// File sequence (one File share per inventory or upload batch, so that a
// fault scripted on /files reaches that sequence and no other).
type soak struct {
	t   *testing.T
	cfg soakConfig
	end time.Time // no new sequence starts after it

	base     *http.Transport
	control  bool         // a peer under test instead of readrecovery
	noFollow *http.Client // returns redirects (readrecovery.NewClient's policy)
	follow   *http.Client // follows redirects: the transport must refuse (R11)

	search, blob       *fakeserver.Server
	searchURL, blobURL string
	tmp                string

	mu         sync.Mutex
	shared     []*seqRecord // sequences on the shared servers, checked at the end
	violations []string
	byCategory map[string][]string // the first messages of each category
	replays    []string            // net/http replay findings (nethttpReplay)
	tot        *soakTotals
}

// seqRecord is what a sequence's checks need: its identity on its server,
// its limits, and its own report (the client's word, used only for totals
// and a cross-check).
type seqRecord struct {
	kind        string
	key         string // search: the index path; checkpoint: the blob prefix
	maxRequests int
	maxTotal    time.Duration
	serial      bool
	report      readrecovery.Report
}

func runSoak(t *testing.T, cfg soakConfig) *soakTotals {
	s := &soak{t: t, cfg: cfg, tmp: t.TempDir(), tot: newSoakTotals()}
	s.base = cleanhttp.DefaultPooledTransport()
	s.base.MaxIdleConnsPerHost = 16
	rt := soakTransport(t, s.base)
	_, s.control = rt.(*readrecovery.Transport)
	s.control = !s.control
	s.noFollow = &http.Client{Transport: rt, CheckRedirect: noRedirect}
	s.follow = &http.Client{Transport: rt}
	s.search, s.searchURL = startFake(t)
	s.blob, s.blobURL = startFake(t)

	start := time.Now()
	s.end = start.Add(cfg.duration)
	var wg sync.WaitGroup
	var ids atomic.Int64
	for w := range cfg.workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(cfg.seed, uint64(w)))
			for time.Now().Before(s.end) {
				id := ids.Add(1)
				switch x := r.IntN(200); {
				case x < 50:
					s.runSearch(r, id)
				case x < 90:
					s.runCheckpoint(r, id)
				case x < 120:
					s.runInventory(r, id)
				case x < 150:
					s.runUploadBatch(r, id)
				case x < 172:
					s.runRanges(r, id)
				case x < 188:
					s.runReadbacks(r, id)
				case x < 198:
					s.runPagesAndReads(r, id)
				default:
					s.runCapBurst(r, id)
				}
			}
		})
	}
	wg.Wait()
	s.tot.elapsed = time.Since(start)

	// The shared servers' ledgers, checked sequence by sequence.
	s.checkShared(s.search, "search", func(p string) string { return p })
	s.checkShared(s.blob, "checkpoint", func(p string) string {
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			return p[:i+1]
		}
		return p
	})
	for _, srv := range []*fakeserver.Server{s.search, s.blob} {
		s.checkServer(srv)
		if err := srv.Close(); err != nil {
			t.Errorf("closing a fakeserver: %v", err)
		}
	}
	s.noFollow.CloseIdleConnections()
	s.base.CloseIdleConnections()

	// The first five of each category, so that a rare one is not hidden
	// behind a frequent one; the totals count them all.
	cats := slices.Sorted(maps.Keys(s.byCategory))
	for _, c := range cats {
		for _, v := range s.byCategory[c] {
			t.Errorf("%s: %s", c, v)
		}
	}
	if n := len(s.violations); n > 0 {
		t.Errorf("%d violations in all (the first five of each category above)", n)
	}
	for i, v := range s.replays {
		if i == 5 {
			t.Logf("... and %d more replay findings", len(s.replays)-i)
			break
		}
		t.Logf("%s: %s", nethttpReplay, v)
	}
	return s.tot
}

// soakTransport is the transport under test: readrecovery over base, or,
// with SOAK_TRANSPORT=retryablehttp or failsafe, a peer in its place as a
// negative control (the soak must then report violations: that is how one
// sees its checks can fail).
func soakTransport(t *testing.T, base http.RoundTripper) http.RoundTripper {
	switch v := os.Getenv("SOAK_TRANSPORT"); v {
	case "", "readrecovery":
		return readrecovery.New(base)
	case "retryablehttp":
		rc := retryablehttp.NewClient()
		rc.HTTPClient = &http.Client{Transport: base, CheckRedirect: noRedirect}
		rc.Logger = nil
		rc.RetryWaitMin, rc.RetryWaitMax = 0, time.Second
		return &retryablehttp.RoundTripper{Client: rc}
	case "failsafe":
		return failsafehttp.NewRoundTripper(base, failsafehttp.NewRetryPolicyBuilder().Build())
	default:
		t.Fatalf("SOAK_TRANSPORT=%q: want readrecovery, retryablehttp or failsafe", v)
		return nil
	}
}

func startFake(t *testing.T) (*fakeserver.Server, string) {
	t.Helper()
	srv := fakeserver.New()
	u, err := srv.Start()
	if err != nil {
		t.Fatalf("fakeserver: %v", err)
	}
	return srv, u
}

// replayFinding records a request count explained by net/http's own
// replay of a GET after a connection reset (nethttpReplay): printed, never
// a violation.
func (s *soak) replayFinding(format string, args ...any) {
	s.mu.Lock()
	s.replays = append(s.replays, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

// violate records a broken invariant under a category for the totals.
func (s *soak) violate(category, format string, args ...any) {
	s.mu.Lock()
	msg := fmt.Sprintf(format, args...)
	s.violations = append(s.violations, msg)
	if s.byCategory == nil {
		s.byCategory = map[string][]string{}
	}
	if len(s.byCategory[category]) < 5 {
		s.byCategory[category] = append(s.byCategory[category], msg)
	}
	s.mu.Unlock()
	s.tot.add("violation "+category, 1)
}

// --- Faults ---------------------------------------------------------------

// pickRetryAfter draws a Retry-After among every form the fakeserver
// scripts, with delays of 0–2 s.
func pickRetryAfter(r *rand.Rand) fakeserver.RetryAfter {
	switch r.IntN(16) {
	case 0, 1:
		return fakeserver.RetryAfterSeconds(0)
	case 2, 3:
		return fakeserver.RetryAfterSeconds(1)
	case 4:
		return fakeserver.RetryAfterDate(fakeserver.IMFFixdate, time.Duration(r.IntN(3))*time.Second)
	case 5:
		return fakeserver.RetryAfterDate(fakeserver.RFC850, time.Duration(r.IntN(3))*time.Second)
	case 6:
		return fakeserver.RetryAfterDate(fakeserver.Asctime, time.Duration(r.IntN(3))*time.Second)
	case 7:
		return fakeserver.RetryAfterDate(fakeserver.IMFFixdate, -5*time.Second) // in the past: no delay
	case 8:
		return fakeserver.RetryAfterRaw([]string{"1.5", "-1", "+1", "soon", "1 2"}[r.IntN(5)])
	case 9:
		return fakeserver.RetryAfterRaw("1", "1") // duplicate fields
	case 10, 11:
		return fakeserver.RetryAfterMissing()
	case 12:
		return fakeserver.RetryAfterOversized(200)
	case 13:
		return fakeserver.RetryAfterOverlong(60 * time.Second)
	default:
		return fakeserver.RetryAfterSeconds(int64(r.IntN(2)))
	}
}

// pickReadFault draws the fault of one GET slot, or false for none. A
// persistent 429 is returned with persistent set: the caller scripts it on
// every matching request from then on.
// addReadFault scripts a random read fault (pickReadFault) on route, with
// the rule options opts gives (drawn after the fault, so the random
// sequence stays the same); a persistent fault fires on every match.
func addReadFault(sc *fakeserver.Script, route string, r *rand.Rand, elsewhere string, opts func() []fakeserver.RuleOption) {
	f, persistent, ok := pickReadFault(r, elsewhere)
	if !ok {
		return
	}
	o := opts()
	if persistent {
		o = append(o, fakeserver.Always())
	}
	sc.Add(route, f, o...)
}

func pickReadFault(r *rand.Rand, elsewhere string) (f fakeserver.Fault, persistent, ok bool) {
	switch x := r.IntN(100); {
	case x < 22:
		return fakeserver.Throttle(pickRetryAfter(r)), false, true
	case x < 28:
		return fakeserver.Throttle(fakeserver.RetryAfterSeconds(int64(r.IntN(2)))), true, true
	case x < 33:
		return fakeserver.SlowBody(64, 5*time.Millisecond), false, true
	case x < 35:
		return fakeserver.SlowBody(8, 400*time.Millisecond), false, true // outlasts the total: cut off (R3)
	case x < 37:
		return fakeserver.StalledBody(), false, true
	case x < 42:
		return fakeserver.Status([]int{500, 502, 503, 504}[r.IntN(4)]), false, true
	case x < 45:
		return fakeserver.ConnectionReset(), false, true
	case x < 49:
		return fakeserver.Redirect([]int{301, 302, 303, 307, 308}[r.IntN(5)], elsewhere), false, true
	}
	return fakeserver.Fault{}, false, false
}

// pickWriteFault draws the fault of a mutation, or false for none.
func pickWriteFault(r *rand.Rand, elsewhere string) (f fakeserver.Fault, persistent, ok bool) {
	switch x := r.IntN(100); {
	case x < 25:
		return fakeserver.Throttle(pickRetryAfter(r)), false, true
	case x < 30:
		return fakeserver.Throttle(fakeserver.RetryAfterSeconds(int64(r.IntN(2)))), true, true
	case x < 35:
		return fakeserver.Status([]int{500, 503}[r.IntN(2)]), false, true
	case x < 38:
		return fakeserver.ConnectionReset(), false, true
	case x < 41:
		return fakeserver.Redirect([]int{307, 308}[r.IntN(2)], elsewhere), false, true
	}
	return fakeserver.Fault{}, false, false
}

// newBudget draws a sequence's limits: a total of 4–10 s, and now and then
// a lowered request limit.
func newBudget(r *rand.Rand, name string, pagesHint int) (*readrecovery.Budget, int, time.Duration) {
	total := soakMinTotal + time.Duration(r.Int64N(int64(soakMaxTotal-soakMinTotal)))
	maxReq := readrecovery.MaxSequenceRequests
	if r.IntN(8) == 0 {
		maxReq = 1 + r.IntN(max(pagesHint, 2))
	}
	return readrecovery.NewBudget(name, readrecovery.MaxTotal(total), readrecovery.MaxRequests(maxReq)), maxReq, total
}

// parent returns the context a sequence starts from. Half the time, and
// always under a negative control, it has a caller's deadline 2 s past the
// sequence's total: a safety net against a transport that never cuts a
// stalled body, and the transport's path for a cancellable context.
func (s *soak) parent(r *rand.Rand, total time.Duration) (context.Context, context.CancelFunc) {
	if s.control || r.IntN(2) == 0 {
		return context.WithTimeout(context.Background(), total+2*time.Second)
	}
	return context.Background(), func() {}
}

// timed checks that a sequence ended within its total (R3: the total cuts
// requests in flight and their bodies), measured from its start.
func (s *soak) timed(name string, start time.Time, total time.Duration) {
	if d := time.Since(start); d > total+time.Second {
		s.violate("sequence outlived its total (R3)", "%s: the sequence lasted %v, beyond its total %v", name, d.Round(time.Millisecond), total)
	}
}

func (s *soak) client(r *rand.Rand) *http.Client {
	if r.IntN(4) == 0 {
		return s.follow
	}
	return s.noFollow
}

// --- Sending --------------------------------------------------------------

// outcome is what a caller saw of one request.
type outcome struct {
	status int
	body   []byte
	err    error // transport error, refusal, stop, or body read error
}

func (o outcome) stopped() bool { return errors.Is(o.err, readrecovery.ErrSequenceStopped) }

func (s *soak) send(c *http.Client, ctx context.Context, method, url string, body []byte, hdr ...string) outcome {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		s.violate("harness error", "building a request: %v", err)
		return outcome{err: err}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return outcome{err: err}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return outcome{status: resp.StatusCode, body: data, err: err}
}

// probe sends one more request of a stopped sequence; the transport must
// refuse it before any network access. The "probe" query parameter marks
// it in the ledgers, where it must never appear.
func (s *soak) probe(c *http.Client, ctx context.Context, method, url, kind string, body []byte) {
	if strings.Contains(url, "?") {
		url += "&probe=1"
	} else {
		url += "?probe=1"
	}
	o := s.send(c, ctx, method, url, body)
	if !o.stopped() {
		s.violate("request after a stop not refused", "%s: a request after the sequence stopped was not refused with ErrSequenceStopped: status %d, %v", kind, o.status, o.err)
	}
	s.tot.add("probes refused", 1)
}

// --- Sequences -------------------------------------------------------------

// runSearch is one index: PUT its definition, then read it back (up to
// three GETs, as a caller polling for it), all in one sequence.
func (s *soak) runSearch(r *rand.Rand, id int64) {
	name := fmt.Sprintf("idx-%06d", id)
	path := "/indexes/" + name
	url := s.searchURL + path + "?api-version=2024-07-01"
	elsewhere := s.searchURL + "/elsewhere-" + name
	sc := s.search.Script()
	if f, persistent, ok := pickWriteFault(r, elsewhere); ok {
		opts := []fakeserver.RuleOption{fakeserver.MatchPath(path)}
		if !persistent {
			opts = append(opts, fakeserver.Nth(1))
		}
		sc.Add(fakeserver.RouteSearchPut, f, opts...)
	}
	addReadFault(sc, fakeserver.RouteSearchGet, r, elsewhere, func() []fakeserver.RuleOption {
		return []fakeserver.RuleOption{fakeserver.MatchPath(path), fakeserver.Nth(1 + r.IntN(2))}
	})
	b, maxReq, total := newBudget(r, "search "+name, 4)
	parent, cancel := s.parent(r, total)
	defer cancel()
	defer s.timed("search "+name, time.Now(), total)
	ctx := readrecovery.WithBudget(parent, b)
	c := s.client(r)
	def := fmt.Appendf(nil, `{"name":%q,"fields":[{"name":"id","type":"Edm.String","key":true}],"nonce":%d}`, name, id)
	o := s.send(c, ctx, http.MethodPut, url, def, "Content-Type", "application/json")
	stopped := o.stopped()
	for i := 0; i < 3 && !stopped; i++ {
		o = s.send(c, ctx, http.MethodGet, url, nil)
		stopped = o.stopped()
		if o.err == nil && o.status == http.StatusOK {
			break
		}
	}
	if stopped {
		s.probe(c, ctx, http.MethodGet, url, "search", nil)
	}
	s.finish(&seqRecord{kind: "search", key: path, maxRequests: maxReq, maxTotal: total, serial: true, report: b.Report()}, true)
}

// runCheckpoint reads a checkpoint's two objects (source, generated
// definition) in one sequence, at once half the time, retrying a failed
// read once as a caller would.
func (s *soak) runCheckpoint(r *rand.Rand, id int64) {
	dir := fmt.Sprintf("s%06d", id)
	prefix := "/ckpt/" + dir + "/"
	names := []string{"source.json", "definition.json"}
	sc := s.blob.Script()
	for _, n := range names {
		s.blob.PutBlob("ckpt", dir+"/"+n, fmt.Appendf(nil, `{"checkpoint":%d,"object":%q}`, id, n))
		addReadFault(sc, fakeserver.RouteBlobGet, r, s.blobURL+"/elsewhere-"+dir, func() []fakeserver.RuleOption {
			return []fakeserver.RuleOption{fakeserver.MatchPath(prefix + n), fakeserver.Nth(1)}
		})
	}
	b, maxReq, total := newBudget(r, "checkpoint "+dir, 4)
	parent, cancel := s.parent(r, total)
	defer cancel()
	defer s.timed("checkpoint "+dir, time.Now(), total)
	ctx := readrecovery.WithBudget(parent, b)
	c := s.client(r)
	concurrent := r.IntN(2) == 0
	var stopped atomic.Bool
	read := func(n string) {
		url := s.blobURL + prefix + n
		for range 2 {
			o := s.send(c, ctx, http.MethodGet, url, nil)
			if o.stopped() {
				stopped.Store(true)
				return
			}
			if o.err == nil && o.status == http.StatusOK {
				return
			}
		}
	}
	if concurrent {
		var wg sync.WaitGroup
		for _, n := range names {
			wg.Go(func() { read(n) })
		}
		wg.Wait()
	} else {
		for _, n := range names {
			read(n)
		}
	}
	if stopped.Load() {
		s.probe(c, ctx, http.MethodGet, s.blobURL+prefix+"source.json", "checkpoint", nil)
	}
	s.finish(&seqRecord{kind: "checkpoint", key: prefix, maxRequests: maxReq, maxTotal: total, serial: !concurrent, report: b.Report()}, true)
}

// inventoryPage is the part of a File list page the caller reads.
type inventoryPage struct {
	Value []json.RawMessage `json:"value"`
	Next  string            `json:"next"`
}

// listAll lists a File share page by page in one sequence (ctx's budget),
// retrying a failed page up to twice as a caller would, and probing once
// after a stop. It returns the pages read.
func (s *soak) listAll(c *http.Client, ctx context.Context, base string, limit int, kind string) int {
	cursor, pages := "", 0
	for {
		url := base + "/files?limit=" + strconv.Itoa(limit)
		if cursor != "" {
			url += "&after=" + cursor
		}
		var o outcome
		ok := false
		for range 3 {
			o = s.send(c, ctx, http.MethodGet, url, nil)
			if o.stopped() {
				s.probe(c, ctx, http.MethodGet, url, kind, nil)
				return pages
			}
			if o.err == nil && o.status == http.StatusOK {
				ok = true
				break
			}
			if o.err == nil && o.status >= 300 && o.status < 400 {
				return pages // a redirect: the caller gives up
			}
			if errors.Is(o.err, readrecovery.ErrRedirectRefused) {
				return pages
			}
		}
		if !ok {
			return pages
		}
		var p inventoryPage
		if err := json.Unmarshal(o.body, &p); err != nil {
			s.violate("harness error", "%s: page %d: bad JSON: %v", kind, pages+1, err)
			return pages
		}
		pages++
		if p.Next == "" {
			return pages
		}
		cursor = p.Next
	}
}

// runInventory lists a fresh File share of 5–60 files (now and then 250
// files one per page, to meet the 200-request ceiling) in one sequence.
func (s *soak) runInventory(r *rand.Rand, id int64) {
	srv, base := startFake(s.t)
	files, limit := 5+r.IntN(56), 1+r.IntN(10)
	long := r.IntN(25) == 0
	if long {
		files, limit = 250, 1
	}
	for i := range files {
		srv.AddFile(fmt.Sprintf("inv-%06d-%03d.bin", id, i), fmt.Appendf(nil, "%d/%d", id, i))
	}
	pages := (files + limit - 1) / limit
	sc := srv.Script()
	for range 1 + r.IntN(2) {
		addReadFault(sc, fakeserver.RouteFileList, r, base+"/elsewhere", func() []fakeserver.RuleOption {
			return []fakeserver.RuleOption{fakeserver.Nth(1 + r.IntN(pages))}
		})
	}
	b, maxReq, total := newBudget(r, fmt.Sprintf("inventory %06d", id), pages)
	if long {
		b, maxReq, total = readrecovery.NewBudget(fmt.Sprintf("inventory %06d", id), readrecovery.MaxTotal(soakMaxTotal)), readrecovery.MaxSequenceRequests, soakMaxTotal
	}
	parent, cancel := s.parent(r, total)
	defer cancel()
	t0 := time.Now()
	ctx := readrecovery.WithBudget(parent, b)
	s.listAll(s.client(r), ctx, base, limit, "inventory")
	s.timed(fmt.Sprintf("inventory %06d", id), t0, total)
	rec := &seqRecord{kind: "inventory", maxRequests: maxReq, maxTotal: total, serial: true, report: b.Report()}
	if long {
		rec.kind = "inventory-250"
	}
	s.checkFileShare(srv, rec, nil)
	s.finish(rec, false)
}

// runUploadBatch uploads 3–8 files into a fresh File share, one at a time
// in one sequence, on the queue-429 route and with a journal in a private
// directory of its own; then it verifies the share's inventory in a
// second sequence journaled in the same run.
func (s *soak) runUploadBatch(r *rand.Rand, id int64) {
	srv, base := startFake(s.t)
	n := 3 + r.IntN(6)
	plan := make([]journal.PlannedFile, n)
	for i := range plan {
		plan[i] = journal.PlannedFile{ID: fmt.Sprintf("up-%06d-%d.bin", id, i)}
	}
	dir := filepath.Join(s.tmp, fmt.Sprintf("run-%06d", id))
	j, err := journal.Open(dir, journal.WithPlan(plan))
	if err != nil {
		s.violate("harness error", "upload %06d: journal.Open: %v", id, err)
		_ = srv.Close()
		return
	}
	sc := srv.Script()
	for range 1 + r.IntN(2) {
		if f, persistent, ok := pickWriteFault(r, base+"/elsewhere"); ok {
			opts := []fakeserver.RuleOption{fakeserver.Nth(1 + r.IntN(n))}
			if persistent {
				opts = append(opts, fakeserver.Always())
			}
			sc.Add(fakeserver.RouteFileUpload, f, opts...)
		}
	}
	b, maxReq, total := newBudget(r, fmt.Sprintf("upload %06d", id), n)
	parent, cancel := s.parent(r, total)
	defer cancel()
	t0 := time.Now()
	ctx := readrecovery.WithBudget(readrecovery.WithQueueRetry(readrecovery.WithJournal(parent, j)), b)
	c := s.client(r)
	url := base + "/files"
	for i, f := range plan {
		uctx := journal.WithUpload(ctx, f.ID)
		body := fmt.Appendf(nil, "upload %06d file %d: %s", id, i, strings.Repeat("x", r.IntN(2048)))
		o := s.send(c, uctx, http.MethodPost, url, body, "x-ms-file-name", f.ID, "Content-Type", "application/octet-stream")
		if o.stopped() {
			s.probe(c, uctx, http.MethodPost, url, "upload", body)
			break
		}
		// Any other failure: the caller moves on to the next file and
		// never re-sends this one.
	}
	s.timed(fmt.Sprintf("upload %06d", id), t0, total)
	up := &seqRecord{kind: "upload", maxRequests: maxReq, maxTotal: total, serial: true, report: b.Report()}
	s.tot.add("journal "+string(j.Status(time.Now()).State), 1)
	if entries, _ := filepath.Glob(filepath.Join(dir, "backoff-*.json")); len(entries) > 0 {
		s.tot.add("backoff entries written", len(entries))
	}

	// Verification: the whole inventory, journaled in the same run.
	vb, vmax, vtotal := newBudget(r, fmt.Sprintf("verify %06d", id), 4)
	vparent, vcancel := s.parent(r, vtotal)
	defer vcancel()
	t1 := time.Now()
	vctx := readrecovery.WithBudget(readrecovery.WithJournal(vparent, j), vb)
	s.listAll(c, vctx, base, 1+r.IntN(10), "verify")
	s.timed(fmt.Sprintf("verify %06d", id), t1, vtotal)
	verify := &seqRecord{kind: "verify", maxRequests: vmax, maxTotal: vtotal, serial: true, report: vb.Report()}

	s.checkFileShare(srv, up, verify)
	s.finish(up, false)
	s.finish(verify, false)
}

// finish counts a sequence's totals from its report, and keeps a shared
// server's sequence for the checks at the end.
func (s *soak) finish(rec *seqRecord, shared bool) {
	rep := rec.report
	s.tot.add("sequences "+rec.kind, 1)
	s.tot.add("client-reported requests", rep.Requests)
	s.tot.add("client-reported waits", rep.Waits)
	if rep.Window != nil {
		s.tot.add("client-reported windows", 1)
	}
	stop := string(rep.Stop)
	if stop == "" {
		stop = "none (ran to its end)"
	}
	s.tot.add("stop "+stop, 1)
	// Every request that waits for the sequence's one window counts one
	// wait: a sequence of one request at a time waits at most once; the
	// concurrent ones are checked against their window from the ledger.
	if rec.serial && rep.Waits > 1 {
		s.violate("more than one wait (report)", "%s %s: the report counts %d waits", rec.kind, rep.Sequence, rep.Waits)
	}
	if shared {
		s.mu.Lock()
		s.shared = append(s.shared, rec)
		s.mu.Unlock()
	}
}

// --- Checks from the ledgers ----------------------------------------------

// checkFileShare checks a File share's ledger (an upload batch's POSTs and
// its verification's GETs, or an inventory's GETs) and closes the server.
func (s *soak) checkFileShare(srv *fakeserver.Server, first, verify *seqRecord) {
	if err := srv.Close(); err != nil {
		s.violate("harness error", "closing a File share: %v", err)
	}
	s.checkServer(srv)
	rules := srv.Script().Rules()
	var posts, gets []fakeserver.Request
	for _, e := range srv.Requests() {
		if e.Method == http.MethodPost {
			posts = append(posts, e)
		} else {
			gets = append(gets, e)
		}
	}
	if verify == nil {
		s.checkSequence(first, gets, rules)
		return
	}
	s.checkSequence(first, posts, rules)
	s.checkSequence(verify, gets, rules)
}

// checkShared splits a shared server's ledger by sequence (keyOf maps a
// path to its sequence key) and checks each recorded sequence.
func (s *soak) checkShared(srv *fakeserver.Server, kind string, keyOf func(string) string) {
	rules := srv.Script().Rules()
	by := map[string][]fakeserver.Request{}
	for _, e := range srv.Requests() {
		if strings.HasPrefix(e.Path, "/elsewhere") {
			continue // checkServer reports it
		}
		k := keyOf(e.Path)
		by[k] = append(by[k], e)
	}
	for _, rec := range s.shared {
		if rec.kind == kind {
			s.checkSequence(rec, by[rec.key], rules)
			delete(by, rec.key)
		}
	}
	for k, es := range by {
		s.violate("requests of no sequence", "%s: %d requests of %s belong to no sequence", kind, len(es), k)
	}
}

// checkServer checks what holds for a whole server: no mutation sent twice
// but the queue route's one re-send, nothing at a redirect's Location, no
// probe, and counts the requests and the faults injected.
func (s *soak) checkServer(srv *fakeserver.Server) {
	srv.AssertNoMutationSentTwice(soakTB{s}, fakeserver.AllowResend(fakeserver.RouteFileUpload, 1))
	reqs := srv.Requests()
	s.tot.mu.Lock()
	s.tot.requests += len(reqs)
	s.tot.mu.Unlock()
	for _, e := range reqs {
		if strings.HasPrefix(e.Path, "/elsewhere") {
			s.violate("redirect followed", "request %d %s %s arrived at a redirect's Location: a redirect was followed", e.Seq, e.Method, e.Path)
		}
		if slices.Contains(e.QueryKeys, "probe") {
			s.violate("request sent after a stop (probe)", "request %d %s %s is a probe sent after its sequence stopped", e.Seq, e.Method, e.Path)
		}
		if e.Fault != "" {
			s.tot.add("fault "+faultClass(e.Fault), 1)
		}
	}
}

// soakTB routes the fakeserver's assertions into the soak's violations.
type soakTB struct{ s *soak }

func (soakTB) Helper() {}
func (tb soakTB) Errorf(format string, args ...any) {
	tb.s.violate("mutation sent twice", format, args...)
}

// faultClass groups a ledger fault label: "429 seconds", "5xx", "reset"...
func faultClass(f string) string {
	switch {
	case strings.HasPrefix(f, "429 retry-after="):
		form := strings.TrimPrefix(f, "429 retry-after=")
		if i := strings.IndexAny(form, "( "); i >= 0 {
			form = form[:i]
		}
		return "429 " + form
	case strings.HasPrefix(f, "5"):
		return "5xx"
	case strings.HasPrefix(f, "redirect"):
		return "redirect"
	case strings.HasPrefix(f, "slow_body"):
		return "slow body"
	case strings.HasPrefix(f, "stalled_body"):
		return "stalled body"
	}
	return f
}

// checkSequence checks one sequence's requests as its server saw them, in
// arrival order.
func (s *soak) checkSequence(rec *seqRecord, es []fakeserver.Request, rules []fakeserver.Rule) {
	name := rec.kind + " " + rec.report.Sequence
	if len(es) == 0 {
		return
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Seq < es[j].Seq })
	// Requests the server saw that the Budget never admitted: net/http's
	// Transport re-sends a GET by itself when a reused keep-alive
	// connection is reset before the answer, below the decorator. Such a
	// replay is the next request to the path of a reset GET.
	excess := len(es) - rec.report.Requests
	replayable := 0
	for i, e := range es {
		if e.Status != 0 || e.Method != http.MethodGet {
			continue
		}
		for _, n := range es[i+1:] {
			if n.Path == e.Path && n.Method == e.Method {
				replayable++
				break
			}
		}
	}
	replays := 0
	if excess > 0 {
		if excess <= replayable {
			replays = excess
			s.tot.add(nethttpReplay, replays)
			s.replayFinding("%s: the server saw %d requests, the Budget admitted %d: net/http replayed %d GET(s) after a connection reset",
				name, len(es), rec.report.Requests, replays)
		} else {
			s.violate("server saw more than the Budget counted", "%s: the server saw %d requests, the report counts %d", name, len(es), rec.report.Requests)
		}
		if os.Getenv("SOAK_DEBUG") != "" {
			for _, e := range es {
				s.t.Logf("   %d %s %s %v status %d fault %q +%v", e.Seq, e.Method, e.Path, e.QueryKeys, e.Status, e.Fault, e.Arrived.Sub(es[0].Arrived))
			}
		}
	}
	// Never more than 200 requests, nor more than its own limit.
	if n := len(es); n > readrecovery.MaxSequenceRequests || n > rec.maxRequests {
		if n-replays <= rec.maxRequests {
			s.replayFinding("%s: the server saw %d requests, limit %d, because net/http replayed %d GET(s) after a reset", name, n, rec.maxRequests, replays)
		} else {
			s.violate("more requests than the limit", "%s: the server saw %d requests, limit %d", name, n, rec.maxRequests)
		}
	}
	// Nothing after the total ran out.
	last := es[0].Arrived.Add(rec.maxTotal + soakArrivalSlack)
	for _, e := range es {
		if e.Arrived.After(last) {
			s.violate("request after the total ran out", "%s: request %d arrived %v after the sequence's first, past its total %v",
				name, e.Seq, e.Arrived.Sub(es[0].Arrived).Round(time.Millisecond), rec.maxTotal)
		}
	}
	waits := 0
	for i, e := range es {
		if e.Status != http.StatusTooManyRequests {
			continue
		}
		s.tot.add("429s answered", 1)
		// The next request of the sequence to the same path: the re-send
		// or, after a write 429, the readback that waited.
		var next *fakeserver.Request
		for k := i + 1; k < len(es); k++ {
			if es[k].Path == e.Path {
				next = &es[k]
				break
			}
		}
		if next == nil {
			if rec.serial && i != len(es)-1 {
				s.violate("request after an unrecovered 429", "%s: request %d met a 429 that was not recovered (the sequence stopped), yet request %d followed",
					name, e.Seq, es[i+1].Seq)
			}
			continue
		}
		waits++
		if e.Rule < 0 || e.Rule >= len(rules) {
			s.violate("harness error", "%s: request %d: 429 without its rule", name, e.Seq)
			continue
		}
		ra := rules[e.Rule].Fault.RetryAfter()
		notBefore, resend := earliestAfter(ra, e.Arrived)
		if !resend {
			s.violate("request after a stopping Retry-After", "%s: request %d met a 429 with a %s Retry-After, which must stop the sequence, yet request %d followed",
				name, e.Seq, ra.Form(), next.Seq)
			continue
		}
		if next.Arrived.Before(notBefore) {
			s.violate("wait shorter than asked", "%s: request %d came %v after the 429 of request %d (Retry-After %s %q), earlier than asked (%v)",
				name, next.Seq, next.Arrived.Sub(e.Arrived).Round(time.Millisecond), e.Seq, ra.Form(), ra.Values(e.Arrived),
				notBefore.Sub(e.Arrived).Round(time.Millisecond))
		}
		s.tot.addWait(next.Arrived.Sub(e.Arrived), notBefore.Sub(e.Arrived))
		if e.Mutation() && next.Method == e.Method && next.BodyDigest != e.BodyDigest {
			s.violate("queue re-send changed", "%s: request %d re-sent the upload of request %d with another body", name, next.Seq, e.Seq)
		}
		if e.Mutation() && next.Method == e.Method && e.Route != fakeserver.RouteFileUpload {
			s.violate("mutation re-sent", "%s: request %d re-sent the mutation of request %d (%s)", name, next.Seq, e.Seq, e.Route)
		}
	}
	// A sequence of one request at a time waits once. Parallel reads of one
	// checkpoint may each meet 429 while in flight together: they join one
	// window, each re-sent once (the windows are checked by the concurrent
	// checks).
	if waits > 1 && rec.serial {
		s.violate("more than one wait", "%s: %d 429s were followed by a request to the same path: more than one wait", name, waits)
	}
	s.tot.add("ledger waits", waits)
}

// earliestAfter returns the earliest time the server allows the next
// request after a 429 that arrived at t with ra, and false when ra must
// stop the sequence (oversized, or overlong: above the 30 s ceiling).
func earliestAfter(ra fakeserver.RetryAfter, t time.Time) (time.Time, bool) {
	vals := ra.Values(t)
	switch ra.Form() {
	case "seconds", "overlong":
		n, _ := strconv.ParseInt(vals[0], 10, 64)
		if time.Duration(n)*time.Second > readrecovery.MaxServerWait {
			return time.Time{}, false
		}
		return t.Add(time.Duration(n) * time.Second), true
	case string(fakeserver.IMFFixdate), string(fakeserver.RFC850), string(fakeserver.Asctime):
		d, err := http.ParseTime(vals[0])
		if err != nil {
			return t.Add(time.Second), true
		}
		if d.Before(t) {
			return t, true
		}
		return d, true
	case "oversized":
		return time.Time{}, false
	default: // missing, malformed, duplicated: the diagnosed 1 s fallback
		return t.Add(time.Second), true
	}
}

// --- Totals ---------------------------------------------------------------

type soakTotals struct {
	mu                  sync.Mutex
	counts              map[string]int
	requests            int
	waitCount           int
	waitSum, waitExcess time.Duration
	waitMaxExcess       time.Duration
	elapsed             time.Duration
	heapStart, heapEnd  uint64
}

func newSoakTotals() *soakTotals { return &soakTotals{counts: map[string]int{}} }

func (t *soakTotals) add(k string, n int) {
	if k == "" {
		return
	}
	t.mu.Lock()
	t.counts[k] += n
	t.mu.Unlock()
}

// addWait records a gap between a 429 and the next request, and how much
// longer than asked it was.
func (t *soakTotals) addWait(gap, asked time.Duration) {
	t.mu.Lock()
	t.waitCount++
	t.waitSum += gap
	t.waitExcess += gap - asked
	t.waitMaxExcess = max(t.waitMaxExcess, gap-asked)
	t.mu.Unlock()
}

func (t *soakTotals) sequences() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, v := range t.counts {
		if strings.HasPrefix(k, "sequences ") {
			n += v
		}
	}
	return n
}

func (t *soakTotals) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n== soak totals (%s)\n", t.elapsed.Round(time.Millisecond))
	section := func(title, prefix string) {
		var keys []string
		total := 0
		for k, v := range t.counts {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
				total += v
			}
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "%s: %d\n", title, total)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %-40s %d\n", strings.TrimPrefix(k, prefix), t.counts[k])
		}
	}
	section("sequences", "sequences ")
	fmt.Fprintf(&b, "requests seen by the servers: %d (client-reported: %d; 429s answered: %d)\n",
		t.requests, t.counts["client-reported requests"], t.counts["429s answered"])
	fmt.Fprintf(&b, "waits (from the ledgers): %d (client-reported: %d)", t.counts["ledger waits"], t.counts["client-reported waits"])
	if t.waitCount > 0 {
		fmt.Fprintf(&b, "; gap after the 429 beyond what was asked: mean %v, max %v",
			(t.waitExcess / time.Duration(t.waitCount)).Round(time.Millisecond), t.waitMaxExcess.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "\n")
	section("stops by reason", "stop ")
	section("concurrent sequences by kind and stop reason", "cstop ")
	fmt.Fprintf(&b, "%s: %d (GETs re-sent by http.Transport itself, unseen by the Budget; not violations)\n", nethttpReplay, t.counts[nethttpReplay])
	fmt.Fprintf(&b, "concurrent sequences: %d requests issued by callers; windows opened (ledger) %d; in-flight 429s that joined a window %d\n",
		t.counts["concurrent requests issued by callers"], t.counts["windows opened (ledger)"], t.counts["in-flight 429s that joined the window (ledger)"])
	fmt.Fprintf(&b, "probes after a stop, refused before the network: %d\n", t.counts["probes refused"])
	section("faults injected (from the ledgers)", "fault ")
	section("upload-batch journals by final status", "journal ")
	fmt.Fprintf(&b, "backoff entries written by the journals: %d\n", t.counts["backoff entries written"])
	fmt.Fprintf(&b, "live heap: %.1f MiB before, %.1f MiB after\n", float64(t.heapStart)/(1<<20), float64(t.heapEnd)/(1<<20))
	section("invariant violations", "violation ")
	return b.String()
}
