package fakeserver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// seen is what the upstream received.
type seen struct {
	Method, Path, RawPath, RawQuery, Host string
	Header                                http.Header
	Body                                  string
}

// upstream is a recording httptest server that checks a Shared-Key-like
// signature: HMAC over the method, the escaped path, the query and the
// sorted x-ms-* headers, never the Host.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

var sharedKey = []byte("devstoreaccount1-key")

func sign(method, escapedPath, rawQuery string, h http.Header) string {
	var keys []string
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-ms-") {
			keys = append(keys, strings.ToLower(k))
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(method + "\n" + escapedPath + "\n" + rawQuery + "\n")
	for _, k := range keys {
		b.WriteString(k + ":" + h.Get(k) + "\n")
	}
	m := hmac.New(sha256.New, sharedKey)
	m.Write([]byte(b.String()))
	return "SharedKey devstoreaccount1:" + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, seen{r.Method, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Host, r.Header.Clone(), string(body)})
		u.mu.Unlock()
		if auth := r.Header.Get("Authorization"); auth != "" && auth != sign(r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header) {
			w.Header().Set("x-ms-error-code", "AuthenticationFailed")
			w.WriteHeader(403)
			return
		}
		w.Header().Set("x-ms-request-id", "upstream-id-1")
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("ETag", `"0xUP"`)
		w.Header().Set("Date", "Mon, 01 Jan 2024 00:00:00 GMT")
		w.WriteHeader(202)
		_, _ = io.WriteString(w, "upstream body for "+r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) seen() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

func TestProxyForwardsUnchanged(t *testing.T) {
	up := newUpstream(t)
	p := NewProxy(mustURL(t, up.URL), nil, fixedClock())
	t.Cleanup(func() { _ = p.Close() })
	base, err := p.Start()
	require.NoError(t, err)
	c := newClient(t, nil)

	path := "/devstoreaccount1/checkpoints/dir%2Fa%20b.json"
	query := "comp=metadata&sig=SECRET&sv=2024"
	req, _ := http.NewRequest("PUT", base+path+"?"+query, strings.NewReader("checkpoint"))
	req.Header.Set("x-ms-version", "2023-11-03")
	req.Header.Set("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT")
	req.Header.Set("x-ms-blob-type", "BlockBlob")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", sign("PUT", path, query, req.Header))
	resp, err := c.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	assert.Equal(t, 202, resp.StatusCode, "the signature verified at the upstream: %s", resp.Header.Get("x-ms-error-code"))
	assert.Equal(t, "upstream body for /devstoreaccount1/checkpoints/dir/a b.json", string(body))
	assert.Equal(t, "upstream-id-1", resp.Header.Get("x-ms-request-id"), "the upstream's own ID")
	assert.Equal(t, "yes", resp.Header.Get("X-Upstream"))
	assert.Equal(t, "Mon, 01 Jan 2024 00:00:00 GMT", resp.Header.Get("Date"), "the upstream's Date")

	got := up.seen()
	require.Len(t, got, 1)
	assert.Equal(t, "PUT", got[0].Method)
	assert.Equal(t, "/devstoreaccount1/checkpoints/dir/a b.json", got[0].Path)
	assert.Equal(t, "/devstoreaccount1/checkpoints/dir%2Fa%20b.json", got[0].RawPath, "the escaped path is kept")
	assert.Equal(t, query, got[0].RawQuery)
	assert.Equal(t, strings.TrimPrefix(up.URL, "http://"), got[0].Host, "Host is the upstream's")
	assert.Equal(t, "checkpoint", got[0].Body)
	for _, k := range []string{"X-Ms-Version", "X-Ms-Date", "X-Ms-Blob-Type", "Content-Type", "Authorization"} {
		assert.Equal(t, req.Header.Get(k), got[0].Header.Get(k), k)
	}
	assert.Equal(t, "10", got[0].Header.Get("Content-Length"))
	assert.Empty(t, got[0].Header.Get("X-Forwarded-For"))

	reqs := p.Requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, Request{Seq: 1, Ordinal: 1, Method: "PUT", Route: RouteBlobPut, Path: "/devstoreaccount1/checkpoints/dir/a b.json",
		QueryKeys: []string{"comp", "sig", "sv"}, Arrived: t0, RequestID: "upstream-id-1", Status: 202, Rule: -1,
		BodyDigest: sha([]byte("checkpoint")), BodySize: 10}, reqs[0])

	// A tampered signature fails at the upstream: the check is real.
	req, _ = http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "SharedKey devstoreaccount1:bogus")
	resp, err = c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 403, resp.StatusCode)
	assert.Equal(t, mustURL(t, up.URL), p.Upstream())
}

func TestProxyInjects(t *testing.T) {
	up := newUpstream(t)
	script := NewScript().
		Add(RouteBlobGet, Throttle(RetryAfterDate(RFC850, time.Second)), MatchPath("/devstoreaccount1/checkpoints/"), Times(1)).
		Add(RouteBlobPut, ConnectionReset(), Nth(1)).
		Add(RouteOther, Status(503), Method("DELETE"))
	p := NewProxy(mustURL(t, up.URL), script, fixedClock())
	t.Cleanup(func() { _ = p.Close() })
	base, err := p.Start()
	require.NoError(t, err)
	c := newClient(t, nil)

	resp, body := do(t, c, "GET", base+"/devstoreaccount1/checkpoints/source.json", nil)
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, []string{"Sunday, 06-Nov-94 08:49:41 GMT"}, resp.Header.Values("Retry-After"))
	assert.Contains(t, string(body), "<Code>TooManyRequests</Code>")
	assert.Equal(t, "Sun, 06 Nov 1994 08:49:40 GMT", resp.Header.Get("Date"), "an injected answer has the fake's Date")
	assert.NotEmpty(t, resp.Header.Get("x-ms-request-id"))
	assert.Empty(t, up.seen(), "an injected 429 never reaches the upstream")

	resp, _ = do(t, c, "GET", base+"/devstoreaccount1/checkpoints/source.json", nil)
	assert.Equal(t, 202, resp.StatusCode, "the rule fired once; then forwarded")
	resp, _ = do(t, c, "GET", base+"/devstoreaccount1/other/source.json", nil)
	assert.Equal(t, 202, resp.StatusCode, "another container is not matched")
	resp, _ = do(t, c, "PUT", base+"/devstoreaccount1/checkpoints?restype=container", nil)
	assert.Equal(t, 202, resp.StatusCode, "container creation is route other")

	resp, err = c.Post(base+"/devstoreaccount1/checkpoints/x", "text/plain", strings.NewReader("x"))
	require.NoError(t, err, "POST is not blob.put")
	resp.Body.Close()
	req, _ := http.NewRequest("PUT", base+"/devstoreaccount1/checkpoints/x", strings.NewReader("x"))
	_, err = c.Do(req)
	assert.True(t, errors.Is(err, syscall.ECONNRESET), "%v", err)

	resp, _ = do(t, c, "DELETE", base+"/devstoreaccount1/checkpoints/x", nil)
	assert.Equal(t, 503, resp.StatusCode)

	assert.Len(t, up.seen(), 4)
	assert.Equal(t, []int{429, 202, 202, 202, 202, 0, 503}, statusesOf(p.Requests()))
	assert.Equal(t, []string{"blob.get", "blob.get", "blob.get", "other", "other", "blob.put", "other"}, routesOf(p.Requests()))
}

func statusesOf(reqs []Request) []int {
	var out []int
	for _, r := range reqs {
		out = append(out, r.Status)
	}
	return out
}

func TestProxyUpstreamDown(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	dead := up.URL
	up.Close()
	p := NewProxy(mustURL(t, dead), nil)
	t.Cleanup(func() { _ = p.Close() })
	resp, body := do(t, newClient(t, p.Transport()), "GET", "http://fake.test/indexes/x", nil)
	assert.Equal(t, 502, resp.StatusCode)
	assert.Contains(t, string(body), `"BadGateway"`)
	assert.Equal(t, resp.Header.Get("x-ms-request-id"), resp.Header.Get("request-id"))
	assert.Equal(t, 502, p.Requests()[0].Status)
	assert.Equal(t, resp.Header.Get("x-ms-request-id"), p.Requests()[0].RequestID)
}

// TestProxySlowBodySynctest: a proxy in front of another fake, both
// in-process, in a bubble: the upstream's body trickles in fake time.
func TestProxySlowBodySynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := New()
		defer up.Close()
		up.PutBlob("c", "b", []byte("12345"))
		p := NewProxy(mustURL(t, "http://upstream.test"), nil, WithUpstreamTransport(up.Transport()))
		defer p.Close()
		p.Script().Add(RouteBlobGet, SlowBody(2, time.Second), Nth(1))
		p.Script().Add(RouteBlobGet, StalledBody(), Nth(2))
		c := &http.Client{Transport: p.Transport()}

		start := time.Now()
		resp, err := c.Get("http://proxy.test/c/b")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, "12345", string(body))
		assert.Equal(t, 3*time.Second, time.Since(start), "chunks of 2, 2, 1 bytes")
		assert.Equal(t, up.Requests()[0].RequestID, p.Requests()[0].RequestID)

		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://proxy.test/c/b", nil)
		start = time.Now()
		resp, err = c.Do(req)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		_, err = io.ReadAll(resp.Body)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		resp.Body.Close()
		assert.Equal(t, 4*time.Second, time.Since(start))
	})
}

// TestProxyStalledLoopback: the stalled body through a real proxy sends the
// headers first.
func TestProxyStalledLoopback(t *testing.T) {
	up := newUpstream(t)
	p := NewProxy(mustURL(t, up.URL), nil)
	t.Cleanup(func() { _ = p.Close() })
	p.Script().Add(RouteBlobGet, StalledBody())
	base, err := p.Start()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/c/b", nil)
	resp, err := newClient(t, nil).Do(req)
	require.NoError(t, err, "the headers arrive before the stall")
	assert.Equal(t, 202, resp.StatusCode)
	_, err = io.ReadAll(resp.Body)
	assert.Error(t, err)
	resp.Body.Close()
}

func TestNewProxyNil(t *testing.T) {
	assert.Panics(t, func() { NewProxy(nil, nil) })
}

// TestProxyInProcessToNetwork: the in-process transport in front of a proxy
// whose upstream is a real listener.
func TestProxyInProcessToNetwork(t *testing.T) {
	up := newUpstream(t)
	p := NewProxy(mustURL(t, up.URL), nil)
	t.Cleanup(func() { _ = p.Close() })
	resp, body := do(t, newClient(t, p.Transport()), "POST", "http://proxy.test/files?x=1", []byte("abc"))
	assert.Equal(t, 202, resp.StatusCode)
	assert.Equal(t, "upstream body for /files", string(body))
	got := up.seen()
	require.Len(t, got, 1)
	assert.Equal(t, "abc", got[0].Body)
	assert.Equal(t, "x=1", got[0].RawQuery)
	assert.Equal(t, RouteFileUpload, p.Requests()[0].Route)
}

// TestProxyLedgerIDs: a forwarded answer without a request ID leaves the
// ledger's empty; the fake's own answers have the fake's.
func TestProxyLedgerIDs(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	p := NewProxy(mustURL(t, up.URL), nil)
	t.Cleanup(func() { _ = p.Close() })
	p.Script().Add(RouteFileList, Status(500), Nth(2))
	c := newClient(t, p.Transport())
	resp, _ := do(t, c, "GET", "http://proxy.test/files", nil)
	assert.Empty(t, resp.Header.Get("x-ms-request-id"), "forwarded unchanged")
	resp, _ = do(t, c, "GET", "http://proxy.test/files", nil)
	assert.Equal(t, 500, resp.StatusCode)
	reqs := p.Requests()
	assert.Empty(t, reqs[0].RequestID)
	assert.Equal(t, resp.Header.Get("x-ms-request-id"), reqs[1].RequestID)
	assert.NotEmpty(t, reqs[1].RequestID)
}

// TestProxyAbandoned: a request its client abandons while the upstream
// holds it is recorded as abandoned, status 0, not as the proxy's 502.
func TestProxyAbandoned(t *testing.T) {
	arrived := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // holds the request until the proxy gives up on it
	}))
	t.Cleanup(up.Close)
	done := make(chan Request, 1)
	p := NewProxy(mustURL(t, up.URL), nil, WithObserver(func(r Request) { done <- r }))
	t.Cleanup(func() { _ = p.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-arrived; cancel() }()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://proxy.test/c/b", nil)
	// The client sees its cancellation, or the empty answer the proxy
	// leaves when both end at once: what counts is the ledger.
	if resp, err := newClient(t, p.Transport()).Do(req); err == nil {
		resp.Body.Close()
	}
	select {
	case r := <-done:
		assert.Equal(t, OutcomeAbandoned, r.Outcome)
		assert.Equal(t, 0, r.Status)
		assert.Empty(t, r.RequestID)
	case <-time.After(5 * time.Second):
		t.Fatal("the abandoned request never finished in the ledger")
	}
	reqs := p.Requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, []int{0}, statusesOf(reqs))
	assert.Equal(t, OutcomeAbandoned, reqs[0].Outcome)

	// The upstream down, with the client still waiting: a 502, no outcome.
	up.Close()
	resp, _ := do(t, newClient(t, p.Transport()), "GET", "http://proxy.test/c/b", nil)
	assert.Equal(t, 502, resp.StatusCode)
	<-done
	assert.Equal(t, "", p.Requests()[1].Outcome)
	assert.Equal(t, 502, p.Requests()[1].Status)
}
