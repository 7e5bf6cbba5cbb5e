package readrecovery

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repeat-guard: the tries of one operation (WithOperation) after its
// mutation met 429 are refused before network access, with or without a
// Budget; the refusal carries the 429's status and request ID, and a
// sequence the tries belong to goes on.
func TestOperationTriesRefusedAfterMutation429(t *testing.T) {
	for _, withBudget := range []bool{false, true} {
		name := map[bool]string{false: "no budget", true: "budget"}[withBudget]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(sequenceOf(reply(429, "Retry-After", "1", "x-ms-request-id", "put-429"), reply(201), reply(200)))
				tr := New(srv)
				ctx := context.Background()
				var b *Budget
				if withBudget {
					b = NewBudget("index-a")
					ctx = WithBudget(ctx, b)
				}
				op := WithOperation(ctx)
				try, cancel := context.WithCancel(op) // a per-try context, as azcore makes
				defer cancel()

				resp, err := tr.RoundTrip(mutation(t, try, http.MethodPut, base+"/indexes/a", "{}"))
				require.NoError(t, err)
				require.Equal(t, 429, resp.StatusCode)
				drain(resp)

				body := &trackedBody{r: http.NoBody}
				req := mutation(t, try, http.MethodPut, base+"/indexes/a", "{}")
				req.Body = body
				_, err = tr.RoundTrip(req)
				require.ErrorIs(t, err, ErrRequestRefused)
				assert.NotErrorIs(t, err, ErrSequenceStopped)
				var se *StopError
				require.True(t, errors.As(err, &se))
				assert.Equal(t, StopRepeatRefused, se.Reason)
				assert.Equal(t, 429, se.StatusCode)
				assert.Equal(t, "put-429", se.RequestID)
				assert.NotContains(t, err.Error(), "stopped", "a refusal does not say the sequence stopped")
				var nr interface{ NonRetriable() }
				assert.True(t, errors.As(err, &nr))
				assert.True(t, body.closed, "the refused request's body is closed")
				// A GET of the same operation is a later try too.
				_, err = tr.RoundTrip(get(t, op, base+"/indexes/a"))
				require.ErrorIs(t, err, ErrRequestRefused)
				require.Len(t, srv.Hits(), 1, "refused before network access")

				// Another operation is not refused (its own body: the same
				// bytes would repeat the mutation within the sequence).
				resp, err = tr.RoundTrip(mutation(t, WithOperation(ctx), http.MethodPut, base+"/indexes/a", `{"v":2}`))
				require.NoError(t, err)
				assert.Equal(t, 201, resp.StatusCode)
				require.Len(t, srv.Hits(), 2)
				if b != nil {
					assert.Equal(t, StopReason(""), b.Report().Stop, "the sequence goes on")
					assert.Equal(t, 2, b.Report().Requests)
				}
			})
		})
	}
}

// An operation whose GET met 429 is not marked: only a mutation's 429 makes
// later tries repeats.
func TestOperationReadDoesNotMark(t *testing.T) {
	srv := newScript(sequenceOf(reply(429, "Retry-After", "1"), reply(200)))
	tr := New(srv)
	op := WithOperation(context.Background())
	resp, err := tr.RoundTrip(get(t, op, base+"/x"))
	require.NoError(t, err)
	assert.Equal(t, 429, resp.StatusCode, "no budget: the 429 passes through")
	resp, err = tr.RoundTrip(get(t, op, base+"/x"))
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Len(t, srv.Hits(), 2)
}

// repeat-guard: every way a throttled mutation could reach the server again
// within a sequence is refused before network access, with the original
// 429's status and request ID, and the sequence goes on.
func TestRepeatPaths(t *testing.T) {
	const url = base + "/indexes/a"
	for _, tc := range []struct {
		name string
		// first returns the throttled mutation; again the repeat to send
		// after it.
		first func(t *testing.T, ctx context.Context) *http.Request
		again func(t *testing.T, ctx context.Context, first *http.Request) *http.Request
	}{
		{"the same request object after GetBody (a caller's loop, go-retryablehttp)",
			func(t *testing.T, ctx context.Context) *http.Request {
				return mutation(t, ctx, http.MethodPut, url, `{"a":1}`)
			},
			func(t *testing.T, ctx context.Context, first *http.Request) *http.Request {
				body, err := first.GetBody()
				require.NoError(t, err)
				first.Body = body
				return first
			}},
		{"a new request with the same method, URL and bytes",
			func(t *testing.T, ctx context.Context) *http.Request {
				return mutation(t, ctx, http.MethodPut, url, `{"a":1}`)
			},
			func(t *testing.T, ctx context.Context, _ *http.Request) *http.Request {
				return mutation(t, ctx, http.MethodPut, url, `{"a":1}`)
			}},
		{"the same x-ms-client-request-id under a lower-case key, other bytes",
			func(t *testing.T, ctx context.Context) *http.Request {
				req := mutation(t, ctx, http.MethodPut, url, `{"a":1}`)
				req.Header.Set("x-ms-client-request-id", "crid-1")
				return req
			},
			func(t *testing.T, ctx context.Context, _ *http.Request) *http.Request {
				req := mutation(t, ctx, http.MethodPut, url, `{"a":2}`)
				req.Header["x-ms-client-request-id"] = []string{"crid-1"}
				return req
			}},
		{"a mutation without a body, the same method and URL",
			func(t *testing.T, ctx context.Context) *http.Request {
				req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
				return req
			},
			func(t *testing.T, ctx context.Context, _ *http.Request) *http.Request {
				req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
				return req
			}},
		{"a try of the same operation (WithOperation)",
			func(t *testing.T, ctx context.Context) *http.Request {
				return mutation(t, WithOperation(ctx), http.MethodPut, url, `{"a":1}`)
			},
			func(t *testing.T, ctx context.Context, first *http.Request) *http.Request {
				return mutation(t, first.Context(), http.MethodPut, url, `{"a":2}`)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(sequenceOf(reply(429, "Retry-After", "1", "x-ms-request-id", "put-429"), reply(200)))
				tr := New(srv)
				b := NewBudget("index-a")
				ctx := WithBudget(context.Background(), b)
				first := tc.first(t, ctx)
				resp, err := tr.RoundTrip(first)
				require.NoError(t, err)
				require.Equal(t, 429, resp.StatusCode)
				drain(resp)
				_, err = tr.RoundTrip(tc.again(t, ctx, first))
				require.ErrorIs(t, err, ErrRequestRefused)
				assert.NotErrorIs(t, err, ErrSequenceStopped)
				var se *StopError
				require.True(t, errors.As(err, &se))
				assert.Equal(t, [3]any{StopRepeatRefused, 429, "put-429"}, [3]any{se.Reason, se.StatusCode, se.RequestID})
				// The sequence goes on: its readback is sent after the window.
				resp, err = tr.RoundTrip(get(t, ctx, url))
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				hits := srv.Hits()
				require.Len(t, hits, 2, "exactly one mutation at the server")
				assert.Equal(t, []string{first.Method, http.MethodGet}, []string{hits[0].Method, hits[1].Method})
				assert.Equal(t, StopReason(""), b.Report().Stop)
			})
		})
	}
}

// repeat-guard: a new mutation of the same URL with other bytes (and no
// client request ID) is another mutation: sent after the window.
func TestRepeatGuardLetsOtherBytesThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "1"), reply(201)))
		tr := New(srv)
		ctx := WithBudget(context.Background(), NewBudget("s"))
		resp, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/a", "one"))
		require.NoError(t, err)
		drain(resp)
		resp, err = tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/a", "two"))
		require.NoError(t, err)
		assert.Equal(t, 201, resp.StatusCode)
		hits := srv.Hits()
		require.Len(t, hits, 2)
		assert.Equal(t, "two", hits[1].Body)
	})
}
