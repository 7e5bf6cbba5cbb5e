package bench

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// okBody is the body of every 200 of the benchmark server: a small JSON
// page, as a Search GET or a File inventory page would start.
var okBody = []byte(`{"value":[{"id":"f-0001","name":"a.bin","bytes":1024}],"next":""}` + "\n")

// throttleBody is the body of every 429, as Azure Search sends it.
var throttleBody = []byte(`{"error":{"code":"TooManyRequests","message":"throttled"}}` + "\n")

const benchRequestID = "0f8c2a1e-601e-0051-3b2f-7f5e8f000000"

// benchServer is the one loopback server of the benchmarks: httptest over
// HTTP/1.1 with keep-alive (httptest does not enable HTTP/2 unless told),
// or over TLS, with or without HTTP/2 (newBenchServerTLS).
//
//	/ok             200 and okBody
//	/recover        alternately 429 (Retry-After: 0) and 200: a client that
//	                sends one request at a time sees 429 then 200
//	/recover1       the same with Retry-After: 1
//	/seq/{s}/{p}    scenario 3: 200, except a 429 (Retry-After: 0) on the
//	                first request of the page planned for sequence s
//	/burst/...      the throttle burst: inside the window (until
//	                windowEnd) every request meets a 429 whose Retry-After
//	                is the window's remaining whole seconds, rounded up;
//	                after it, 200
//	/block          waits until release is closed, then 200
type benchServer struct {
	srv    *httptest.Server
	toggle atomic.Int64
	hits   atomic.Int64
	conns  atomic.Int64 // connections accepted
	h2     atomic.Int64 // requests that arrived over HTTP/2
	plan   atomic.Pointer[throttlePlan]

	windowEnd atomic.Int64 // unix ns; the burst's window ends then
	inWindow  atomic.Int64 // requests that arrived inside the window
	blocked   atomic.Int64 // requests waiting on /block
	release   atomic.Pointer[chan struct{}]
}

// throttlePlan says which page of each sequence meets a 429 (-1: none) and
// remembers that it did, so that the page's re-send gets its 200.
type throttlePlan struct {
	page  []int
	fired []atomic.Bool
}

func newThrottlePlan(pages []int) *throttlePlan {
	return &throttlePlan{page: pages, fired: make([]atomic.Bool, len(pages))}
}

func newBenchServer(tb testing.TB) *benchServer {
	tb.Helper()
	s := newUnstartedBenchServer()
	s.srv.Start()
	tb.Cleanup(s.srv.Close)
	return s
}

// newBenchServerTLS is the benchmark server over TLS (httptest's own
// certificate), speaking HTTP/2 when h2 is set and HTTP/1.1 otherwise.
func newBenchServerTLS(tb testing.TB, h2 bool) *benchServer {
	tb.Helper()
	s := newUnstartedBenchServer()
	s.srv.EnableHTTP2 = h2
	s.srv.StartTLS()
	tb.Cleanup(s.srv.Close)
	return s
}

// base returns a contender's base transport for this server: newBase,
// trusting the server's certificate when it speaks TLS (go-cleanhttp
// sets ForceAttemptHTTP2, so HTTP/2 is used when the server offers it).
func (s *benchServer) base(conns int) *http.Transport {
	t := newBase(conns)
	if c := s.srv.Certificate(); c != nil {
		pool := x509.NewCertPool()
		pool.AddCert(c)
		t.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return t
}

func newUnstartedBenchServer() *benchServer {
	s := &benchServer{}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	return s
}

func (s *benchServer) url(path string) string { return s.srv.URL + path }

func (s *benchServer) serve(w http.ResponseWriter, r *http.Request) {
	s.hits.Add(1)
	if r.ProtoMajor == 2 {
		s.h2.Add(1)
	}
	throttle, retryAfter := false, "0"
	switch p := r.URL.Path; {
	case p == "/ok":
	case p == "/recover":
		throttle = s.toggle.Add(1)%2 == 1
	case p == "/recover1":
		throttle, retryAfter = s.toggle.Add(1)%2 == 1, "1"
	case strings.HasPrefix(p, "/seq/"):
		throttle = s.planned(p[len("/seq/"):])
	case strings.HasPrefix(p, "/burst/"):
		if left := time.Duration(s.windowEnd.Load() - time.Now().UnixNano()); left > 0 {
			s.inWindow.Add(1)
			throttle, retryAfter = true, strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)
		}
	case p == "/block":
		s.blocked.Add(1)
		<-*s.release.Load()
		s.blocked.Add(-1)
	default:
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json; charset=utf-8"}
	h["X-Ms-Request-Id"] = []string{benchRequestID}
	if throttle {
		h["Retry-After"] = []string{retryAfter}
		h["Content-Length"] = []string{strconv.Itoa(len(throttleBody))}
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write(throttleBody)
		return
	}
	h["Content-Length"] = []string{strconv.Itoa(len(okBody))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(okBody)
}

// planned reports whether "{s}/{p}" is the first request of sequence s's
// planned 429 page.
func (s *benchServer) planned(rest string) bool {
	plan := s.plan.Load()
	if plan == nil {
		return false
	}
	a, b, ok := strings.Cut(rest, "/")
	if !ok {
		return false
	}
	seq, err1 := strconv.Atoi(a)
	page, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || seq < 0 || seq >= len(plan.page) || plan.page[seq] != page {
		return false
	}
	return plan.fired[seq].CompareAndSwap(false, true)
}

// stubTransport answers in-process with a shared 200, without a network, so
// that a benchmark over it measures a decorator's own cost.
type stubTransport struct{ resp http.Response }

func newStub() *stubTransport {
	return &stubTransport{resp: http.Response{
		Status: "200 OK", StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":    {"application/json; charset=utf-8"},
			"X-Ms-Request-Id": {benchRequestID},
		},
		Body:          http.NoBody,
		ContentLength: 0,
	}}
}

// RoundTrip returns a copy of the shared response (one allocation, as a
// real transport returns a fresh *http.Response) tied to req.
func (s *stubTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp := s.resp
	resp.Request = req
	return &resp, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach it.
func (s *stubTransport) CloseIdleConnections() {}
