package fakeserver

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// (The fake serves no Resource Manager or deployment routes: a request
// the bucket passes gets the fake's 404, 405 or 201; only 429 or not
// matters here. "200" below means "not 429".)

// quotaGet sends one request through the in-memory transport and returns
// its status and the named header.
func quotaGet(t *testing.T, srv *Server, method, url, header string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Transport().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(header)
}

// TestBucketPerSubscriptionARMQuota: one bucket per subscription on one
// Resource Manager host, each response saying what its bucket has left.
func TestBucketPerSubscriptionARMQuota(t *testing.T) {
	srv, _ := newClockedServer(t)
	srv.Script().Add(RouteAny, Throttle(RetryAfterRemaining()), TokenBucket(1, 2), PerSubscription(), QuotaHeaders(QuotaARM))
	const reads = "x-ms-ratelimit-remaining-subscription-reads"
	a := "http://management.azure.com/subscriptions/AAA/resourceGroups?api-version=1"
	b := "http://management.azure.com/subscriptions/bbb/resourceGroups?api-version=1"
	for i, s := range []struct {
		url, method string
		status      int
		remaining   string
		header      string
	}{
		{a, http.MethodGet, 200, "1", reads},
		{a, http.MethodGet, 200, "0", reads},
		{a, http.MethodGet, 429, "0", reads},
		{b, http.MethodGet, 200, "1", reads}, // another subscription: its own bucket
		{b, http.MethodPut, 200, "0", "x-ms-ratelimit-remaining-subscription-writes"},
		{b, http.MethodGet, 429, "0", reads},
	} {
		status, got := quotaGet(t, srv, s.method, s.url, s.header)
		if (status == 429) != (s.status == 429) || got != s.remaining {
			t.Errorf("step %d: %d %s=%q, want %d %q", i, status, s.header, got, s.status, s.remaining)
		}
	}
	if d := srv.Requests()[3].Decisions; len(d) != 1 || d[0].Key != "subscription=bbb" {
		t.Errorf("bucket of request 4: %+v, want subscription=bbb", d)
	}
}

// TestBucketPerDeploymentOpenAIQuota: one bucket per deployment of one
// Azure OpenAI resource, x-ratelimit-remaining-requests its tokens left.
func TestBucketPerDeploymentOpenAIQuota(t *testing.T) {
	srv, _ := newClockedServer(t)
	srv.Script().Add(RouteAny, Throttle(RetryAfterRemaining()), TokenBucket(1, 2), PerDeployment(), QuotaHeaders(QuotaOpenAI))
	const h = "x-ratelimit-remaining-requests"
	x := "http://res.openai.azure.com/openai/deployments/gpt/chat/completions?api-version=1"
	y := "http://res.openai.azure.com/openai/deployments/emb/chat/completions?api-version=1"
	for i, s := range []struct {
		url       string
		status    int
		remaining string
	}{
		{x, 200, "1"}, {x, 200, "0"}, {x, 429, "0"},
		{y, 200, "1"}, {y, 200, "0"}, {y, 429, "0"},
	} {
		status, got := quotaGet(t, srv, http.MethodPost, s.url, h)
		if (status == 429) != (s.status == 429) || got != s.remaining {
			t.Errorf("step %d: %d %s=%q, want %d %q", i, status, h, got, s.status, s.remaining)
		}
	}
	if d := srv.Requests()[0].Decisions; len(d) != 1 || d[0].Key != "deployment=gpt" {
		t.Errorf("bucket of request 1: %+v, want deployment=gpt", d)
	}
}

// TestBucketWithoutQuotaHeaders: without QuotaHeaders a bucket rule adds
// no remaining-quota header of its own.
func TestBucketWithoutQuotaHeaders(t *testing.T) {
	srv, _ := newClockedServer(t)
	srv.Script().Add(RouteAny, Throttle(RetryAfterRemaining()), TokenBucket(1, 2), PerSubscription())
	_, got := quotaGet(t, srv, http.MethodGet, "http://management.azure.com/subscriptions/a/x", "x-ms-ratelimit-remaining-subscription-reads")
	if got != "" {
		t.Errorf("header %q without QuotaHeaders", got)
	}
}

// TestOpenAIQuotaResetSteps: with QuotaHeaders(QuotaOpenAI) every answer
// of the bucket carries x-ratelimit-reset-requests, the time until the
// bucket is full again rounded up to the millisecond, in OpenAI's form
// (a Go duration, which the root's parser reads), next to the remaining
// count; the 429s included. Each row is one request at t0+at.
func TestOpenAIQuotaResetSteps(t *testing.T) {
	const reset = "x-ratelimit-reset-requests"
	type row struct {
		at                      time.Duration
		deployment              string // "" is gpt
		status                  int
		remaining, reset, retry string
	}
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int
		rows  []row
	}{
		{"10/s burst 2", 10, 2, []row{
			{0, "", 200, "1", "100ms", ""},
			{0, "", 200, "0", "200ms", ""},
			{0, "", 429, "0", "200ms", "1"}, // the next token in 100 ms, the full bucket in 200
			{50 * time.Millisecond, "", 429, "0", "150ms", "1"},
			{50 * time.Millisecond, "emb", 200, "1", "100ms", ""}, // another deployment: its own bucket
			{100 * time.Millisecond, "", 200, "0", "200ms", ""},
			{1234500 * time.Microsecond, "", 200, "1", "100ms", ""}, // full again
		}},
		{"2/s burst 3: whole and fractional seconds", 2, 3, []row{
			{0, "", 200, "2", "500ms", ""},
			{0, "", 200, "1", "1s", ""},
			{0, "", 200, "0", "1.5s", ""},
			{1 * time.Millisecond, "", 429, "0", "1.499s", "1"},
		}},
		{"3/s: a third of a second rounds up", 3, 1, []row{
			{0, "", 200, "0", "334ms", ""},
			{333*time.Millisecond + 333332, "", 429, "0", "1ms", "1"}, // 1 ns left
		}},
		{"0.01/s: minutes", 0.01, 1, []row{
			{0, "", 200, "0", "1m40s", ""},
			{40 * time.Second, "", 429, "0", "1m0s", "60"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, clock := newClockedServer(t)
			srv.Script().Add(RouteAny, Throttle(RetryAfterRemaining()), TokenBucket(tc.rate, tc.burst), PerDeployment(), QuotaHeaders(QuotaOpenAI))
			c := srv.Transport()
			for i, r := range tc.rows {
				clock.set(t0.Add(r.at))
				d := r.deployment
				if d == "" {
					d = "gpt"
				}
				req, err := http.NewRequest(http.MethodPost, "http://res.openai.azure.com/openai/deployments/"+d+"/chat/completions?api-version=1", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := c.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				h := resp.Header
				got := fmt.Sprintf("429=%t remaining=%q reset=%q retry-after=%q", resp.StatusCode == 429, h.Get("x-ratelimit-remaining-requests"), h.Get(reset), h.Get("Retry-After"))
				want := fmt.Sprintf("429=%t remaining=%q reset=%q retry-after=%q", r.status == 429, r.remaining, r.reset, r.retry)
				if got != want {
					t.Errorf("row %d (t0+%v %s): %s, want %s", i, r.at, d, got, want)
				}
				if v := h.Values(reset); len(v) != 1 {
					t.Errorf("row %d: %d %s lines, want 1", i, len(v), reset)
				} else if dur, err := time.ParseDuration(v[0]); err != nil || dur <= 0 || dur%time.Millisecond != 0 {
					t.Errorf("row %d: %s %q is not a whole number of milliseconds above 0 (%v)", i, reset, v[0], err)
				}
			}
		})
	}
}

// TestARMQuotaSendsNoReset: Resource Manager sends no reset header, so
// QuotaHeaders(QuotaARM) sends none either, at 0 and on the 429.
func TestARMQuotaSendsNoReset(t *testing.T) {
	srv, _ := newClockedServer(t)
	srv.Script().Add(RouteAny, Throttle(RetryAfterRemaining()), TokenBucket(1, 1), PerSubscription(), QuotaHeaders(QuotaARM))
	u := "http://management.azure.com/subscriptions/a/resourceGroups?api-version=1"
	for i, want := range []int{200, 429} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		resp, err := srv.Transport().RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if (resp.StatusCode == 429) != (want == 429) || resp.Header.Get("x-ms-ratelimit-remaining-subscription-reads") != "0" {
			t.Errorf("request %d: %d reads=%q, want %d and 0", i, resp.StatusCode, resp.Header.Get("x-ms-ratelimit-remaining-subscription-reads"), want)
		}
		for _, k := range []string{"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens", "x-ratelimit-remaining-requests"} {
			if v := resp.Header.Values(k); len(v) != 0 {
				t.Errorf("request %d: %s %q from an ARM bucket", i, k, v)
			}
		}
	}
}
