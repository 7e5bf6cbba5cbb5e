package bench

import (
	"context"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	azruntime "github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/readrecovery/readrecovery"
)

// impl is one contender: a way to send a GET over a given base transport.
type impl struct {
	name string
	// do sends one GET of url with ctx, reads the body to its end, closes
	// it and returns the status.
	do func(ctx context.Context, url string) (int, error)
	// sequence returns the context of a new sequence: a fresh Budget for
	// readrecovery with a budget, ctx itself for everyone else.
	sequence func(ctx context.Context) context.Context
	// close releases the idle connections.
	close func()
}

// implSpec makes an impl over a base transport.
type implSpec struct {
	name string
	// recovers is false for the contenders that never re-send a 429 (the
	// bare transport, readrecovery without a budget).
	recovers bool
	make     func(base http.RoundTripper) *impl
	// only lists the benchmarks (top-level names) the contender runs in;
	// nil runs it in every one. The bench-only variants of rr-budget run
	// only where they answer a question.
	only []string
}

// The contenders, in report order. Every one gets its own base transport
// from newBase (go-cleanhttp's pooled transport), every one is reached
// through an http.Client that returns redirects (azcore: its pipeline over
// such a client), and every peer's retry waits exactly what the server
// asks, so 0 for "Retry-After: 0":
//
//   - retryablehttp: RetryWaitMin 0 (its DefaultBackoff returns the
//     Retry-After of a 429 as it is, else min·2^n = 0), Logger nil (the
//     default logs every attempt to stderr), RetryMax left at 4.
//   - azcore: RetryOptions.RetryDelay 1 ns. azcore uses Retry-After only
//     when it is above 0; for "Retry-After: 0" it falls back to its own
//     exponential delay (800 ms by default). The documented "no delay",
//     RetryDelay -1, does not work in v1.24.0: calcDelay computes 1·0 = 0,
//     takes it for an overflow and waits MaxRetryDelay (60 s). 1 ns gives a
//     delay of 0–1 ns. Everything else is default (MaxRetries 3, telemetry,
//     request ID, body download, logging without a listener).
//   - failsafe-go: failsafehttp.NewRetryPolicyBuilder (it honours
//     delay-seconds Retry-After, default delay 0, MaxRetries 2) plus a
//     listener that drains and closes the response of an attempt about to
//     be retried, and one for the last response when the retries are
//     exceeded (failsafe then returns an ExceededError and no response).
//     failsafehttp drops those responses with their bodies open, which
//     holds the keep-alive connection (scenario 3 would stall at its
//     connection limit, and scenario (e) does, once 64 pages have run out
//     of retries); closing them is what a careful user must add.
//
// Four variants of rr-budget exist for the bench only, each in the
// benchmarks where it answers a question:
//
//   - rr-budget-each (scenario 1 and own cost): a new Budget for every
//     request instead of one per 10-page sequence, for issue 14's
//     "loopback ratio ≤ 1.02 with a new Budget per request".
//   - rr-shared (scenarios 3, (c), (e), (f), (g), (h) and (s)): rr-budget
//     over a Transport made WithSharedRestrictions(nil), so that a 429 of
//     one sequence holds every sequence of the same scheme and host until
//     its T, and releases them at a pace (issue 21).
//   - rr-azure (scenarios (g) and (s)): rr-shared with AzureScope as the
//     scope (the Azure wirings' default), so that two subscriptions on one
//     Resource Manager host are two scopes.
//   - rr-drained (scenarios 2 and 3): a control, not something the
//     library does. rr-budget over a base that drains every 429's body
//     into memory (drain429) before readrecovery sees it, so that when
//     readrecovery closes that body unread (R12) the connection is
//     already back in the pool. The difference to rr-budget is the
//     re-dial R12 costs on HTTP/1.1.
var implSpecs = []implSpec{
	{"bare", false, newBare, nil},
	{"rr-nobudget", false, newReadRecovery(false), nil},
	{"rr-budget", true, newReadRecovery(true), nil},
	{"rr-budget-each", true, newReadRecoveryEach, []string{"BenchmarkPassThrough", "BenchmarkOwnCost"}},
	{"rr-drained", true, newReadRecoveryDrained, []string{"BenchmarkRecovered429", "BenchmarkConcurrentSequences"}},
	{"rr-shared", true, newReadRecoveryNamed("rr-shared", readrecovery.WithSharedRestrictions(nil)), []string{"BenchmarkTokenBucket", "BenchmarkServerBusy", "BenchmarkThrottleBurst", "BenchmarkConcurrentSequences", "BenchmarkSubscriptions"}},
	{"rr-azure", true, newReadRecoveryNamed("rr-azure", readrecovery.WithSharedRestrictions(readrecovery.AzureScope)), []string{"BenchmarkSubscriptions"}},
	{"retryablehttp", true, newRetryableHTTP, nil},
	{"azcore", true, newAzcore, nil},
	{"failsafe", true, newFailsafe, nil},
}

// specsInRunOrder returns the contenders of the benchmark b belongs to
// (implSpec.only, by b's top-level name) rotated by the round number in
// BENCH_ROUND (set by the run script), so that over the rounds every
// contender runs first, second, ... equally often: order effects (a warm
// or cold machine, a burst of other work) spread over everyone.
func specsInRunOrder(b *testing.B) []implSpec {
	bench, _, _ := strings.Cut(b.Name(), "/")
	specs := specsOf(bench)
	r, _ := strconv.Atoi(os.Getenv("BENCH_ROUND"))
	n := len(specs)
	out := make([]implSpec, n)
	for i := range n {
		out[i] = specs[((i+r)%n+n)%n]
	}
	return out
}

// specsNamed returns the contenders named names (in implSpecs' order)
// rotated by the round, as specsInRunOrder does, for a benchmark that runs
// a few contenders of its own choosing (scenarios (h) and (s)).
func specsNamed(b *testing.B, names []string) []implSpec {
	var specs []implSpec
	for _, s := range implSpecs {
		if slices.Contains(names, s.name) {
			specs = append(specs, s)
		}
	}
	if len(specs) != len(names) {
		b.Fatalf("contenders %v, found %d", names, len(specs))
	}
	r, _ := strconv.Atoi(os.Getenv("BENCH_ROUND"))
	n := len(specs)
	out := make([]implSpec, n)
	for i := range n {
		out[i] = specs[((i+r)%n+n)%n]
	}
	return out
}

// specsOf returns the contenders of the benchmark named bench, in
// implSpecs' order.
func specsOf(bench string) []implSpec {
	var specs []implSpec
	for _, s := range implSpecs {
		if s.only == nil || slices.Contains(s.only, bench) {
			specs = append(specs, s)
		}
	}
	return specs
}

// newBase returns the base transport of one contender: go-cleanhttp's
// pooled transport, with its per-host connection limits raised to conns
// when conns > 0 (scenario 3, identically for everyone).
func newBase(conns int) *http.Transport {
	t := cleanhttp.DefaultPooledTransport()
	if conns > 0 {
		t.MaxConnsPerHost = conns
		t.MaxIdleConnsPerHost = conns
	}
	return t
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func identity(ctx context.Context) context.Context { return ctx }

// clientImpl is an impl over an http.Client.
func clientImpl(name string, c *http.Client, seq func(context.Context) context.Context) *impl {
	return &impl{
		name: name,
		do: func(ctx context.Context, url string) (int, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return 0, err
			}
			resp, err := c.Do(req)
			if err != nil {
				return 0, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, nil
		},
		sequence: seq,
		close:    c.CloseIdleConnections,
	}
}

func newBare(base http.RoundTripper) *impl {
	return clientImpl("bare", &http.Client{Transport: base, CheckRedirect: noRedirect}, identity)
}

// newReadRecovery is readrecovery.NewClient over base; with budget, every
// sequence gets its own Budget.
func newReadRecovery(budget bool) func(http.RoundTripper) *impl {
	if budget {
		return newReadRecoveryNamed("rr-budget")
	}
	return func(base http.RoundTripper) *impl {
		c := &http.Client{Transport: readrecovery.New(base), CheckRedirect: noRedirect}
		return clientImpl("rr-nobudget", c, identity)
	}
}

// newReadRecoveryNamed is rr-budget (a Budget per sequence) named name,
// over a Transport made with opts. A contender that differs from rr-budget
// only by a Transport option is one line in implSpecs, such as the shared
// restrictions once they exist:
//
//	{"rr-shared", true, newReadRecoveryNamed("rr-shared", readrecovery.WithSharedRestrictions(nil)), []string{"BenchmarkTokenBucket", "BenchmarkServerBusy"}},
func newReadRecoveryNamed(name string, opts ...readrecovery.Option) func(http.RoundTripper) *impl {
	return func(base http.RoundTripper) *impl {
		c := &http.Client{Transport: readrecovery.New(base, opts...), CheckRedirect: noRedirect}
		return clientImpl(name, c, func(ctx context.Context) context.Context {
			return readrecovery.WithBudget(ctx, readrecovery.NewBudget("bench"))
		})
	}
}

// newReadRecoveryEach is rr-budget-each: rr-budget with a new Budget for
// every request, put into the request's context by do itself (its
// sequence adds nothing).
func newReadRecoveryEach(base http.RoundTripper) *impl {
	im := newReadRecovery(true)(base)
	do := im.do
	im.name = "rr-budget-each"
	im.do = func(ctx context.Context, url string) (int, error) {
		return do(readrecovery.WithBudget(ctx, readrecovery.NewBudget("bench")), url)
	}
	im.sequence = identity
	return im
}

// newReadRecoveryDrained is rr-drained, a control: rr-budget (a Budget per
// sequence) over drain429{base}, which reads a 429's body to its end
// before readrecovery closes it unread. The library never does this (R12
// closes the body unread); the control only shows what R12's re-dial
// costs.
func newReadRecoveryDrained(base http.RoundTripper) *impl {
	im := newReadRecovery(true)(drain429{base: base})
	im.name = "rr-drained"
	return im
}

func newRetryableHTTP(base http.RoundTripper) *impl {
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: base, CheckRedirect: noRedirect}
	rc.Logger = nil
	rc.RetryWaitMin = 0
	rc.RetryWaitMax = 30 * time.Second
	c := &http.Client{Transport: &retryablehttp.RoundTripper{Client: rc}, CheckRedirect: noRedirect}
	return clientImpl("retryablehttp", c, identity)
}

func newAzcore(base http.RoundTripper) *impl {
	hc := &http.Client{Transport: base, CheckRedirect: noRedirect}
	pl := azruntime.NewPipeline("bench", "v0.0.0", azruntime.PipelineOptions{}, &policy.ClientOptions{
		Transport: hc,
		Retry:     policy.RetryOptions{RetryDelay: time.Nanosecond},
	})
	return &impl{
		name: "azcore",
		do: func(ctx context.Context, url string) (int, error) {
			req, err := azruntime.NewRequest(ctx, http.MethodGet, url)
			if err != nil {
				return 0, err
			}
			resp, err := pl.Do(req)
			if err != nil {
				return 0, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, nil
		},
		sequence: identity,
		close:    hc.CloseIdleConnections,
	}
}

func newFailsafe(base http.RoundTripper) *impl {
	rp := failsafehttp.NewRetryPolicyBuilder().
		OnRetryScheduled(func(e failsafe.ExecutionScheduledEvent[*http.Response]) {
			if r := e.LastResult(); r != nil && r.Body != nil {
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
		}).
		OnRetriesExceeded(func(e failsafe.ExecutionEvent[*http.Response]) {
			if r := e.LastResult(); r != nil && r.Body != nil {
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
		}).
		Build()
	c := &http.Client{Transport: failsafehttp.NewRoundTripper(base, rp), CheckRedirect: noRedirect}
	return clientImpl("failsafe", c, identity)
}
