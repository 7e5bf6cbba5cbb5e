package readrecovery

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sharedStream is a request body as azcore makes one: GetBody seeks the
// very stream the request sends back to its start and returns it, rather
// than a copy. getBodies counts the calls.
type sharedStream struct {
	*bytes.Reader
	getBodies atomic.Int32
}

func (s *sharedStream) Close() error { return nil }

func (s *sharedStream) getBody() (io.ReadCloser, error) {
	s.getBodies.Add(1)
	_, err := s.Seek(0, io.SeekStart)
	return s, err
}

// streamRequest is a mutation whose body is a sharedStream.
func streamRequest(t *testing.T, ctx context.Context, method, url, body string) (*http.Request, *sharedStream) {
	t.Helper()
	s := &sharedStream{Reader: bytes.NewReader([]byte(body))}
	req, err := http.NewRequestWithContext(ctx, method, url, s)
	require.NoError(t, err)
	req.ContentLength = int64(len(body))
	req.GetBody = s.getBody
	return req, s
}

// repeat-guard: a new mutation to the URL of a throttled one, with other
// bytes, is sent, and whole: telling it apart reads its body through a
// GetBody that hands back the stream it sends, which must be rewound.
func TestNewMutationAfter429KeepsItsBody(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if n.Add(1) == 1 {
			w.Header().Set("x-ms-request-id", "first-429")
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	rt := New(nil)
	defer rt.CloseIdleConnections()
	ctx := WithBudget(context.Background(), NewBudget("two uploads"))

	first, s1 := streamRequest(t, ctx, http.MethodPut, srv.URL+"/c/b", "first body")
	resp, err := rt.RoundTrip(first)
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	resp.Body.Close()
	assert.Zero(t, s1.getBodies.Load(), "a 429 reads no body: net/http may still be sending it")

	second, _ := streamRequest(t, ctx, http.MethodPut, srv.URL+"/c/b", "second, other body")
	resp, err = rt.RoundTrip(second)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"first body", "second, other body"}, bodies, "each body reached the server once, whole")

	third, _ := streamRequest(t, ctx, http.MethodPut, srv.URL+"/c/b", "first body")
	_, err = rt.RoundTrip(third)
	require.ErrorIs(t, err, ErrRequestRefused, "the same bytes again are a repeat")
	assert.Len(t, bodies, 2)
}

// repeat-guard: a server that answers 429 before it has read a large body
// (as a gateway does): the transport reads nothing through GetBody while
// net/http may still be writing the body (run with -race), and the same
// request object sent again is refused.
func TestEarly429ReadsNoBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-ms-request-id", "early-429")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	rt := New(nil)
	defer rt.CloseIdleConnections()
	ctx := WithBudget(context.Background(), NewBudget("early"))
	req, s := streamRequest(t, ctx, http.MethodPut, srv.URL+"/c/big", strings.Repeat("x", 4<<20))
	resp, err := rt.RoundTrip(req)
	if err == nil {
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		resp.Body.Close()
	}
	assert.Zero(t, s.getBodies.Load())
	_, err = rt.RoundTrip(req)
	require.ErrorIs(t, err, ErrRequestRefused)
	assert.Zero(t, s.getBodies.Load(), "a repeat of the same object is refused without reading its body")
}
