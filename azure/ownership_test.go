package rrazure_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
	"github.com/readrecovery/readrecovery/azure/rrazuretest"
)

// outcome is what one call through a real azcore pipeline came to: the
// tries azcore's retry policy made (a per-retry policy counts them) and
// the requests that reached the base transport beneath readrecovery.
type outcome struct{ tries, sends int }

// TestOwnershipMatrix pins the one-owner-per-429 rule (docs/policy.md)
// against azcore's real retry policy
// (runtime.NewPipeline, default MaxRetries 3: at most 4 tries): for each
// method, with and without a Budget, a base that answers every request
// with the same status. A 429 that readrecovery owns (GET with a Budget,
// every mutation) gets exactly one azcore try; every other 429, and 503
// and 408 for every method, is retried by azcore to its limit.
func TestOwnershipMatrix(t *testing.T) {
	statuses := []int{429, 503, 408, 200}
	for _, row := range []struct {
		method string
		budget bool
		want   [4]outcome // by status: 429, 503, 408, 200
	}{
		// readrecovery re-sends the GET once inside azcore's one try.
		{http.MethodGet, true, [4]outcome{{1, 2}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodGet, false, [4]outcome{{4, 4}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodHead, true, [4]outcome{{4, 4}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodHead, false, [4]outcome{{4, 4}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodOptions, true, [4]outcome{{4, 4}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodOptions, false, [4]outcome{{4, 4}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodPut, true, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodPut, false, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodPost, true, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodPost, false, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodPatch, true, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodPatch, false, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodDelete, true, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodDelete, false, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		// Every method but GET, HEAD, OPTIONS and TRACE is a mutation
		// (rrazure.IsMutation, the transport's own rule): MERGE's 429 is never azcore's to retry.
		{"MERGE", true, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		{"MERGE", false, [4]outcome{{1, 1}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodTrace, true, [4]outcome{{4, 4}, {4, 4}, {4, 4}, {1, 1}}},
		{http.MethodTrace, false, [4]outcome{{4, 4}, {4, 4}, {4, 4}, {1, 1}}},
	} {
		for i, status := range statuses {
			name := fmt.Sprintf("%s budget=%t %d", row.method, row.budget, status)
			t.Run(name, func(t *testing.T) {
				base := &scripted{status: status}
				var o policy.ClientOptions
				rrazure.Apply(&o, readrecovery.New(base))
				var b *readrecovery.Budget
				ctx := context.Background()
				if row.budget {
					b = readrecovery.NewBudget("matrix")
					ctx = readrecovery.WithBudget(ctx, b)
				}
				got, resp, err := call(ctx, o, base, row.method)
				if err != nil {
					t.Fatalf("Do: %v", err)
				}
				if resp.StatusCode != status {
					t.Fatalf("status %d, want %d", resp.StatusCode, status)
				}
				if got != row.want[i] {
					t.Fatalf("azcore tries %d, sends %d; want %d, %d", got.tries, got.sends, row.want[i].tries, row.want[i].sends)
				}
				if m := base.methods(); len(m) != got.sends || slices.ContainsFunc(m, func(s string) bool { return s != row.method }) {
					t.Fatalf("the base saw %v, want %d × %s", m, got.sends, row.method)
				}
				if b != nil {
					if r := b.Report(); r.Requests != got.sends {
						t.Fatalf("report: %d requests, the base saw %d", r.Requests, got.sends)
					}
				}
			})
		}
	}
}

// TestOwnershipFollowsTheCallersOptions: what readrecovery does not own
// is decided by the caller's own StatusCodes and ShouldRetry, as azcore
// would without rrazure; what it owns never reaches them.
func TestOwnershipFollowsTheCallersOptions(t *testing.T) {
	bg := context.Background()
	withBudget := func() context.Context { return readrecovery.WithBudget(bg, readrecovery.NewBudget("opts")) }
	for _, tc := range []struct {
		name   string
		retry  policy.RetryOptions
		ctx    context.Context
		method string
		base   *scripted
		want   outcome
	}{
		{"StatusCodes [503]: a HEAD 429 is not retried", policy.RetryOptions{StatusCodes: []int{503}}, bg, http.MethodHead, &scripted{status: 429}, outcome{1, 1}},
		{"StatusCodes [503]: a GET 429 without a Budget is not retried", policy.RetryOptions{StatusCodes: []int{503}}, bg, http.MethodGet, &scripted{status: 429}, outcome{1, 1}},
		{"StatusCodes [503]: a HEAD 503 is retried", policy.RetryOptions{StatusCodes: []int{503}}, bg, http.MethodHead, &scripted{status: 503}, outcome{4, 4}},
		{"StatusCodes [503], MaxRetries 1", policy.RetryOptions{StatusCodes: []int{503}, MaxRetries: 1}, bg, http.MethodPut, &scripted{status: 503}, outcome{2, 2}},
		{"StatusCodes []: nothing retried by status", policy.RetryOptions{StatusCodes: []int{}}, bg, http.MethodHead, &scripted{status: 503}, outcome{1, 1}},
		{"StatusCodes []: a transport error is still retried", policy.RetryOptions{StatusCodes: []int{}}, bg, http.MethodHead, &scripted{err: errReset}, outcome{4, 4}},
		{"defaults: a transport error is retried", policy.RetryOptions{}, bg, http.MethodPut, &scripted{err: errReset}, outcome{4, 4}},
		{"StatusCodes [429]: a PUT 429 is still sent once", policy.RetryOptions{StatusCodes: []int{429}}, bg, http.MethodPut, &scripted{status: 429}, outcome{1, 1}},
		{"StatusCodes [429]: a POST 429 with a Budget is still sent once", policy.RetryOptions{StatusCodes: []int{429}}, withBudget(), http.MethodPost, &scripted{status: 429}, outcome{1, 1}},
		{"StatusCodes [429]: a HEAD 429 is retried", policy.RetryOptions{StatusCodes: []int{429}}, bg, http.MethodHead, &scripted{status: 429}, outcome{4, 4}},
		{"StatusCodes [429]: a GET 429 with a Budget is readrecovery's", policy.RetryOptions{StatusCodes: []int{429}}, withBudget(), http.MethodGet, &scripted{status: 429}, outcome{1, 2}},
		// A base that does not set resp.Request: the method is unknown,
		// and a mutation must never be re-sent by azcore.
		{"no resp.Request: a HEAD 429 is not retried", policy.RetryOptions{}, bg, http.MethodHead, &scripted{status: 429, noRequest: true}, outcome{1, 1}},
		{"no resp.Request: a HEAD 503 is retried", policy.RetryOptions{}, bg, http.MethodHead, &scripted{status: 503, noRequest: true}, outcome{4, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := policy.ClientOptions{Retry: tc.retry}
			rrazure.Apply(&o, readrecovery.New(tc.base))
			got, resp, err := call(tc.ctx, o, tc.base, tc.method)
			if tc.base.err != nil {
				if !errors.Is(err, errReset) {
					t.Fatalf("err = %v, want the base's error", err)
				}
			} else if err != nil || resp.StatusCode != tc.base.status {
				t.Fatalf("Do: %v, want status %d", err, tc.base.status)
			}
			if got != tc.want {
				t.Fatalf("azcore tries %d, sends %d; want %d, %d", got.tries, got.sends, tc.want.tries, tc.want.sends)
			}
		})
	}
}

// TestCallersShouldRetry: the caller's ShouldRetry decides what
// readrecovery does not own and is never asked about a 429 it owns.
func TestCallersShouldRetry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		method    string
		budget    bool
		status    int
		retry     bool // what the caller's ShouldRetry answers
		wantAsked []int
		want      outcome
	}{
		{"PUT 429: never asked", http.MethodPut, false, 429, true, nil, outcome{1, 1}},
		{"DELETE 429 with a Budget: never asked", http.MethodDelete, true, 429, true, nil, outcome{1, 1}},
		{"GET 429 with a Budget: never asked", http.MethodGet, true, 429, true, nil, outcome{1, 2}},
		{"GET 429 without a Budget: asked, retried", http.MethodGet, false, 429, true, []int{429, 429}, outcome{2, 2}},
		{"HEAD 429 with a Budget: asked, not retried", http.MethodHead, true, 429, false, []int{429}, outcome{1, 1}},
		{"OPTIONS 429: asked, retried", http.MethodOptions, false, 429, true, []int{429, 429}, outcome{2, 2}},
		{"PUT 503: asked, retried", http.MethodPut, false, 503, true, []int{503, 503}, outcome{2, 2}},
		{"PUT 200: asked, not retried", http.MethodPut, false, 200, false, []int{200}, outcome{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []int
			o := policy.ClientOptions{Retry: policy.RetryOptions{
				MaxRetries: 1,
				// Ignored, as azcore ignores them when ShouldRetry is set.
				StatusCodes: []int{},
				ShouldRetry: func(resp *http.Response, err error) bool {
					if resp != nil {
						asked = append(asked, resp.StatusCode)
					}
					return tc.retry
				},
			}}
			base := &scripted{status: tc.status}
			rrazure.Apply(&o, readrecovery.New(base))
			ctx := context.Background()
			if tc.budget {
				ctx = readrecovery.WithBudget(ctx, readrecovery.NewBudget("should"))
			}
			got, _, err := call(ctx, o, base, tc.method)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || !slices.Equal(asked, tc.wantAsked) {
				t.Fatalf("tries %d, sends %d, asked about %v; want %d, %d, %v",
					got.tries, got.sends, asked, tc.want.tries, tc.want.sends, tc.wantAsked)
			}
		})
	}
}

// TestPerCallRetryOptions: a per-call policy.WithRetryOptions replaces the
// client's retry options, ShouldRetry included; wrapped in
// rrazure.RetryOptions it keeps the ownership for that call.
func TestPerCallRetryOptions(t *testing.T) {
	perCall := rrazure.RetryOptions(policy.RetryOptions{StatusCodes: []int{429}, MaxRetries: 2, RetryDelay: time.Millisecond})
	for _, tc := range []struct {
		method string
		budget bool
		want   outcome
	}{
		{http.MethodPut, true, outcome{1, 1}},
		{http.MethodPut, false, outcome{1, 1}},
		{http.MethodGet, true, outcome{1, 2}},
		{http.MethodGet, false, outcome{3, 3}},
		{http.MethodHead, false, outcome{3, 3}},
	} {
		t.Run(fmt.Sprintf("%s budget=%t", tc.method, tc.budget), func(t *testing.T) {
			base := &scripted{status: 429}
			var o policy.ClientOptions
			rrazure.Apply(&o, readrecovery.New(base))
			ctx := policy.WithRetryOptions(context.Background(), perCall)
			if tc.budget {
				ctx = readrecovery.WithBudget(ctx, readrecovery.NewBudget("per-call"))
			}
			got, _, err := call(ctx, o, base, tc.method)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("tries %d, sends %d; want %d, %d", got.tries, got.sends, tc.want.tries, tc.want.sends)
			}
		})
	}
}

// TestApplyTwice: applying the adapter to options it already changed
// keeps the same ownership.
func TestApplyTwice(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   outcome
	}{{http.MethodPut, outcome{1, 1}}, {http.MethodHead, outcome{4, 4}}} {
		base := &scripted{status: 429}
		o := rrazure.ClientOptions()
		rrazure.Apply(&o, readrecovery.New(base))
		got, _, err := call(context.Background(), o, base, tc.method)
		if err != nil || got != tc.want {
			t.Fatalf("%s: tries %d, sends %d, err %v; want %d, %d", tc.method, got.tries, got.sends, err, tc.want.tries, tc.want.sends)
		}
	}
}

var errReset = errors.New("connection reset by peer (test)")

// scripted is a base transport beneath readrecovery that answers every
// request with status (429 with Retry-After: 0, so that neither
// readrecovery nor azcore waits long) or fails with err, and records
// the methods it saw.
type scripted struct {
	status    int
	err       error
	noRequest bool // leave resp.Request nil, as some fakes do

	mu   sync.Mutex
	seen []string
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.seen = append(s.seen, req.Method)
	s.mu.Unlock()
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	if s.err != nil {
		return nil, s.err
	}
	h := http.Header{}
	if s.status == http.StatusTooManyRequests {
		h.Set("Retry-After", "0")
	}
	resp := &http.Response{StatusCode: s.status, Header: h, Body: io.NopCloser(strings.NewReader("x"))}
	if !s.noRequest {
		resp.Request = req
	}
	return resp, nil
}

func (s *scripted) methods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// call sends one request of method through a real azcore pipeline built
// from o over base (with azcore's delays cut to a millisecond unless o sets them)
// and counts azcore's tries and the base's sends.
func call(ctx context.Context, o policy.ClientOptions, base *scripted, method string) (outcome, *http.Response, error) {
	var tries atomic.Int32
	if o.Retry.RetryDelay == 0 {
		o.Retry.RetryDelay = time.Millisecond
	}
	o.PerRetryPolicies = append(o.PerRetryPolicies, rrazuretest.CountTries(&tries))
	var body []byte
	switch method {
	case http.MethodPut, http.MethodPost, http.MethodPatch:
		body = []byte(`{"x":1}`)
	}
	resp, err := send(ctx, newPipeline(o), method, "https://account.blob.example/c/b", body)
	if resp != nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return outcome{tries: int(tries.Load()), sends: len(base.methods())}, resp, err
}

// TestOperationMarkRefusesAzcoresTries: the per-call policy Apply installs
// marks each azcore operation (readrecovery.WithOperation), so whatever
// retry options put 429 back into azcore, a mutation that met 429 reaches
// the server once: azcore's next try of the same operation is refused
// before the network, NonRetriable, with the 429's status and request ID,
// with or without a Budget (docs/policy.md, "repeat-guard").
func TestOperationMarkRefusesAzcoresTries(t *testing.T) {
	unwrapped := policy.RetryOptions{StatusCodes: []int{http.StatusTooManyRequests}, RetryDelay: time.Millisecond}
	retryAll := func(o *policy.ClientOptions) {
		// Set after Apply: the caller's own ShouldRetry replaces rrazure's.
		o.Retry.ShouldRetry = func(*http.Response, error) bool { return true }
		o.Retry.RetryDelay = time.Millisecond
	}
	for _, tc := range []struct {
		name    string
		method  string
		budget  bool
		perCall *policy.RetryOptions
		client  func(*policy.ClientOptions)
		// refused: azcore's second try is refused; otherwise the 429 goes
		// back to the caller after one try.
		refused bool
	}{
		{"PUT, per-call StatusCodes [429], no Budget", http.MethodPut, false, &unwrapped, nil, true},
		{"PUT, per-call StatusCodes [429], a Budget", http.MethodPut, true, &unwrapped, nil, true},
		{"POST, per-call StatusCodes [429], no Budget", http.MethodPost, false, &unwrapped, nil, true},
		{"PATCH, per-call StatusCodes [429], no Budget", http.MethodPatch, false, &unwrapped, nil, true},
		{"DELETE, per-call StatusCodes [429], no Budget", http.MethodDelete, false, &unwrapped, nil, true},
		{"MERGE, per-call StatusCodes [429], a Budget", "MERGE", true, &unwrapped, nil, true},
		{"PUT, the client's ShouldRetry always true, no Budget", http.MethodPut, false, nil, retryAll, true},
		{"PUT, per-call rrazure.RetryOptions, no Budget", http.MethodPut, false, new(rrazure.RetryOptions(unwrapped)), nil, false},
		{"PUT, rrazure's defaults, no Budget", http.MethodPut, false, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 1 {
					w.Header().Set("Retry-After", "0")
					w.Header().Set("x-ms-request-id", "op-429")
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			var tries atomic.Int32
			o := policy.ClientOptions{Retry: policy.RetryOptions{RetryDelay: time.Millisecond}}
			rrazure.Apply(&o, nil)
			if tc.client != nil {
				tc.client(&o)
			}
			o.PerRetryPolicies = []policy.Policy{rrazuretest.CountTries(&tries)}
			ctx := context.Background()
			var b *readrecovery.Budget
			if tc.budget {
				b = readrecovery.NewBudget("operation")
				ctx = readrecovery.WithBudget(ctx, b)
			}
			if tc.perCall != nil {
				ctx = policy.WithRetryOptions(ctx, *tc.perCall)
			}
			resp, err := send(ctx, newPipeline(o), tc.method, srv.URL+"/c/upload.json", []byte(`{"n":1}`))
			if got := srv.count(tc.method); got != 1 {
				t.Fatalf("the server saw %d %ss, want 1", got, tc.method)
			}
			if !tc.refused {
				if err != nil || resp.StatusCode != http.StatusTooManyRequests || tries.Load() != 1 {
					t.Fatalf("resp %v, err %v, %d tries; want the 429 back after one try", resp, err, tries.Load())
				}
				resp.Body.Close()
				return
			}
			if n := tries.Load(); n != 2 {
				t.Fatalf("azcore made %d tries, want 2: the refused one ends its loop", n)
			}
			var se *readrecovery.StopError
			if !errors.Is(err, readrecovery.ErrRequestRefused) || !errors.As(err, &se) || se.Reason != readrecovery.StopRepeatRefused {
				t.Fatalf("err = %v, want the try refused (ErrRequestRefused, %s)", err, readrecovery.StopRepeatRefused)
			}
			if se.StatusCode != http.StatusTooManyRequests || se.RequestID != "op-429" {
				t.Fatalf("the refusal carries status %d, request ID %q; want 429, op-429", se.StatusCode, se.RequestID)
			}
			if errors.Is(err, readrecovery.ErrSequenceStopped) {
				t.Fatalf("err = %v: a refusal must not stop the sequence", err)
			}
			if b != nil {
				if r := b.Report(); r.Stop != "" || r.Requests != 1 {
					t.Fatalf("report: stop %q, %d requests; want the sequence running after one request", r.Stop, r.Requests)
				}
			}
		})
	}
}

// TestOperationIsOneCall: the mark covers one pipeline call, not the
// client. Without a Budget, a new call of the same PUT after the first
// call's 429 is a new operation, the caller's own decision (docs/policy.md,
// "repeat-guard"): it is sent, while the first call's own retry was refused.
func TestOperationIsOneCall(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	pl := newPipeline(rrazure.ClientOptions())
	ctx := policy.WithRetryOptions(context.Background(), policy.RetryOptions{StatusCodes: []int{429}, RetryDelay: time.Millisecond})
	if _, err := send(ctx, pl, http.MethodPut, srv.URL+"/c/b", []byte("x")); !errors.Is(err, readrecovery.ErrRequestRefused) {
		t.Fatalf("first call: err = %v, want its retry refused", err)
	}
	resp, err := send(ctx, pl, http.MethodPut, srv.URL+"/c/b", []byte("x"))
	if err != nil {
		t.Fatalf("second call: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || srv.count(http.MethodPut) != 2 {
		t.Fatalf("second call: status %d, the server saw %d PUTs; want 201 and 2", resp.StatusCode, srv.count(http.MethodPut))
	}
}

// TestNewCallInTheSequence: with a Budget, a new call that repeats a
// throttled upload (same method, URL and body bytes) is a repeat within
// the sequence, refused before the network with the 429's evidence; without
// a Budget it is the caller's decision and is sent (docs/policy.md,
// "repeat-guard").
func TestNewCallInTheSequence(t *testing.T) {
	for _, budget := range []bool{true, false} {
		t.Run(fmt.Sprintf("budget=%t", budget), func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				io.Copy(io.Discard, r.Body)
				if n == 1 {
					w.Header().Set("Retry-After", "0")
					w.Header().Set("x-ms-request-id", "first-429")
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			pl := newPipeline(rrazure.ClientOptions())
			ctx := context.Background()
			if budget {
				ctx = readrecovery.WithBudget(ctx, readrecovery.NewBudget("uploads"))
			}
			body := []byte(`{"file":"a"}`)
			resp, err := send(ctx, pl, http.MethodPut, srv.URL+"/c/a.json", body)
			if err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("first call: %v, %v; want the 429 back", resp, err)
			}
			resp.Body.Close()
			resp, err = send(ctx, pl, http.MethodPut, srv.URL+"/c/a.json", bytes.Clone(body))
			if !budget {
				if err != nil || resp.StatusCode != http.StatusCreated || srv.count(http.MethodPut) != 2 {
					t.Fatalf("second call without a Budget: %v, %v, the server saw %d PUTs; want it sent: 201, 2", resp, err, srv.count(http.MethodPut))
				}
				resp.Body.Close()
				return
			}
			var se *readrecovery.StopError
			if !errors.Is(err, readrecovery.ErrRequestRefused) || !errors.As(err, &se) || se.StatusCode != 429 || se.RequestID != "first-429" {
				t.Fatalf("second call: err = %v, want the repeat refused with the first 429's status and request ID", err)
			}
			if n := srv.count(http.MethodPut); n != 1 {
				t.Fatalf("the server saw %d PUTs, want 1", n)
			}
		})
	}
}

// TestApplyInstallsOneOperationPolicy: Apply adds its per-call policy once,
// after the caller's own, and never writes into the caller's slice.
func TestApplyInstallsOneOperationPolicy(t *testing.T) {
	mine := markerPolicy{"the caller's"}
	callers := make([]policy.Policy, 1, 2)
	callers[0] = mine
	o := policy.ClientOptions{PerCallPolicies: callers}
	rrazure.Apply(&o, nil)
	rrazure.Apply(&o, nil)
	if len(o.PerCallPolicies) != 2 || o.PerCallPolicies[0] != mine {
		t.Fatalf("PerCallPolicies = %v, want the caller's policy and one of rrazure's", o.PerCallPolicies)
	}
	if callers[:2][1] != nil {
		t.Fatal("Apply wrote into the caller's backing array")
	}
	if c := rrazure.ClientOptions(); len(c.PerCallPolicies) != 1 {
		t.Fatalf("ClientOptions has %d per-call policies, want 1", len(c.PerCallPolicies))
	}
}

// markerPolicy is a comparable per-call policy that only passes on.
type markerPolicy struct{ name string }

func (markerPolicy) Do(req *policy.Request) (*http.Response, error) { return req.Next() }
