package readrecovery

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// hit is one request the scripted server saw.
type hit struct {
	Method string
	URL    string
	Header http.Header
	Body   string
	At     time.Time
}

// script is an in-process server: a RoundTripper that answers with the
// response its handler gives for the n-th request (1-based), and keeps a
// ledger of what it saw. Inside a synctest bubble its clock is the bubble's.
type script struct {
	mu     sync.Mutex
	hits   []hit
	handle func(n int, req *http.Request) (*http.Response, error)
}

func newScript(handle func(n int, req *http.Request) (*http.Response, error)) *script {
	return &script{handle: handle}
}

func (s *script) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	s.mu.Lock()
	s.hits = append(s.hits, hit{Method: req.Method, URL: req.URL.String(), Header: req.Header.Clone(), Body: string(body), At: time.Now()})
	n := len(s.hits)
	s.mu.Unlock()
	resp, err := s.handle(n, req)
	if resp != nil {
		resp.Request = req
	}
	return resp, err
}

func (s *script) Hits() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hit(nil), s.hits...)
}

// sequenceOf returns a handler that answers the n-th request with the n-th
// response maker, and the last one after that.
func sequenceOf(rs ...func(*http.Request) *http.Response) func(int, *http.Request) (*http.Response, error) {
	return func(n int, req *http.Request) (*http.Response, error) {
		return rs[min(n, len(rs))-1](req), nil
	}
}

// reply makes a response with status, header pairs and a tracked body.
func reply(status int, kv ...string) func(*http.Request) *http.Response {
	return func(*http.Request) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return &http.Response{
			StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: h, Body: &trackedBody{r: strings.NewReader("body of " + http.StatusText(status))},
		}
	}
}

// trackedBody records whether it was read and closed.
type trackedBody struct {
	r        io.Reader
	mu       sync.Mutex
	read     bool
	closed   bool
	closeErr error
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.read = true
	b.mu.Unlock()
	return b.r.Read(p)
}

func (b *trackedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.closeErr
}

// stalledBody blocks every Read until ctx ends, as net/http's body does when
// the server stops sending.
type stalledBody struct{ ctx context.Context }

func (b stalledBody) Read([]byte) (int, error) {
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}
func (stalledBody) Close() error { return nil }

// get makes a GET with ctx.
func get(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// mutation makes a request with a replayable body.
func mutation(t *testing.T, ctx context.Context, method, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// newTraced returns a Transport over base with a recording tracer provider.
func newTraced(base http.RoundTripper, opts ...Option) (*Transport, *tracetest.SpanRecorder, *trace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := trace.NewTracerProvider(trace.WithSpanProcessor(rec))
	return New(base, append([]Option{WithTracerProvider(tp)}, opts...)...), rec, tp
}

// stopReason returns the StopError's reason, or "".
func stopReason(err error) StopReason {
	var se *StopError
	if errors.As(err, &se) {
		return se.Reason
	}
	return ""
}

func drain(resp *http.Response) string {
	if resp == nil || resp.Body == nil {
		return ""
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}
