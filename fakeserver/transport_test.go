package fakeserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTransportSlowBodySynctest: a scripted slow body takes exactly the
// fake duration, and no real time.
func TestTransportSlowBodySynctest(t *testing.T) {
	realStart := time.Now()
	synctest.Test(t, func(t *testing.T) {
		s := New()
		defer s.Close()
		s.PutBlob("c", "b", []byte("0123456789")) // 10 bytes
		s.Script().Add(RouteBlobGet, SlowBody(1, 3*time.Second))
		c := &http.Client{Transport: s.Transport()}

		start := time.Now()
		resp, err := c.Get("http://fake.test/c/b")
		require.NoError(t, err)
		assert.Equal(t, time.Duration(0), time.Since(start), "the headers come at once")
		assert.Equal(t, int64(10), resp.ContentLength)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, "0123456789", string(body))
		assert.Equal(t, 30*time.Second, time.Since(start), "10 chunks, 3 s before each")

		// The ledger's arrival time is the bubble's clock.
		assert.Equal(t, start, s.Requests()[0].Arrived)
	})
	assert.Less(t, time.Since(realStart), 5*time.Second, "fake time, not real time")
}

// TestTransportStalledBodySynctest: a cancelled context ends a stalled body
// at once, and the handler goroutine ends with it.
func TestTransportStalledBodySynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		defer s.Close()
		s.PutBlob("c", "b", []byte("checkpoint"))
		s.Script().Add(RouteBlobGet, StalledBody())
		c := &http.Client{Transport: s.Transport()}

		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://fake.test/c/b", nil)
		resp, err := c.Do(req)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)

		start := time.Now()
		time.AfterFunc(7*time.Second, cancel)
		_, err = io.ReadAll(resp.Body)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 7*time.Second, time.Since(start))
		require.NoError(t, resp.Body.Close())

		// A deadline does the same.
		ctx, cancel2 := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel2()
		req, _ = http.NewRequestWithContext(ctx, "GET", "http://fake.test/c/b", nil)
		resp, err = c.Do(req)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		resp.Body.Close()

		// Closing the body unread ends the handler too.
		resp, err = c.Get("http://fake.test/c/b")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		synctest.Wait()
	})
}

// TestTransportServerCloseEndsBody: Close cuts a stalled body with
// ErrServerClosed (an unexpected EOF) and waits for the handler.
func TestTransportServerCloseEndsBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		s.PutBlob("c", "b", []byte("checkpoint"))
		s.Script().Add(RouteBlobGet, StalledBody())
		c := &http.Client{Transport: s.Transport()}
		resp, err := c.Get("http://fake.test/c/b")
		require.NoError(t, err)
		time.AfterFunc(time.Second, func() { _ = s.Close() })
		_, err = io.ReadAll(resp.Body)
		assert.ErrorIs(t, err, ErrServerClosed)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		resp.Body.Close()
		_, err = c.Get("http://fake.test/c/b")
		assert.ErrorIs(t, err, ErrServerClosed)
	})
}

func TestTransportResponse(t *testing.T) {
	s := newServer(t, fixedClock())
	s.PutBlob("c", "b", []byte("data"))
	rt := s.Transport()

	body := &closeTracker{Reader: strings.NewReader("ignored")}
	req, _ := http.NewRequest("GET", "https://acct.blob.example/c/b?sig=x", body)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, "200 OK", resp.Status)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "HTTP/1.1", resp.Proto)
	assert.Equal(t, 1, resp.ProtoMajor)
	assert.Equal(t, 1, resp.ProtoMinor)
	assert.Equal(t, int64(4), resp.ContentLength)
	assert.Same(t, req, resp.Request)
	assert.NotNil(t, resp.TLS, "an https request gets a TLS state")
	assert.Equal(t, "4", resp.Header.Get("Content-Length"))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "data", string(b))
	require.NoError(t, resp.Body.Close())
	require.NoError(t, resp.Body.Close(), "Close twice is fine")
	assert.True(t, body.closed.Load(), "the request body is closed")
	assert.Equal(t, "/c/b", s.Requests()[0].Path)

	// HEAD: headers, no body.
	req, _ = http.NewRequest("HEAD", "http://fake.test/c/b", nil)
	resp, err = rt.RoundTrip(req)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Empty(t, b)

	// A context already done: no request reaches the server, the body is
	// closed.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	body = &closeTracker{Reader: strings.NewReader("x")}
	req, _ = http.NewRequestWithContext(ctx, "POST", "http://fake.test/files", body)
	_, err = rt.RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, body.closed.Load())
	assert.Len(t, s.Requests(), 2)

	// A request ID per answer, Date from the clock.
	req, _ = http.NewRequest("POST", "http://fake.test/files", bytes.NewReader([]byte("x")))
	resp, err = rt.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 201, resp.StatusCode)
	assert.Equal(t, "Sun, 06 Nov 1994 08:49:40 GMT", resp.Header.Get("Date"))
	assert.Equal(t, s.Requests()[2].RequestID, resp.Header.Get("x-ms-request-id"))

	_, err = rt.RoundTrip(&http.Request{Method: "GET"})
	assert.Error(t, err, "a request without a URL")
}

type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error {
	c.closed.Store(true)
	return nil
}

func TestTransportReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		defer s.Close()
		s.Script().Add(RouteFileUpload, ConnectionReset(), Nth(1))
		c := &http.Client{Transport: s.Transport()}
		_, err := c.Post("http://fake.test/files", "text/plain", strings.NewReader("x"))
		require.Error(t, err)
		assert.True(t, errors.Is(err, syscall.ECONNRESET), "%v", err)
		assert.Equal(t, 0, s.Requests()[0].Status)
		assert.Empty(t, s.Requests()[0].RequestID)
		resp, err := c.Post("http://fake.test/files", "text/plain", strings.NewReader("x"))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 201, resp.StatusCode)
	})
}

// TestTransportContextCancelBeforeHeaders: a handler still reading a slow
// request body is ended by the request's context.
func TestTransportContextCancelBeforeHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		defer s.Close()
		pr, pw := io.Pipe()
		defer pw.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://fake.test/files", pr)
		start := time.Now()
		_, err := s.Transport().RoundTrip(req)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(start))
	})
}

// TestTransportHandlerPanic: a panicking handler fails the round trip; it
// does not crash the test binary. (The fake's own handlers do not panic;
// this guards the in-process plumbing with a broken proxy upstream.)
func TestTransportHandlerPanic(t *testing.T) {
	s := NewProxy(mustURL(t, "http://upstream.test"), nil, WithUpstreamTransport(panicRT{}))
	defer s.Close()
	_, err := s.Transport().RoundTrip(mustRequest(t, "GET", "http://fake.test/c/b"))
	assert.ErrorContains(t, err, "handler aborted")
}

type panicRT struct{}

func (panicRT) RoundTrip(*http.Request) (*http.Response, error) { panic("boom") }
