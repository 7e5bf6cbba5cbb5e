package fakeserver

import (
	"io"
	"net/http"
	"strings"
	"testing"
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
