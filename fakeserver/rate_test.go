package fakeserver

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stepClock is a server clock the test sets.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// step is one request at a fixed time and what it must get.
type step struct {
	at         time.Duration // after t0
	url        string        // default http://fake.test/files
	status     int
	retryAfter string // "" for none
	ms         string // retry-after-ms, "" for none
	decision   *Decision
}

func tokens(n int) *int { return &n }

// runSteps sends each step's GET at t0+at through the in-process transport
// and checks the status, the throttling headers and the ledger's decision
// (compared whole; nil: no decision).
func runSteps(t *testing.T, srv *Server, clock *stepClock, steps []step) {
	t.Helper()
	c := newClient(t, srv.Transport())
	for i, st := range steps {
		clock.set(t0.Add(st.at))
		url := st.url
		if url == "" {
			url = "http://fake.test/files"
		}
		resp, _ := do(t, c, "GET", url, nil)
		name := fmt.Sprintf("step %d (t0+%v %s)", i, st.at, url)
		assert.Equal(t, st.status, resp.StatusCode, name)
		assert.Equal(t, st.retryAfter, strings.Join(resp.Header.Values("Retry-After"), ","), name+": Retry-After")
		assert.Equal(t, st.ms, strings.Join(resp.Header.Values("retry-after-ms"), ","), name+": retry-after-ms")
		reqs := srv.Requests()
		last := reqs[len(reqs)-1]
		if st.decision == nil {
			assert.Nil(t, last.Decisions, name+": decisions")
		} else {
			assert.Equal(t, []Decision{*st.decision}, last.Decisions, name+": decisions")
		}
	}
}

func newClockedServer(t *testing.T) (*Server, *stepClock) {
	t.Helper()
	clock := &stepClock{now: t0}
	return newServer(t, WithClock(clock.Now)), clock
}

// TestWindowSteps: inside [start, start+d) every request gets a 429 whose
// Retry-After is the remaining whole seconds rounded up; before and after,
// 200.
func TestWindowSteps(t *testing.T) {
	srv, clock := newClockedServer(t)
	start := t0.Add(10 * time.Second)
	end := start.Add(2500 * time.Millisecond)
	srv.Script().Add(RouteFileList, Throttle(RetryAfterRemaining()), Window(start, 2500*time.Millisecond))
	in := func(wait time.Duration) *Decision {
		return &Decision{Rule: 0, Kind: "window", Fired: true, WindowEnd: end, Wait: wait}
	}
	out := &Decision{Rule: 0, Kind: "window", WindowEnd: end}
	runSteps(t, srv, clock, []step{
		{at: 0, status: 200, decision: out},
		{at: 9999 * time.Millisecond, status: 200, decision: out},
		{at: 10 * time.Second, status: 429, retryAfter: "3", decision: in(2500 * time.Millisecond)},
		{at: 10500 * time.Millisecond, status: 429, retryAfter: "2", decision: in(2 * time.Second)},
		{at: 11499 * time.Millisecond, status: 429, retryAfter: "2", decision: in(1001 * time.Millisecond)},
		{at: 11500 * time.Millisecond, status: 429, retryAfter: "1", decision: in(time.Second)},
		{at: 12500*time.Millisecond - time.Nanosecond, status: 429, retryAfter: "1", decision: in(time.Nanosecond)},
		{at: 12500 * time.Millisecond, status: 200, decision: out},
		{at: 60 * time.Second, status: 200, decision: out},
	})
	assert.Equal(t, "429 retry-after=remaining(3)", srv.Requests()[2].Fault)
	assert.Equal(t, "429 retry-after=remaining(1)", srv.Requests()[6].Fault)
	assert.Equal(t, "", srv.Requests()[7].Fault)
	// Another route is not in the window.
	c := newClient(t, srv.Transport())
	clock.set(start)
	resp, _ := do(t, c, "GET", "http://fake.test/indexes/x", nil)
	assert.Equal(t, 404, resp.StatusCode)
}

// TestWindowOpensAtFirstRequest: a zero start opens the window at the first
// request the rule is asked about, once.
func TestWindowOpensAtFirstRequest(t *testing.T) {
	srv, clock := newClockedServer(t)
	srv.Script().Add(RouteFileList, Throttle(RetryAfterRemainingMs()), Window(time.Time{}, 2*time.Second))
	end := t0.Add(7 * time.Second)
	in := func(wait time.Duration) *Decision {
		return &Decision{Rule: 0, Kind: "window", Fired: true, WindowEnd: end, Wait: wait}
	}
	runSteps(t, srv, clock, []step{
		{at: 5 * time.Second, status: 429, retryAfter: "2", ms: "2000", decision: in(2 * time.Second)},
		{at: 6200 * time.Millisecond, status: 429, retryAfter: "1", ms: "800", decision: in(800 * time.Millisecond)},
		{at: 6999*time.Millisecond + 500*time.Microsecond, status: 429, retryAfter: "1", ms: "1", decision: in(500 * time.Microsecond)},
		{at: 7 * time.Second, status: 200, decision: &Decision{Rule: 0, Kind: "window", WindowEnd: end}},
		{at: 30 * time.Second, status: 200, decision: &Decision{Rule: 0, Kind: "window", WindowEnd: end}},
	})
	assert.Equal(t, "429 retry-after=remaining-ms(1,800ms)", srv.Requests()[1].Fault)
}

// TestWindowServerBusyBurst: a window with ServerBusy is a burst of 503s
// without Retry-After.
func TestWindowServerBusyBurst(t *testing.T) {
	srv, clock := newClockedServer(t)
	srv.Script().Add(RouteAny, ServerBusy(), Window(t0.Add(time.Second), time.Second))
	end := t0.Add(2 * time.Second)
	runSteps(t, srv, clock, []step{
		{at: 0, status: 200, decision: &Decision{Kind: "window", WindowEnd: end}},
		{at: time.Second, status: 503, decision: &Decision{Kind: "window", Fired: true, WindowEnd: end, Wait: time.Second}},
		{at: 1999 * time.Millisecond, status: 503, decision: &Decision{Kind: "window", Fired: true, WindowEnd: end, Wait: time.Millisecond}},
		{at: 2 * time.Second, status: 200, decision: &Decision{Kind: "window", WindowEnd: end}},
	})
}

// TestTokenBucketSteps: the burst passes at once, each pass takes a token,
// tokens come back at the rate, and a 429's Retry-After is the time to the
// next token rounded up to whole seconds (retry-after-ms to whole ms).
func TestTokenBucketSteps(t *testing.T) {
	acct := "account=fake"
	pass := func(left int) *Decision {
		return &Decision{Kind: "token_bucket", Key: acct, TokensLeft: tokens(left)}
	}
	fired := func(wait time.Duration) *Decision {
		return &Decision{Kind: "token_bucket", Key: acct, Fired: true, TokensLeft: tokens(0), Wait: wait}
	}
	t.Run("rate 2, burst 3, with ms", func(t *testing.T) {
		srv, clock := newClockedServer(t)
		srv.Script().Add(RouteFileList, Throttle(RetryAfterRemainingMs()), TokenBucket(2, 3))
		runSteps(t, srv, clock, []step{
			{at: 0, status: 200, decision: pass(2)},
			{at: 0, status: 200, decision: pass(1)},
			{at: 0, status: 200, decision: pass(0)},
			{at: 0, status: 429, retryAfter: "1", ms: "500", decision: fired(500 * time.Millisecond)},
			{at: 200 * time.Millisecond, status: 429, retryAfter: "1", ms: "300", decision: fired(300 * time.Millisecond)},
			{at: 500 * time.Millisecond, status: 200, decision: pass(0)},
			{at: 500*time.Millisecond + time.Nanosecond, status: 429, retryAfter: "1", ms: "500", decision: fired(500*time.Millisecond - time.Nanosecond)},
			{at: 1750 * time.Millisecond, status: 200, decision: pass(1)}, // 2.5 tokens back, one taken
			{at: 1750 * time.Millisecond, status: 200, decision: pass(0)},
			{at: 1750 * time.Millisecond, status: 429, retryAfter: "1", ms: "250", decision: fired(250 * time.Millisecond)},
			{at: 60 * time.Second, status: 200, decision: pass(2)}, // full again, never above the burst
		})
	})
	t.Run("200/s, burst 50, seconds only", func(t *testing.T) {
		srv, clock := newClockedServer(t)
		srv.Script().Add(RouteFileList, Throttle(RetryAfterRemaining()), TokenBucket(200, 50))
		var steps []step
		for i := range 50 {
			steps = append(steps, step{at: 0, status: 200, decision: pass(49 - i)})
		}
		steps = append(steps,
			step{at: 0, status: 429, retryAfter: "1", decision: fired(5 * time.Millisecond)},
			step{at: 2500 * time.Microsecond, status: 429, retryAfter: "1", decision: fired(2500 * time.Microsecond)},
			step{at: 5 * time.Millisecond, status: 200, decision: pass(0)},
			step{at: 5 * time.Millisecond, status: 429, retryAfter: "1", decision: fired(5 * time.Millisecond)},
			step{at: 250 * time.Millisecond, status: 200, decision: pass(48)}, // 49 back of 50
		)
		runSteps(t, srv, clock, steps)
		assert.Equal(t, 50+1+1+1+1+1, len(srv.Requests()))
		assert.Equal(t, "429 retry-after=remaining(1)", srv.Requests()[50].Fault)
	})
	t.Run("slow rate: Retry-After above a second", func(t *testing.T) {
		srv, clock := newClockedServer(t)
		srv.Script().Add(RouteFileList, Throttle(RetryAfterRemainingMs()), TokenBucket(0.4, 1))
		runSteps(t, srv, clock, []step{
			{at: 0, status: 200, decision: pass(0)},
			{at: 0, status: 429, retryAfter: "3", ms: "2500", decision: fired(2500 * time.Millisecond)},
			{at: 1500 * time.Millisecond, status: 429, retryAfter: "1", ms: "1000", decision: fired(time.Second)},
			// An arrival stamped before the last one the bucket saw is taken
			// at the latest one (the buckets' clock never goes back).
			{at: 1499 * time.Millisecond, status: 429, retryAfter: "1", ms: "1000", decision: fired(time.Second)},
			{at: 2500 * time.Millisecond, status: 200, decision: pass(0)},
		})
	})
	t.Run("concurrent arrivals out of order by microseconds", func(t *testing.T) {
		// Arrivals are stamped before the script's lock: the one stamped
		// earlier can reach the bucket second. With burst 2 both pass; a
		// bucket that went back in time would answer the second with a
		// 429 for a 40 µs fraction of a token.
		srv, clock := newClockedServer(t)
		srv.Script().Add(RouteFileList, Throttle(RetryAfterRemaining()), TokenBucket(0.001, 2))
		runSteps(t, srv, clock, []step{
			{at: 40 * time.Microsecond, status: 200, decision: pass(1)},
			{at: 0, status: 200, decision: pass(0)},
			{at: 0, status: 429, retryAfter: "1000", decision: fired(1000 * time.Second)},
		})
	})
	t.Run("a fixed Retry-After keeps its value", func(t *testing.T) {
		srv, clock := newClockedServer(t)
		srv.Script().Add(RouteFileList, Throttle(RetryAfterSeconds(7)), TokenBucket(1, 1))
		runSteps(t, srv, clock, []step{
			{at: 0, status: 200, decision: pass(0)},
			{at: 0, status: 429, retryAfter: "7", decision: fired(time.Second)},
		})
	})
}

// TestTokenBucketKeys: per account, the blob and queue hosts of one account
// share a bucket; per host they do not; another account has its own in
// both; the path's account segment names the account.
func TestTokenBucketKeys(t *testing.T) {
	urls := []string{
		"http://acct1.blob.fake.test/c/b",
		"http://acct1.queue.fake.test/c/b",
		"http://acct2.blob.fake.test/c/b",
		"http://acct1.blob.fake.test/c/b",
		"http://127.0.0.1:1/devstoreaccount1/c/b",
		"http://127.0.0.1:2/devstoreaccount1/c/b",
		"http://127.0.0.1:3/c/b",
	}
	cases := []struct {
		name   string
		opts   []RuleOption
		status []int
		keys   []string
	}{
		{"per account (default)", nil,
			[]int{404, 429, 404, 429, 404, 429, 429},
			[]string{"account=acct1", "account=acct1", "account=acct2", "account=acct1", "account=devstoreaccount1", "account=devstoreaccount1", "account=devstoreaccount1"}},
		{"per account", []RuleOption{PerAccount()},
			[]int{404, 429, 404, 429, 404, 429, 429},
			[]string{"account=acct1", "account=acct1", "account=acct2", "account=acct1", "account=devstoreaccount1", "account=devstoreaccount1", "account=devstoreaccount1"}},
		{"per host", []RuleOption{PerHost()},
			[]int{404, 404, 404, 429, 404, 404, 404},
			[]string{"host=acct1.blob.fake.test", "host=acct1.queue.fake.test", "host=acct2.blob.fake.test", "host=acct1.blob.fake.test", "host=127.0.0.1:1", "host=127.0.0.1:2", "host=127.0.0.1:3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, fixedClock())
			srv.Script().Add(RouteBlobGet, Throttle(RetryAfterRemaining()), append([]RuleOption{TokenBucket(1, 1)}, tc.opts...)...)
			c := newClient(t, srv.Transport())
			var status []int
			for _, u := range urls {
				resp, _ := do(t, c, "GET", u, nil)
				status = append(status, resp.StatusCode)
			}
			assert.Equal(t, tc.status, status)
			var keys []string
			for _, r := range srv.Requests() {
				require.Len(t, r.Decisions, 1)
				keys = append(keys, r.Decisions[0].Key)
			}
			assert.Equal(t, tc.keys, keys)
		})
	}
}

func TestRequestAccount(t *testing.T) {
	cases := []struct{ configured, path, host, want string }{
		{"devstoreaccount1", "/devstoreaccount1/c/b", "127.0.0.1:10000", "devstoreaccount1"},
		{"devstoreaccount1", "/devstoreaccount10/c/b", "127.0.0.1:10000", "devstoreaccount1"},
		{"devstoreaccount1", "/c/b", "MyAcct.blob.core.windows.net", "myacct"},
		{"devstoreaccount1", "/c/b", "myacct.blob.core.windows.net.:443", "myacct"},
		{"devstoreaccount1", "/c/b", "localhost:8080", "devstoreaccount1"},
		{"devstoreaccount1", "/c/b", "[::1]:8080", "devstoreaccount1"},
		{"", "/c/b", "10.0.0.1", ""},
		{"", "/c/b", ".x", ""},
		{"a", "/a/c/b", "other.example", "a"},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, requestAccount(tc.configured, tc.path, tc.host), "%+v", tc)
	}
}

// TestBucketTakesNoTokenForAnswered: a request an earlier rule answered,
// or one outside the bucket rule's count condition, takes no token and has
// no decision.
func TestBucketTakesNoTokenForAnswered(t *testing.T) {
	srv, clock := newClockedServer(t)
	srv.Script().
		Add(RouteFileList, Status(500), Nth(1)).
		Add(RouteFileList, Throttle(RetryAfterRemaining()), TokenBucket(1, 1), Nth(3), Always())
	runSteps(t, srv, clock, []step{
		{status: 500},
		{status: 200},
		{status: 200, decision: &Decision{Rule: 1, Kind: "token_bucket", Key: "account=fake", TokensLeft: tokens(0)}},
		{status: 429, retryAfter: "1", decision: &Decision{Rule: 1, Kind: "token_bucket", Key: "account=fake", Fired: true, TokensLeft: tokens(0), Wait: time.Second}},
	})
}

// TestWindowAndBucket: the bucket applies only inside the window.
func TestWindowAndBucket(t *testing.T) {
	srv, clock := newClockedServer(t)
	end := t0.Add(3 * time.Second)
	srv.Script().Add(RouteFileList, Throttle(RetryAfterRemaining()), Window(t0.Add(time.Second), 2*time.Second), TokenBucket(1, 1))
	runSteps(t, srv, clock, []step{
		{at: 0, status: 200, decision: &Decision{Kind: "token_bucket", WindowEnd: end}},
		{at: 0, status: 200, decision: &Decision{Kind: "token_bucket", WindowEnd: end}},
		{at: time.Second, status: 200, decision: &Decision{Kind: "token_bucket", Key: "account=fake", TokensLeft: tokens(0), WindowEnd: end}},
		{at: 1100 * time.Millisecond, status: 429, retryAfter: "1", decision: &Decision{Kind: "token_bucket", Key: "account=fake", Fired: true, TokensLeft: tokens(0), WindowEnd: end, Wait: 900 * time.Millisecond}},
		{at: 3 * time.Second, status: 200, decision: &Decision{Kind: "token_bucket", WindowEnd: end}},
	})
}

// TestServerBusyExact: the exact body and headers of a ServerBusy answer,
// on a Blob route and on a File route.
func TestServerBusyExact(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv := newServer(t, fixedClock())
			srv.Script().Add(RouteAny, ServerBusy())
			c, base := m.reach(t, srv)
			for _, path := range []string{"/devstoreaccount1/c/b", "/files"} {
				resp, body := do(t, c, "GET", base+path, nil)
				id := resp.Header.Get("x-ms-request-id")
				want := `<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>Operations per second is over the account limit.` +
					"\nRequestId:" + id + "\nTime:1994-11-06T08:49:40.0000000Z</Message></Error>"
				assert.Equal(t, 503, resp.StatusCode, path)
				assert.Equal(t, want, string(body), path)
				assert.Equal(t, []string{"ServerBusy"}, resp.Header.Values("x-ms-error-code"), path)
				assert.Equal(t, "application/xml", resp.Header.Get("Content-Type"), path)
				assert.Equal(t, fmt.Sprint(len(want)), resp.Header.Get("Content-Length"), path)
				assert.Empty(t, resp.Header.Values("Retry-After"), path)
				assert.Empty(t, resp.Header.Values("retry-after-ms"), path)
				assert.NotEmpty(t, id)
			}
			reqs := srv.Requests()
			require.Len(t, reqs, 2)
			assert.Equal(t, "503 ServerBusy", reqs[0].Fault)
			assert.Equal(t, 503, reqs[1].Status)
		})
	}
	f := ServerBusy()
	assert.Equal(t, "server_busy", f.Kind())
	assert.Equal(t, 503, f.StatusCode())
	assert.Equal(t, "503 ServerBusy body=10B", f.WithBodySize(10).String())
}

// TestTimedRulesInSynctest: with the default clock inside a bubble, the
// window and the bucket run on the bubble's fake time.
func TestTimedRulesInSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := New()
		defer srv.Close()
		srv.Script().
			Add(RouteFileList, Throttle(RetryAfterRemaining()), Window(time.Now(), 2*time.Second)).
			Add(RouteBlobGet, Throttle(RetryAfterRemainingMs()), TokenBucket(4, 2))
		c := &http.Client{Transport: srv.Transport()}
		get := func(path string) (int, string, string) {
			resp, err := c.Get("http://fake.test" + path)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("retry-after-ms")
		}
		type got struct {
			status int
			ra, ms string
		}
		g := func(path string) got { s, ra, ms := get(path); return got{s, ra, ms} }
		assert.Equal(t, got{429, "2", ""}, g("/files"))
		time.Sleep(1500 * time.Millisecond)
		assert.Equal(t, got{429, "1", ""}, g("/files"))
		time.Sleep(500 * time.Millisecond)
		assert.Equal(t, got{200, "", ""}, g("/files"))

		assert.Equal(t, got{404, "", ""}, g("/c/b"))
		assert.Equal(t, got{404, "", ""}, g("/c/b"))
		assert.Equal(t, got{429, "1", "250"}, g("/c/b"))
		time.Sleep(100 * time.Millisecond)
		assert.Equal(t, got{429, "1", "150"}, g("/c/b"))
		time.Sleep(150 * time.Millisecond)
		assert.Equal(t, got{404, "", ""}, g("/c/b"))
	})
}

func TestTimedRuleStrings(t *testing.T) {
	s := NewScript()
	s.Add(RouteFileList, Throttle(RetryAfterRemaining()), Window(t0, 2*time.Second))
	s.Add(RouteAny, ServerBusy(), TokenBucket(200, 50), PerHost())
	s.Add(RouteBlobGet, Throttle(RetryAfterRemainingMs()), Window(time.Time{}, time.Second), TokenBucket(0.5, 1))
	var got []string
	for _, r := range s.Rules() {
		got = append(got, r.String())
	}
	assert.Equal(t, []string{
		"file.list window=[1994-11-06T08:49:40Z,+2s) -> 429 retry-after=remaining",
		"* bucket=200/s,burst=50,per=host -> 503 ServerBusy",
		"blob.get window=[first,+1s) bucket=0.5/s,burst=1,per=account -> 429 retry-after=remaining-ms",
	}, got)
	assert.Equal(t, "rule 2 token_bucket account=a tokens_left=0 fired wait=5ms",
		Decision{Rule: 2, Kind: "token_bucket", Key: "account=a", TokensLeft: tokens(0), Fired: true, Wait: 5 * time.Millisecond}.String())
	assert.Equal(t, "rule 0 window window_end=1994-11-06T08:49:40Z passed",
		Decision{Kind: "window", WindowEnd: t0}.String())
	assert.Nil(t, RetryAfterRemaining().Values(t0), "unresolved")
	assert.Equal(t, "remaining", RetryAfterRemaining().Form())
	assert.Equal(t, "remaining-ms", RetryAfterRemainingMs().Form())
}

func TestTimedRulePanics(t *testing.T) {
	tr := Throttle(RetryAfterRemaining())
	cases := map[string]func(){
		"window zero":           func() { Window(t0, 0) },
		"window negative":       func() { Window(t0, -time.Second) },
		"rate zero":             func() { TokenBucket(0, 1) },
		"rate NaN":              func() { TokenBucket(math.NaN(), 1) },
		"rate Inf":              func() { TokenBucket(math.Inf(1), 1) },
		"rate too small":        func() { TokenBucket(0.0001, 1) },
		"burst zero":            func() { TokenBucket(1, 0) },
		"burst too large":       func() { TokenBucket(1, maxBucketBurst+1) },
		"remaining needs timed": func() { NewScript().Add(RouteAny, tr) },
		"remaining-ms, nth":     func() { NewScript().Add(RouteAny, Throttle(RetryAfterRemainingMs()), Nth(2)) },
		"per host alone":        func() { NewScript().Add(RouteAny, Status(500), PerHost()) },
		"bad key":               func() { NewScript(Rule{Route: RouteAny, Fault: tr, Bucket: Bucket{Rate: 1, Burst: 1, Key: "tenant"}}) },
		"bucket literal":        func() { NewScript(Rule{Route: RouteAny, Fault: tr, Bucket: Bucket{Rate: 1}}) },
		"window start only":     func() { NewScript(Rule{Route: RouteAny, Fault: Status(500), Window: TimeWindow{Start: t0}}) },
		"server busy size":      func() { ServerBusy().WithBodySize(-1) },
	}
	for name, f := range cases {
		assert.Panics(t, f, name)
	}
}

// TestBucketMemoryBound: one rule keeps at most maxBuckets buckets.
func TestBucketMemoryBound(t *testing.T) {
	s := NewScript()
	s.Add(RouteAny, Throttle(RetryAfterRemaining()), TokenBucket(1, 2), PerHost())
	for i := range maxBuckets + 500 {
		v := s.match(matchInput{route: RouteFileList, method: "GET", path: "/files", now: t0, host: fmt.Sprintf("h%d", i)})
		require.Equal(t, -1, v.rule)
	}
	assert.LessOrEqual(t, len(s.rules[0].full), maxBuckets)
	// Later, the full buckets make room first.
	v := s.match(matchInput{route: RouteFileList, method: "GET", path: "/files", now: t0.Add(time.Hour), host: "new"})
	assert.Equal(t, -1, v.rule)
	assert.Len(t, s.rules[0].full, 1)
}

// TestDecisionJSON: the ledger's JSON form of decisions.
func TestDecisionJSON(t *testing.T) {
	b, err := json.Marshal([]Decision{
		{Rule: 1, Kind: "token_bucket", Key: "account=a", Fired: true, TokensLeft: tokens(0), Wait: 5 * time.Millisecond},
		{Rule: 0, Kind: "window", WindowEnd: t0},
	})
	require.NoError(t, err)
	assert.JSONEq(t, `[{"rule":1,"kind":"token_bucket","key":"account=a","fired":true,"tokens_left":0,"wait_ns":5000000},
		{"rule":0,"kind":"window","fired":false,"window_end":"1994-11-06T08:49:40Z"}]`, string(b))
}

// TestProxyAppliesTimedRules: a proxy's bucket answers in front of the
// upstream, which never sees a throttled request; fake time in a bubble.
func TestProxyAppliesTimedRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := New()
		defer up.Close()
		up.PutBlob("c", "b", []byte("data"))
		u, _ := url.Parse("http://upstream.test")
		script := NewScript()
		script.Add(RouteBlobGet, Throttle(RetryAfterRemainingMs()), TokenBucket(1, 1))
		px := NewProxy(u, script, WithUpstreamTransport(up.Transport()))
		defer px.Close()
		c := &http.Client{Transport: px.Transport()}
		get := func() (int, string) {
			resp, err := c.Get("http://proxy.test/devstoreaccount1/c/b")
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, resp.Header.Get("retry-after-ms") + string(body[:min(4, len(body))])
		}
		s1, b1 := get()
		s2, b2 := get()
		time.Sleep(999 * time.Millisecond)
		s3, b3 := get()
		time.Sleep(time.Millisecond)
		s4, b4 := get()
		assert.Equal(t, []int{200, 429, 429, 200}, []int{s1, s2, s3, s4})
		assert.Equal(t, []string{"data", "1000<?xm", "1<?xm", "data"}, []string{b1, b2, b3, b4})
		assert.Equal(t, 2, up.Count(RouteBlobGet, "GET"), "the upstream saw only the requests that passed")
		assert.Len(t, px.Requests(), 4)
	})
}
