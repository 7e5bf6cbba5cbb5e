package readrecovery

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/fakeserver"
)

// Issue 37, targets F9 and F2 with real processes (R104, R105, R107;
// docs/policy.md: scope-store). Four OS processes (this test binary, run
// again as TestScopeFleetKillChild) read one scope of a fakeserver on
// loopback, each with four goroutines (a Budget per GET, 100 ms apart),
// through Transports sharing one directory store. The parent kills one of
// them at random (SIGKILL) every 200 to 360 ms and starts it again at
// once, 100 times in all (20 with -short), while it reads the store's
// card every 10 ms. The server answers 429 with "Retry-After: 3" from two
// token buckets: 5/s (burst 2) for child 0's requests alone, so that a
// 429 reaches one process and the others learn of it only through the
// store, and 200/s (burst 50) for all.
//
// Each child names itself in the path it reads, /c/kC-I: child C's I-th
// incarnation, so that the server's ledger tells who sent what. For every
// 429 the server answered to a request that arrived at t, T = t + 3 s is
// a lower bound of the not-before any process derives from it (the
// process that received it received it after t). The test asserts:
//
//   - Never shortened: the card's NotBefore, read every 10 ms, never
//     decreases (kills land in the middle of exchanges).
//   - F2: no request, of any process, arrives in (t + 1.4 s, T −
//     storeSlack): one exchange (a background look is due 0.9 to 1.1 s
//     after the last; 1.2 s with the look's own time) plus 200 ms.
//   - F9: no incarnation that started inside a not-before the card held
//     sends before it: when the parent's read of the card at h first
//     shows a NotBefore of T − storeSlack or later, no request of an
//     incarnation started after h (the parent's clock just before it
//     started the process, which starts later) arrives before T −
//     storeSlack. Its first look finds the card (it waits up to 200 ms
//     for it) and holds until the card's not-before.
//
// storeSlack (50 ms) is what a request may come before T without counting:
// the store keeps times truncated to the millisecond, and each process
// converts a card's times through the offset to the store's clock that it
// measured (the middle of an exchange's round trip: on one host the
// offset is 0 in truth, measured within half a round trip). The log says
// how many requests came that close, and how far short of T the first
// card written after each 429 fell.
//
// Counted and logged, not asserted: the requests that arrive inside some
// 429's (t, T) from an incarnation that did not receive that 429 (the
// rule allows them during its first 1.4 s), and those of the incarnation
// that received it later than 50 ms after t.
//
// The subtest "without a store" is the negative control, 20 cycles (8
// with -short): the same fleet without WithScopeStore (RR_SFK_NOSTORE=1),
// the card written by the parent at each 429 the server answers (its
// observer), must break both F2 and F9, so that the test is known to be
// able to fail.
func TestScopeFleetKill(t *testing.T) {
	if os.Getenv(envSFKURL) != "" {
		t.Skip("the child's own run")
	}
	cycles := 100
	if testing.Short() {
		cycles = 20
	}
	t.Run("store", func(t *testing.T) {
		r := runKillFleet(t, cycles, false)
		r.log(t)
		if r.shortened != 0 {
			t.Errorf("the card's NotBefore decreased %d times", r.shortened)
		}
		if r.f2 != 0 || r.f9 != 0 {
			t.Errorf("%d requests inside a not-before later than 1.4 s after its 429 (F2), %d by processes started after the card held it (F9), want 0", r.f2, r.f9)
		}
		if r.throttled == 0 || r.warm == 0 || r.inside == 0 {
			t.Errorf("%d 429s, %d incarnations started inside a not-before the card held, %d requests inside another's not-before: the run proves little",
				r.throttled, r.warm, r.inside)
		}
	})
	t.Run("without a store", func(t *testing.T) {
		r := runKillFleet(t, max(cycles/5, 8), true)
		r.log(t)
		if r.f2 == 0 || r.f9 == 0 {
			t.Errorf("without a store, %d F2 and %d F9 violations, want both above 0: the test could not fail", r.f2, r.f9)
		}
	})
}

// Environment of a child of TestScopeFleetKill.
const (
	envSFKURL     = "RR_SFK_URL"     // the URL it reads, naming it: BASE/c/kC-I
	envSFKDir     = "RR_SFK_DIR"     // the directory store
	envSFKNoStore = "RR_SFK_NOSTORE" // "1": no store (the negative control)
)

// TestScopeFleetKillChild is not a test of its own: TestScopeFleetKill
// runs it as a child process, which reads its URL with four goroutines,
// a Budget per request, until it is killed (or its stdin closes: the
// parent is gone).
func TestScopeFleetKillChild(t *testing.T) {
	url := os.Getenv(envSFKURL)
	if url == "" {
		t.Skip("a helper process of TestScopeFleetKill")
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	opts := []Option{WithSharedRestrictions(nil)}
	if os.Getenv(envSFKNoStore) == "" {
		s, err := DirScopeStore(os.Getenv(envSFKDir))
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, WithScopeStore(s))
	}
	rt := New(&http.Transport{MaxIdleConnsPerHost: 8}, opts...)
	end := time.Now().Add(2 * time.Minute)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(end) {
				req, err := http.NewRequestWithContext(WithBudget(context.Background(), NewBudget("kill")), http.MethodGet, url, nil)
				if err != nil {
					panic(err)
				}
				resp, err := rt.RoundTrip(req)
				if err != nil {
					time.Sleep(10 * time.Millisecond) // a stop: no spinning
					continue
				}
				drain(resp)
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// The fleet's server and timings.
const (
	sfkChildren   = 4
	sfkRetryAfter = 3 * time.Second
	// sfkF2: one exchange (a background look is due 0.9 to 1.1 s after
	// the last; 1.2 s with the look's own time) and 200 ms.
	sfkF2 = 1400 * time.Millisecond
	// storeSlack: what a request may come before T and not count. The
	// store keeps times to the millisecond (truncated), and a process
	// converts a card's time through the offset it measured to the
	// store's clock (the middle of an exchange's round trip), on this
	// host 0 in truth, measured within half a round trip either way.
	storeSlack = 50 * time.Millisecond
)

// cardSeen is one read of the store's card by the parent.
type cardSeen struct {
	at, notBefore time.Time
}

// killRun is what a run of the fleet saw.
type killRun struct {
	cycles, incarnations, sent int // cycles, incarnations started, those the server saw
	requests, throttled        int
	shortened                  int // the card's NotBefore decreased
	f2, f9                     int // violations
	worst                      []string
	// warm: incarnations started inside a not-before the card held;
	// warmSent: those the server saw at all (after T).
	warm, warmSent int
	// inside: requests inside (t, T) of a 429 another incarnation
	// received; ownLate: of the one that received it, after t + 50 ms.
	inside, ownLate int
	latest          time.Duration // the latest after its 429 of those, storeSlack or more before T
	// near: requests F2 or F9 counts but for storeSlack; nearest: the
	// most such a request came before T.
	near    int
	nearest time.Duration
	// publish: the longest from a 429 to the card holding its T;
	// short: the most the first card written after a 429 falls short
	// of its T.
	publish, short time.Duration
	elapsed        time.Duration
}

func (r killRun) log(t *testing.T) {
	t.Helper()
	t.Logf("%d kill/restart cycles in %v; %d incarnations, %d seen by the server; %d requests, %d 429s; card shortened %d times",
		r.cycles, r.elapsed.Round(time.Millisecond), r.incarnations, r.sent, r.requests, r.throttled, r.shortened)
	t.Logf("F2 violations %d, F9 violations %d; %d incarnations started inside a not-before the card held (%d of them sent after it)",
		r.f2, r.f9, r.warm, r.warmSent)
	t.Logf("inside another's not-before (allowed in its first %v) %d, the latest %v after the 429; the receiver's own later than 50 ms %d",
		sfkF2, r.inside, r.latest.Round(time.Millisecond), r.ownLate)
	t.Logf("within storeSlack (%v) of T, not counted: %d requests, the earliest %v before T; 429 to card at most %v; the card short of T by up to %v",
		storeSlack, r.near, r.nearest, r.publish.Round(time.Millisecond), r.short)
	for _, w := range r.worst {
		t.Logf("violation: %s", w)
	}
}

// runKillFleet runs the fleet for cycles kill/restart cycles and tallies
// the ledger.
func runKillFleet(t *testing.T, cycles int, noStore bool) killRun {
	dir := filepath.Join(t.TempDir(), "scopes")
	store, err := DirScopeStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	var opts []fakeserver.Option
	var scopeOnce atomic.Pointer[string] // the scope, once the server listens
	var writes sync.WaitGroup            // the parent's card writes (the negative control)
	if noStore {
		// The negative control's children ignore the store; the card is
		// written all the same, by the parent, at each 429 the server
		// answers, so that F9 has a card to be broken against.
		opts = append(opts, fakeserver.WithObserver(func(e fakeserver.Request) {
			if e.Status == http.StatusTooManyRequests {
				writes.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					_, _ = store.Exchange(ctx, *scopeOnce.Load(), ScopeCard{NotBefore: e.Arrived.Add(sfkRetryAfter)}, ScopeMember{})
				})
			}
		}))
	}
	srv := fakeserver.New(opts...)
	for c := range sfkChildren {
		for i := range cycles + 1 {
			srv.PutBlob("c", sfkName(c, i), []byte("page"))
		}
	}
	throttle := fakeserver.Throttle(fakeserver.RetryAfterSeconds(int64(sfkRetryAfter / time.Second)))
	srv.Script().
		Add(fakeserver.RouteBlobGet, throttle, fakeserver.TokenBucket(5, 2), fakeserver.MatchPath("/c/k0-")).
		Add(fakeserver.RouteBlobGet, throttle, fakeserver.TokenBucket(200, 50))
	base, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	probe, err := http.NewRequest(http.MethodGet, base+"/c/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	scope := schemeHost(probe)
	scopeOnce.Store(&scope)

	// The watcher: the card every 10 ms.
	var cards []cardSeen
	shortened := 0
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var last time.Time
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			v, err := store.Exchange(ctx, scope, ScopeCard{}, ScopeMember{})
			at := time.Now()
			cancel()
			if err != nil {
				t.Errorf("the watcher's read: %v", err)
			} else if nb := v.Card.NotBefore; !nb.Equal(last) {
				if nb.Before(last) {
					shortened++
					t.Errorf("the card's NotBefore went from %v to %v", last, nb)
				}
				cards = append(cards, cardSeen{at: at, notBefore: nb})
				last = nb
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	stopWatching := sync.OnceFunc(func() { close(stop); <-watched })
	t.Cleanup(stopWatching) // a Fatal below: no Errorf after the test

	type child struct {
		cmd   *exec.Cmd
		stdin io.Closer
	}
	starts := map[string]time.Time{} // incarnation -> the parent's clock before its start
	kids := make([]*child, sfkChildren)
	incs := make([]int, sfkChildren)
	start := func(c int) {
		name := sfkName(c, incs[c])
		cmd := exec.Command(os.Args[0], "-test.run=^TestScopeFleetKillChild$", "-test.count=1", "-test.v=false")
		cmd.Env = append(os.Environ(), envSFKURL+"="+base+"/c/"+name, envSFKDir+"="+dir)
		if noStore {
			cmd.Env = append(cmd.Env, envSFKNoStore+"=1")
		}
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		starts[name] = time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kids[c] = &child{cmd: cmd, stdin: in}
	}
	kill := func(c int) {
		k := kids[c]
		_ = k.cmd.Process.Kill()
		_ = k.cmd.Wait()
		k.stdin.Close()
	}
	t.Cleanup(func() {
		for c, k := range kids {
			if k != nil && k.cmd.ProcessState == nil {
				kill(c)
			}
		}
	})
	began := time.Now()
	for c := range sfkChildren {
		start(c)
	}
	for range cycles {
		time.Sleep(time.Duration(200+rand.IntN(160)) * time.Millisecond)
		c := rand.IntN(sfkChildren)
		kill(c)
		incs[c]++
		start(c)
	}
	time.Sleep(300 * time.Millisecond)
	for c := range kids {
		kill(c)
	}
	elapsed := time.Since(began)
	srv.Close() // every handler ended, and so every observer call
	writes.Wait()
	stopWatching()

	r := tallyKillRun(srv.Requests(), starts, cards)
	r.cycles, r.shortened, r.elapsed = cycles, shortened, elapsed
	return r
}

// sfkName names child c's incarnation i (its blob).
func sfkName(c, i int) string { return fmt.Sprintf("k%d-%d", c, i) }

// tallyKillRun checks the ledger against the rules of TestScopeFleetKill.
func tallyKillRun(ledger []fakeserver.Request, starts map[string]time.Time, cards []cardSeen) killRun {
	r := killRun{requests: len(ledger), incarnations: len(starts)}
	type throttle struct {
		t, T time.Time
		who  string
		held time.Time // when the parent first saw the card hold T (zero: never)
	}
	var ts []throttle
	senders := map[string]bool{}
	for _, e := range ledger {
		senders[e.Path[len("/c/"):]] = true
		if e.Status != http.StatusTooManyRequests {
			continue
		}
		th := throttle{t: e.Arrived, T: e.Arrived.Add(sfkRetryAfter), who: e.Path}
		for _, c := range cards {
			if !c.notBefore.Before(th.T.Add(-storeSlack)) {
				th.held = c.at
				r.publish = max(r.publish, c.at.Sub(th.t))
				break
			}
		}
		if i := slices.IndexFunc(cards, func(c cardSeen) bool { return c.at.After(th.t) && c.notBefore.After(th.t) }); i >= 0 {
			r.short = max(r.short, th.T.Sub(cards[i].notBefore)) // the first card written after the 429
		}
		ts = append(ts, th)
	}
	r.throttled, r.sent = len(ts), len(senders)
	// warm reports whether an incarnation that started at began did so
	// inside th's not-before, as the card held it.
	warm := func(th throttle, began time.Time) bool {
		return !th.held.IsZero() && began.After(th.held) && began.Before(th.T.Add(-storeSlack))
	}
	for name, began := range starts {
		if slices.ContainsFunc(ts, func(th throttle) bool { return warm(th, began) }) {
			r.warm++
			r.warmSent += b2i(senders[name])
		}
	}
	for _, e := range ledger {
		began := starts[e.Path[len("/c/"):]]
		var f2, f9, near, inside, own bool
		for _, th := range ts {
			if !e.Arrived.After(th.t) || !e.Arrived.Before(th.T) {
				continue
			}
			early := th.T.Sub(e.Arrived)
			late, started := e.Arrived.After(th.t.Add(sfkF2)), warm(th, began)
			switch {
			case (late || started) && early > storeSlack:
				f2, f9 = f2 || late, f9 || started
				if len(r.worst) < 5 {
					r.worst = append(r.worst, fmt.Sprintf("%s (started %v after the 429) arrived %v after the 429 of %s, %v before T",
						e.Path, began.Sub(th.t).Round(time.Millisecond), e.Arrived.Sub(th.t).Round(time.Millisecond), th.who, early))
				}
			case late || started:
				near = true
				r.nearest = max(r.nearest, early)
			}
			if e.Path != th.who {
				inside = true
				if early > storeSlack {
					r.latest = max(r.latest, e.Arrived.Sub(th.t))
				}
			} else if e.Arrived.After(th.t.Add(50 * time.Millisecond)) {
				own = true
			}
		}
		r.f2 += b2i(f2)
		r.f9 += b2i(f9)
		r.near += b2i(near)
		r.inside += b2i(inside)
		r.ownLate += b2i(own)
	}
	return r
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
