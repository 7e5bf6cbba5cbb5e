package readrecovery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
	assert.Equal(t, 1, tr.guard.len(), "the throttled PUT's one identity (its request object); the GET's 429 entered none")
}

func methodsOf(hs []hit) []string {
	var ms []string
	for _, h := range hs {
		ms = append(ms, h.Method)
	}
	return ms
}

// repeat-guard: the one table, identity by identity. Each row enters a
// mutation's 429 and asks about another mutation: which identity refuses
// it, or none.
func TestRepeatGuardTable(t *testing.T) {
	const u = base + "/indexes/a"
	seqA, seqB := NewBudget("a"), NewBudget("b")
	inA := WithBudget(context.Background(), seqA)
	inB := WithBudget(context.Background(), seqB)
	bg := context.Background()
	op := WithOperation(inA)
	withID := func(req *http.Request, key, id string) *http.Request { req.Header[key] = []string{id}; return req }
	noBody := func(ctx context.Context, method, url string) *http.Request {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		require.NoError(t, err)
		return req
	}
	shallow := func(f func(*http.Request)) func(*http.Request) *http.Request {
		return func(r *http.Request) *http.Request { cp := *r; f(&cp); return &cp }
	}
	for _, tc := range []struct {
		name  string
		first func() *http.Request
		again func(first *http.Request) *http.Request
		want  guardKind // 0: not a repeat
	}{
		{"request object: the same one, no Budget", func() *http.Request { return mutation(t, bg, "PUT", u, "x") },
			func(f *http.Request) *http.Request { return f }, guardRequest},
		{"request object: http.Client's copy for a nil Header", func() *http.Request { return mutation(t, bg, "PUT", u, "x") },
			shallow(func(r *http.Request) { r.Header = http.Header{} }), guardRequest},
		{"request object: http.Client's copy for userinfo (Authorization added)", func() *http.Request { return mutation(t, bg, "PUT", "https://u:p@acct.example/a", "x") },
			shallow(func(r *http.Request) { r.Header = http.Header{"Authorization": {"Basic dTpw"}} }), guardRequest},
		{"request object: http.Client's copy for a Timeout (another context)", func() *http.Request { return mutation(t, bg, "PUT", u, "x") },
			func(f *http.Request) *http.Request { return f.WithContext(context.WithoutCancel(bg)) }, guardRequest},
		{"request object: its URL changed in place is another request", func() *http.Request { return mutation(t, bg, "PUT", u, "x") },
			func(f *http.Request) *http.Request { f.URL.Path = "/indexes/b"; return f }, 0},
		{"request object: a Clone (a new URL) without a Budget is the caller's new request", func() *http.Request { return mutation(t, bg, "PUT", u, "x") },
			func(f *http.Request) *http.Request { return f.Clone(bg) }, 0},
		{"client request ID: the same, lower-case key, other bytes, no Budget", func() *http.Request { return withID(mutation(t, bg, "PUT", u, "x"), "X-Ms-Client-Request-Id", "c1") },
			func(*http.Request) *http.Request {
				return withID(mutation(t, bg, "PUT", u, "y"), "x-ms-client-request-id", "c1")
			}, guardClientID},
		{"client request ID: another URL", func() *http.Request { return withID(mutation(t, bg, "PUT", u, "x"), "X-Ms-Client-Request-Id", "c1") },
			func(*http.Request) *http.Request {
				return withID(mutation(t, bg, "PUT", u+"x", "x"), "X-Ms-Client-Request-Id", "c1")
			}, 0},
		{"client request ID: another method", func() *http.Request { return withID(mutation(t, bg, "PUT", u, "x"), "X-Ms-Client-Request-Id", "c1") },
			func(*http.Request) *http.Request {
				return withID(mutation(t, bg, "POST", u, "x"), "X-Ms-Client-Request-Id", "c1")
			}, 0},
		{"operation: a later try, another URL and bytes", func() *http.Request { return mutation(t, op, "PUT", u, "x") },
			func(*http.Request) *http.Request { return mutation(t, op, "POST", u+"/other", "y") }, guardOperation},
		{"operation: another operation", func() *http.Request { return mutation(t, op, "PUT", u, "x") },
			func(*http.Request) *http.Request { return mutation(t, WithOperation(inA), "PUT", u, "y") }, 0},
		{"bytes: the same within the sequence", func() *http.Request { return mutation(t, inA, "PUT", u, "x") },
			func(*http.Request) *http.Request { return mutation(t, inA, "PUT", u, "x") }, guardBytes},
		{"bytes: the same in another sequence", func() *http.Request { return mutation(t, inA, "PUT", u, "x") },
			func(*http.Request) *http.Request { return mutation(t, inB, "PUT", u, "x") }, 0},
		{"bytes: the same without a Budget", func() *http.Request { return mutation(t, bg, "PUT", u, "x") },
			func(*http.Request) *http.Request { return mutation(t, bg, "PUT", u, "x") }, 0},
		{"bytes: other bytes", func() *http.Request { return mutation(t, inA, "PUT", u, "x") },
			func(*http.Request) *http.Request { return mutation(t, inA, "PUT", u, "y") }, 0},
		{"bytes: another URL", func() *http.Request { return mutation(t, inA, "PUT", u, "x") },
			func(*http.Request) *http.Request { return mutation(t, inA, "PUT", u+"x", "x") }, 0},
		{"bytes: other client request IDs are two operations", func() *http.Request { return withID(mutation(t, inA, "PUT", u, "x"), "X-Ms-Client-Request-Id", "c1") },
			func(*http.Request) *http.Request {
				return withID(mutation(t, inA, "PUT", u, "x"), "X-Ms-Client-Request-Id", "c2")
			}, 0},
		{"bytes: one client request ID missing", func() *http.Request { return withID(mutation(t, inA, "PUT", u, "x"), "X-Ms-Client-Request-Id", "c1") },
			func(*http.Request) *http.Request { return mutation(t, inA, "PUT", u, "x") }, guardBytes},
		{"bytes: no body either", func() *http.Request { return noBody(inA, "DELETE", u) },
			func(*http.Request) *http.Request { return noBody(inA, "DELETE", u) }, guardBytes},
		{"bytes: a body and none", func() *http.Request { return noBody(inA, "PUT", u) },
			func(*http.Request) *http.Request { return mutation(t, inA, "PUT", u, "x") }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g repeatGuard
			first := tc.first()
			g.enter(newMutationID(first, stateFrom(first.Context())), throttledBy{429, "rid"}, nil)
			again := tc.again(first)
			by, kind, ok := g.lookup(again.Context(), newMutationID(again, stateFrom(again.Context())))
			assert.Equal(t, tc.want, kind)
			assert.Equal(t, tc.want != 0, ok)
			if ok {
				assert.Equal(t, throttledBy{429, "rid"}, by)
			}
		})
	}
}

// repeat-guard: a read is never entered, so never refused, whatever met
// 429 before it (the mutant that entered GETs survived every test).
func TestRepeatGuardNeverHoldsReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "1"), reply(429, "Retry-After", "1"), reply(200)))
		tr := New(srv)
		ctx := WithOperation(context.Background())
		g := get(t, ctx, base+"/a")
		for range 3 {
			resp, err := tr.RoundTrip(g)
			require.NoError(t, err)
			drain(resp)
		}
		assert.Equal(t, []string{"GET", "GET", "GET"}, methodsOf(srv.Hits()))
		assert.Zero(t, tr.guard.len())
	})
}

// repeat-guard: the table holds at most guardEntries identities; the
// oldest go first.
func TestRepeatGuardIsBounded(t *testing.T) {
	var g repeatGuard
	reqs := make([]*http.Request, guardEntries+10)
	for i := range reqs {
		reqs[i] = mutation(t, context.Background(), http.MethodPost, base+"/files", "x")
		g.enter(newMutationID(reqs[i], nil), throttledBy{429, ""}, nil)
	}
	assert.Equal(t, guardEntries, g.len())
	assert.Len(t, g.index, guardEntries)
	_, _, ok := g.lookup(context.Background(), newMutationID(reqs[0], nil))
	assert.False(t, ok, "the oldest identity went")
	_, _, ok = g.lookup(context.Background(), newMutationID(reqs[len(reqs)-1], nil))
	assert.True(t, ok, "the newest is held")
}

// repeat-guard, the probe's reproductions: an http.Client looping Do on
// one throttled PUT, without a Budget; net/http hands the transport a new
// copy each time (a nil Header, userinfo in the URL, a Timeout). The
// loopback server sees exactly one PUT.
func TestClientCopiesRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		mk      func(url string) *http.Request
	}{
		{"nil Header", 0, func(u string) *http.Request {
			req := mutation(t, context.Background(), http.MethodPut, u, "x")
			req.Header = nil
			return req
		}},
		{"userinfo in the URL", 0, func(u string) *http.Request {
			return mutation(t, context.Background(), http.MethodPut, strings.Replace(u, "http://", "http://user:pw@", 1), "x")
		}},
		{"client Timeout", time.Minute, func(u string) *http.Request {
			return mutation(t, context.Background(), http.MethodPut, u, "x")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var puts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				puts.Add(1)
				w.Header().Set("Retry-After", "1")
				w.Header().Set("x-ms-request-id", "put-429")
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			defer srv.Close()
			client := &http.Client{Transport: New(nil), Timeout: tc.timeout}
			defer client.CloseIdleConnections()
			req := tc.mk(srv.URL + "/c/a")
			var refused int
			for i := range 3 {
				if i > 0 && req.GetBody != nil {
					body, err := req.GetBody()
					require.NoError(t, err)
					req.Body = body
				}
				resp, err := client.Do(req)
				if err != nil {
					require.ErrorIs(t, err, ErrRequestRefused)
					var se *StopError
					require.True(t, errors.As(err, &se))
					assert.Equal(t, [2]any{429, "put-429"}, [2]any{se.StatusCode, se.RequestID})
					refused++
					continue
				}
				assert.Equal(t, 429, resp.StatusCode)
				drain(resp)
			}
			assert.Equal(t, int32(1), puts.Load(), "the server saw one PUT")
			assert.Equal(t, 2, refused)
		})
	}
}

// neverClosing is a base that answers 429 and never closes the request
// body (http.RoundTripper says it must).
type neverClosing struct{ n atomic.Int32 }

func (b *neverClosing) RoundTrip(req *http.Request) (*http.Response, error) {
	b.n.Add(1)
	return reply(429, "Retry-After", "1")(req), nil
}

// repeat-guard: a base that never closes request bodies costs the next,
// different PUT to the same URL at most bodyCloseWait, even with a context
// that never ends (the probe saw 60 s and total-exhausted, and a hang with
// context.WithoutCancel).
func TestNonClosingBaseIsBounded(t *testing.T) {
	for _, ctxOf := range []func(context.Context) context.Context{
		func(c context.Context) context.Context { return c },
		context.WithoutCancel,
	} {
		synctest.Test(t, func(t *testing.T) {
			base := &neverClosing{}
			tr := New(base)
			ctx := ctxOf(WithBudget(context.Background(), NewBudget("s", MaxWait(5*time.Second))))
			resp, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, "https://acct.example/c/a", "one"))
			require.NoError(t, err)
			require.Equal(t, 429, resp.StatusCode)
			t0 := time.Now()
			resp, err = tr.RoundTrip(mutation(t, ctx, http.MethodPut, "https://acct.example/c/a", "two"))
			require.NoError(t, err, "a different PUT is not a repeat")
			drain(resp)
			// The guard's bound (1 s), within which the window (1 s) ended too.
			assert.Equal(t, time.Second, bodyCloseWait)
			assert.Equal(t, bodyCloseWait, time.Since(t0))
			assert.Equal(t, int32(2), base.n.Load())
		})
	}
}

// repeat-guard: the bound is one for every throttled body a new mutation
// waits for: three bodies the base never closed cost it 1 s, not 3 s.
func TestBodyCloseWaitIsOneBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g repeatGuard
		ctx := WithBudget(context.Background(), NewBudget("s"))
		never := make(chan struct{})
		for _, body := range []string{"a", "b", "c"} {
			req := mutation(t, ctx, http.MethodPut, base+"/c/x", body)
			g.enter(newMutationID(req, stateFrom(ctx)), throttledBy{429, "r"}, never)
		}
		t0 := time.Now()
		next := mutation(t, ctx, http.MethodPut, base+"/c/x", "a")
		_, _, ok := g.lookup(ctx, newMutationID(next, stateFrom(ctx)))
		assert.False(t, ok, "the bytes could not be read: told apart without them")
		assert.Equal(t, bodyCloseWait, time.Since(t0))
		close(never)
		_, kind, ok := g.lookup(ctx, newMutationID(mutation(t, ctx, http.MethodPut, base+"/c/x", "a"), stateFrom(ctx)))
		assert.True(t, ok, "once the base closed them, the same bytes are a repeat")
		assert.Equal(t, guardBytes, kind)
	})
}
