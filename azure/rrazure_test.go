package rrazure_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/azure/rrazuretest"
)

func TestRetryStatusCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []int
		want []int
	}{
		{"nil is azcore's defaults without 429", nil, []int{408, 500, 502, 503, 504}},
		{"empty stays empty", []int{}, []int{}},
		{"429 alone", []int{429}, []int{}},
		{"429 among others, order kept", []int{503, 429, 500, 429}, []int{503, 500}},
		{"no 429", []int{500, 503}, []int{500, 503}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := rrazure.RetryStatusCodes(in)
			if !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("RetryStatusCodes(%v) = %#v, want %#v", tc.in, got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Fatalf("RetryStatusCodes modified its argument: %v, was %v", in, tc.in)
			}
		})
	}
	// The result is the caller's: changing it changes no later result.
	a := rrazure.RetryStatusCodes(nil)
	a[0] = 429
	if b := rrazure.RetryStatusCodes(nil); b[0] != 408 {
		t.Fatalf("the defaults were shared: %v", b)
	}
}

func TestClientOptions(t *testing.T) {
	o := rrazure.ClientOptions()
	if o.Retry.StatusCodes != nil {
		t.Fatalf("Retry.StatusCodes = %v, want nil: azcore consults ShouldRetry instead", o.Retry.StatusCodes)
	}
	if o.Retry.ShouldRetry == nil {
		t.Fatal("ShouldRetry is nil: azcore would retry every 429, a PUT's included")
	}
	// The transport is readrecovery's (TestGet429ResentByReadrecovery: a
	// GET re-sent inside one azcore try) and returns redirects
	// (TestRedirectReturned).
	if o.Transport == nil {
		t.Fatal("Transport is nil: azcore would use its own")
	}
}

// TestErrorsCarryNoQuery: http.Client puts the whole request URL in its
// *url.Error; through rrazure the error names scheme://host/path only, so
// a SAS signature never reaches an error message, and the error is still
// what it was for errors.Is, errors.As and azcore's NonRetriable check.
func TestErrorsCarryNoQuery(t *testing.T) {
	const sas = "sv=2024-11-04&sp=r&sig=c2VjcmV0LXNpZ25hdHVyZQ%3D%3D"
	const target = "https://account.blob.example/c/b"
	t.Run("a stop error", func(t *testing.T) {
		var tries atomic.Int32
		base := &scripted{status: http.StatusOK}
		var o policy.ClientOptions
		rrazure.Apply(&o, readrecovery.New(base))
		o.PerRetryPolicies = []policy.Policy{rrazuretest.CountTries(&tries)}
		pl := newPipeline(o)
		ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("sas", readrecovery.MaxRequests(1)))
		resp, err := send(ctx, pl, http.MethodGet, target+"?"+sas, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		tries.Store(0)
		_, err = send(ctx, pl, http.MethodGet, target+"?"+sas, nil)
		assertNoQuery(t, err, target)
		if !errors.Is(err, readrecovery.ErrSequenceStopped) {
			t.Fatalf("err = %v, want ErrSequenceStopped", err)
		}
		if n := tries.Load(); n != 1 {
			t.Fatalf("azcore made %d tries, want 1: the stop must stay NonRetriable", n)
		}
	})
	t.Run("a transport error", func(t *testing.T) {
		var o policy.ClientOptions
		o.Retry.MaxRetries = -1 // one try
		rrazure.Apply(&o, readrecovery.New(&scripted{err: errReset}))
		_, err := send(context.Background(), newPipeline(o), http.MethodPut, target+"?"+sas, []byte("x"))
		assertNoQuery(t, err, target)
		if !errors.Is(err, errReset) {
			t.Fatalf("err = %v, want the base's error", err)
		}
	})
}

func assertNoQuery(t *testing.T, err error, target string) {
	t.Helper()
	var ue *url.Error
	if !errors.As(err, &ue) || ue.URL != target {
		t.Fatalf("err = %v, want a *url.Error naming %s", err, target)
	}
	for _, secret := range []string{"sig=", "c2VjcmV0LXNpZ25hdHVyZQ", "sv=", "?"} {
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("the error %q carries %q", err, secret)
		}
	}
}

// TestDefaultsMatchAzcore probes the retry policy of the azcore this module
// builds with: with nil StatusCodes, which statuses does it retry? They
// must be exactly the defaults rrazure reproduces for what readrecovery
// does not own, and a HEAD through rrazure (which readrecovery never owns)
// must be retried for exactly the same statuses. If azcore changes its
// defaults, this fails, and azcoreDefaultStatusCodes must follow.
func TestDefaultsMatchAzcore(t *testing.T) {
	want := slices.Sorted(slices.Values(rrazure.AzcoreDefaultStatusCodes))
	// nil StatusCodes: azcore's defaults. Not RetryDelay -1 ("no delay" in
	// azcore's docs): azcore v1.24.0's calcDelay takes the resulting zero
	// delay for an overflow and waits MaxRetryDelay (60 s) instead.
	retry := policy.RetryOptions{MaxRetries: 1, RetryDelay: time.Nanosecond}
	azcore := probeRetried(t, http.MethodPut, func(base http.RoundTripper) policy.ClientOptions {
		return policy.ClientOptions{Transport: &http.Client{Transport: base}, Retry: retry}
	})
	if !slices.Equal(azcore, want) {
		t.Fatalf("azcore retries %v by default (a PUT included); rrazure assumes %v", azcore, want)
	}
	head := probeRetried(t, http.MethodHead, func(base http.RoundTripper) policy.ClientOptions {
		o := policy.ClientOptions{Retry: retry}
		rrazure.Apply(&o, readrecovery.New(base))
		return o
	})
	if !slices.Equal(head, want) {
		t.Fatalf("through rrazure a HEAD is retried for %v, azcore alone for %v", head, want)
	}
}

// probeRetried returns the statuses, from 300 to 599, for which a request
// of method through a pipeline of opts(base) is tried more than once.
func probeRetried(t *testing.T, method string, opts func(base http.RoundTripper) policy.ClientOptions) []int {
	t.Helper()
	var retried []int
	for status := 300; status <= 599; status++ {
		var tries int
		base := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			tries++
			return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		resp, err := send(context.Background(), newPipeline(opts(base)), method, "https://probe.invalid/x", nil)
		if err != nil {
			t.Fatalf("status %d: %v", status, err)
		}
		resp.Body.Close()
		if tries > 1 {
			retried = append(retried, status)
		}
	}
	return retried
}

// TestPut429SentOnce sends a PUT that meets 429 through a real azcore
// pipeline: with rrazure's options it reaches the server exactly once,
// with or without a Budget; with azcore's defaults it is sent four times.
func TestPut429SentOnce(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Retry-After", "0")
		w.Header().Set("x-ms-request-id", "put-429")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	for _, tc := range []struct {
		name      string
		opts      policy.ClientOptions
		budget    bool
		wantSends int
	}{
		{"rrazure with a budget", rrazure.ClientOptions(), true, 1},
		{"rrazure without a budget", rrazure.ClientOptions(), false, 1},
		// The reason for the adapter: azcore alone re-sends the PUT.
		{"azcore defaults", policy.ClientOptions{Retry: policy.RetryOptions{RetryDelay: time.Millisecond}}, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.reset()
			ctx := context.Background()
			var b *readrecovery.Budget
			if tc.budget {
				b = readrecovery.NewBudget("put")
				ctx = readrecovery.WithBudget(ctx, b)
			}
			var tries atomic.Int32
			opts := tc.opts
			opts.PerRetryPolicies = []policy.Policy{rrazuretest.CountTries(&tries)}
			resp, err := send(ctx, newPipeline(opts), http.MethodPut, srv.URL+"/indexes/hotels", []byte(`{"name":"hotels"}`))
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d, want the original 429", resp.StatusCode)
			}
			if got := srv.count(http.MethodPut); got != tc.wantSends {
				t.Fatalf("the server saw %d PUTs, want %d", got, tc.wantSends)
			}
			if got := int(tries.Load()); got != tc.wantSends {
				t.Fatalf("azcore made %d tries, want %d", got, tc.wantSends)
			}
			if b != nil {
				r := b.Report()
				if r.Requests != 1 || r.Waits != 0 || r.Mutation == nil || r.Mutation.StatusCode != 429 ||
					r.Mutation.Acked || r.Mutation.RequestID != "put-429" || r.Ownership != readrecovery.Unproven {
					t.Fatalf("report %+v (mutation %+v)", r, r.Mutation)
				}
			}
		})
	}
}

// TestGet429ResentByReadrecovery: a GET 429 with a Budget is re-sent once
// by readrecovery, inside one azcore try; without a Budget it is azcore's,
// which retries it (docs/policy.md, "one-owner-per-429").
func TestGet429ResentByReadrecovery(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("checkpoint"))
	})
	for _, tc := range []struct {
		name       string
		budget     bool
		wantStatus int
		wantSends  int
		wantTries  int32
	}{
		{"with a budget", true, http.StatusOK, 2, 1},
		{"without a budget", false, http.StatusOK, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.reset()
			ctx := context.Background()
			b := readrecovery.NewBudget("checkpoint")
			if tc.budget {
				ctx = readrecovery.WithBudget(ctx, b)
			}
			var tries atomic.Int32
			opts := rrazure.ClientOptions()
			opts.Retry.RetryDelay = time.Millisecond
			opts.PerRetryPolicies = []policy.Policy{rrazuretest.CountTries(&tries)}
			resp, err := send(ctx, newPipeline(opts), http.MethodGet, srv.URL+"/c/source.json", nil)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if got := srv.count(http.MethodGet); got != tc.wantSends {
				t.Fatalf("the server saw %d GETs, want %d", got, tc.wantSends)
			}
			if got := tries.Load(); got != tc.wantTries {
				t.Fatalf("azcore made %d tries, want %d", got, tc.wantTries)
			}
			if tc.budget {
				if r := b.Report(); r.Waits != 1 || r.WaitLog[0].Trigger != "read-429" || r.Requests != 2 {
					t.Fatalf("report %+v", r)
				}
			}
		})
	}
}

// TestServerErrorsStayAzcores: 503 is still azcore's to retry
// (docs/policy.md, "other-statuses-pass-through").
func TestServerErrorsStayAzcores(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	})
	var tries atomic.Int32
	opts := rrazure.ClientOptions()
	opts.Retry.RetryDelay = time.Millisecond
	opts.PerRetryPolicies = []policy.Policy{rrazuretest.CountTries(&tries)}
	b := readrecovery.NewBudget("read")
	resp, err := send(readrecovery.WithBudget(context.Background(), b), newPipeline(opts), http.MethodGet, srv.URL+"/c/b", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || srv.count(http.MethodGet) != 2 || tries.Load() != 2 {
		t.Fatalf("status %d, server saw %d GETs, azcore made %d tries; want 200, 2, 2",
			resp.StatusCode, srv.count(http.MethodGet), tries.Load())
	}
	if r := b.Report(); r.Requests != 2 || r.Waits != 0 {
		t.Fatalf("report %+v: azcore's retry must not use the delay opportunity", r)
	}
}

// TestStoppedSequenceNotRetried: the transport's stop error is
// NonRetriable, so azcore gives it back after one try.
func TestStoppedSequenceNotRetried(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte("ok")) })
	var tries atomic.Int32
	opts := rrazure.ClientOptions()
	opts.PerRetryPolicies = []policy.Policy{rrazuretest.CountTries(&tries)}
	pl := newPipeline(opts)
	ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("one", readrecovery.MaxRequests(1)))
	resp, err := send(ctx, pl, http.MethodGet, srv.URL+"/c/b", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tries.Store(0)
	_, err = send(ctx, pl, http.MethodGet, srv.URL+"/c/b", nil)
	var se *readrecovery.StopError
	if !errors.Is(err, readrecovery.ErrSequenceStopped) || !errors.As(err, &se) || se.Reason != readrecovery.StopRequestsExhausted {
		t.Fatalf("err = %v, want a requests-exhausted stop", err)
	}
	if got := tries.Load(); got != 1 {
		t.Fatalf("azcore made %d tries of the stopped request, want 1", got)
	}
	if got := srv.count(""); got != 1 {
		t.Fatalf("the server saw %d requests, want 1", got)
	}
}

// TestRedirectReturned: a 307 goes back to the caller; its target is
// never contacted.
func TestRedirectReturned(t *testing.T) {
	trap := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte("elsewhere")) })
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Redirect(w, r, trap.URL+"/c/b", http.StatusTemporaryRedirect)
	})
	ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("read"))
	resp, err := send(ctx, newPipeline(rrazure.ClientOptions()), http.MethodGet, srv.URL+"/c/b", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("status %d, want 307 returned", resp.StatusCode)
	}
	if srv.count("") != 1 || trap.count("") != 0 {
		t.Fatalf("server saw %d, redirect target %d requests; want 1 and 0", srv.count(""), trap.count(""))
	}
}

// TestApplyKeepsTheCallersOptions: Apply changes the transport and the
// retry decision about the 429s readrecovery owns only; a caller's
// ShouldRetry is never asked about a mutation's 429.
func TestApplyKeepsTheCallersOptions(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Path {
		case "/429":
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	var asked []int
	o := policy.ClientOptions{
		Telemetry: policy.TelemetryOptions{ApplicationID: "rr-test"},
		Retry: policy.RetryOptions{
			MaxRetries:  1,
			RetryDelay:  time.Millisecond,
			StatusCodes: []int{429, 503},
			ShouldRetry: func(resp *http.Response, err error) bool {
				if resp != nil {
					asked = append(asked, resp.StatusCode)
				}
				return true
			},
		},
	}
	rrazure.Apply(&o, nil)
	if o.Telemetry.ApplicationID != "rr-test" || o.Retry.MaxRetries != 1 || !slices.Equal(o.Retry.StatusCodes, []int{429, 503}) {
		t.Fatalf("Apply changed the caller's options: %+v", o)
	}
	pl := newPipeline(o)
	for _, path := range []string{"/429", "/503"} {
		resp, err := send(context.Background(), pl, http.MethodPut, srv.URL+path, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := srv.countPath("/429"); got != 1 {
		t.Fatalf("the PUT 429 was sent %d times, want 1", got)
	}
	if got := srv.countPath("/503"); got != 2 {
		t.Fatalf("the PUT 503 was sent %d times, want 2 (azcore's policy with MaxRetries 1)", got)
	}
	// azcore asks after every try, the last one included: twice for the 503.
	if !slices.Equal(asked, []int{503, 503}) {
		t.Fatalf("the caller's ShouldRetry was asked about %v, want [503 503] (never the PUT's 429)", asked)
	}
	rrazure.Apply(nil, nil) // no panic
}

// --- helpers ---

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func newPipeline(o policy.ClientOptions) runtime.Pipeline {
	return runtime.NewPipeline("rrazure.test", "v0.0.0", runtime.PipelineOptions{}, &o)
}

func send(ctx context.Context, pl runtime.Pipeline, method, url string, body []byte) (*http.Response, error) {
	req, err := runtime.NewRequest(ctx, method, url)
	if err != nil {
		return nil, err
	}
	if body != nil {
		if err := req.SetBody(streaming.NopCloser(bytes.NewReader(body)), "application/json"); err != nil {
			return nil, err
		}
	}
	return pl.Do(req)
}

// server is an httptest server with a ledger of methods and paths.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

// newServer serves with h, which gets the 1-based number of each request.
func newServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r)
		n := len(s.seen)
		s.mu.Unlock()
		h(w, r, n)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) reset() {
	s.mu.Lock()
	s.seen = nil
	s.mu.Unlock()
}

// count returns how many requests of method ("" for any) the server saw.
func (s *server) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.seen {
		if method == "" || r.Method == method {
			n++
		}
	}
	return n
}

func (s *server) countPath(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.seen {
		if r.URL.Path == path {
			n++
		}
	}
	return n
}

// TestIsMutation pins the module's copy of the method rule: every method
// but GET, HEAD, OPTIONS and TRACE writes (the empty method is GET).
func TestIsMutation(t *testing.T) {
	for method, want := range mutationTable {
		if got := rrazure.IsMutation(method); got != want {
			t.Errorf("IsMutation(%q) = %v, want %v", method, got, want)
		}
	}
}

// mutationTable is what each method is: true for a mutation.
var mutationTable = map[string]bool{
	"":                 false, // net/http's GET
	http.MethodGet:     false,
	http.MethodHead:    false,
	http.MethodOptions: false,
	http.MethodTrace:   false,
	http.MethodPut:     true,
	http.MethodPost:    true,
	http.MethodPatch:   true,
	http.MethodDelete:  true,
	"MERGE":            true, // Azure Table storage's Merge Entity
	http.MethodConnect: true, // not safe in RFC 9110
	"PROPPATCH":        true, // an unknown extension method writes
	"get":              true, // methods are case-sensitive
}

// TestIsMutationMatchesTheTransport asks the readrecovery transport, through
// its public Report, which methods it counts as mutations: the adapter's
// copy of the rule must agree with it for every method of the table, or
// azcore would retry a 429 the transport owns (or the reverse).
func TestIsMutationMatchesTheTransport(t *testing.T) {
	for method := range mutationTable {
		base := &scripted{status: http.StatusOK}
		b := readrecovery.NewBudget("methods")
		req, err := http.NewRequestWithContext(readrecovery.WithBudget(context.Background(), b), method, "https://account.blob.example/c/b", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := readrecovery.New(base).RoundTrip(req)
		if err != nil {
			t.Fatalf("%q: %v", method, err)
		}
		resp.Body.Close()
		transport := len(b.Report().Mutations) > 0
		if transport != rrazure.IsMutation(method) {
			t.Errorf("method %q: the transport records a mutation: %v; rrazure's isMutation: %v", method, transport, rrazure.IsMutation(method))
		}
	}
}

func TestWithoutQuery(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://account.blob.example/c/b?sv=1&sig=SECRET", "https://account.blob.example/c/b"},
		{"https://user:pass@account.blob.example/c/b", "https://account.blob.example/c/b"},
		{"https://account.blob.example/c/a%20b#frag", "https://account.blob.example/c/a%20b"},
		{"https://account.blob.example", "https://account.blob.example"},
		{"/c/b?sig=SECRET", "/c/b"},
		{"http://127.0.0.1:10000/devstoreaccount1/c/b?comp=block", "http://127.0.0.1:10000/devstoreaccount1/c/b"},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := rrazure.WithoutQuery(u); got != tc.want {
			t.Errorf("WithoutQuery(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := rrazure.WithoutQuery(nil); got != "" {
		t.Errorf("WithoutQuery(nil) = %q, want \"\"", got)
	}
}

// FuzzWithoutQuery: whatever URL a request carries, the name kept has no
// query or fragment, and is exactly its scheme, host and escaped path
// (so no userinfo: neither the host nor the path holds it).
func FuzzWithoutQuery(f *testing.F) {
	for _, s := range []string{"https://a.example/c/b?sig=x", "https://u:p@a.example/%2F?#", "/p?q", "mailto:x@y", "//h/p", "http://[::1]:80/a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		u, err := url.Parse(in)
		if err != nil {
			return
		}
		got := rrazure.WithoutQuery(u)
		if strings.ContainsAny(got, "?#") {
			t.Fatalf("WithoutQuery(%q) = %q keeps a query or fragment", in, got)
		}
		want := u.Host + u.EscapedPath()
		if u.Scheme != "" {
			want = u.Scheme + "://" + want
		}
		if got != want {
			t.Fatalf("WithoutQuery(%q) = %q, want %q", in, got, want)
		}
	})
}

// BenchmarkOperationMark: what the per-call operation mark costs one azcore
// call that passes through (GET without a Budget, 200), against the same
// pipeline without the mark. Compare with benchstat: -bench OperationMark
// -count 8.
func BenchmarkOperationMark(b *testing.B) {
	for _, marked := range []bool{true, false} {
		name := map[bool]string{true: "marked", false: "unmarked"}[marked]
		b.Run(name, func(b *testing.B) {
			base := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
			})
			var o policy.ClientOptions
			o.Telemetry.Disabled = true
			rrazure.Apply(&o, readrecovery.New(base))
			if !marked {
				o.PerCallPolicies = o.PerCallPolicies[:len(o.PerCallPolicies)-1]
			}
			pl := newPipeline(o)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := send(ctx, pl, http.MethodGet, "https://account.blob.example/c/b", nil)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}

// TestNewUploadAfter429KeepsItsBody: after a PUT met 429 in a sequence, a
// new azcore call to the same URL with other bytes is a new operation and
// a different body: it is sent, whole. The transport's repeat check must not
// consume it (azcore's GetBody hands back the very stream it sends).
func TestNewUploadAfter429KeepsItsBody(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	o := rrazure.ClientOptions()
	o.Retry.MaxRetries = -1 // one try: a broken send shows as an error, not as azcore's retries
	pl := newPipeline(o)
	ctx := readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("two uploads"))
	resp, err := send(ctx, pl, http.MethodPut, srv.URL+"/c/b", []byte("first body"))
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("first upload: %v, %v; want the 429", resp, err)
	}
	resp.Body.Close()
	resp, err = send(ctx, pl, http.MethodPut, srv.URL+"/c/b", []byte("second, other body"))
	if err != nil {
		t.Fatalf("second upload: %v", err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != http.StatusCreated || !slices.Equal(bodies, []string{"first body", "second, other body"}) {
		t.Fatalf("second upload: status %d; the server read %q; want 201 and each body once, whole", resp.StatusCode, bodies)
	}
}
