package readrecovery

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repeat-guard: without a Budget, the same *http.Request that met 429 as a
// mutation is refused when it is handed to the transport again (a caller's
// loop, go-retryablehttp rewinding GetBody), before the network and with
// the 429's status and request ID; a new request with the same bytes is the
// caller's decision and is sent; a read is never held.
func TestSameRequestRefusedWithoutBudget(t *testing.T) {
	srv := newScript(sequenceOf(reply(429, "Retry-After", "1", "x-ms-request-id", "put-429"), reply(201), reply(429), reply(200)))
	tr := New(srv)
	ctx := context.Background()
	req := mutation(t, ctx, http.MethodPut, base+"/indexes/a", `{"a":1}`)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, 429, resp.StatusCode, "its 429 passes through untouched")
	drain(resp)

	// go-retryablehttp's way: rewind the body through GetBody, send the
	// same request object again.
	body, err := req.GetBody()
	require.NoError(t, err)
	req.Body = body
	_, err = tr.RoundTrip(req)
	require.ErrorIs(t, err, ErrRequestRefused)
	var se *StopError
	require.True(t, errors.As(err, &se))
	assert.Equal(t, StopRepeatRefused, se.Reason)
	assert.Equal(t, 429, se.StatusCode)
	assert.Equal(t, "put-429", se.RequestID)
	require.Len(t, srv.Hits(), 1, "refused before network access")

	// A new request the caller builds is the caller's decision.
	resp, err = tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", `{"a":1}`))
	require.NoError(t, err)
	assert.Equal(t, 201, resp.StatusCode)
	drain(resp)

	// A GET that met 429 is not remembered: sent again, it goes.
	g := get(t, ctx, base+"/indexes/a")
	resp, err = tr.RoundTrip(g)
	require.NoError(t, err)
	drain(resp)
	resp, err = tr.RoundTrip(g)
	require.NoError(t, err)
	drain(resp)
	assert.Equal(t, []string{"PUT", "PUT", "GET", "GET"}, methodsOf(srv.Hits()))
}

// repeat-guard: the transport holds a throttled request weakly: once the
// caller drops 1,000 of them, their entries go.
func TestThrottledRequestsAreHeldWeakly(t *testing.T) {
	tr := New(newScript(func(int, *http.Request) (*http.Response, error) {
		return reply(429, "Retry-After", "1")(nil), nil
	}))
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = mutation(t, context.Background(), http.MethodPost, base+"/files", "x")
		resp, err := tr.RoundTrip(reqs[i])
		require.NoError(t, err)
		drain(resp)
	}
	runtime.GC()
	require.Equal(t, int64(1000), tr.throttled.len(), "held while the caller holds them")
	runtime.KeepAlive(reqs)
	reqs = nil
	for i := 0; i < 200 && tr.throttled.len() > 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	assert.Zero(t, tr.throttled.len(), "every entry went with its request")
}

func methodsOf(hs []hit) []string {
	var ms []string
	for _, h := range hs {
		ms = append(ms, h.Method)
	}
	return ms
}
