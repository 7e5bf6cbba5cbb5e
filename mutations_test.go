package readrecovery

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ownership-needs-ack: the tries of one operation are one mutation with
// its attempts in order, owned when any attempt got a 2xx: azcore's 503,
// 503, 201 on one PUT (one WithOperation mark, or one client request ID).
func TestOneOperationIsOneMutation(t *testing.T) {
	for _, tc := range []struct {
		name string
		mark func(ctx context.Context, req *http.Request) *http.Request
	}{
		{"WithOperation", func(ctx context.Context, req *http.Request) *http.Request { return req }},
		{"x-ms-client-request-id in any case", func(ctx context.Context, req *http.Request) *http.Request {
			req.Header["x-ms-client-request-id"] = []string{"crid-7"}
			return req
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(503, "x-ms-request-id", "a1"), reply(503, "x-ms-request-id", "a2"), reply(201, "x-ms-request-id", "a3")))
			tr := New(srv)
			b := NewBudget("index-a")
			ctx := WithBudget(context.Background(), b)
			if tc.name == "WithOperation" {
				ctx = WithOperation(ctx)
			}
			for range 3 {
				resp, err := tr.RoundTrip(tc.mark(ctx, mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}")))
				require.NoError(t, err)
				drain(resp)
			}
			r := b.Report()
			require.Len(t, r.Mutations, 3)
			for i, m := range r.Mutations {
				assert.Equal(t, [3]any{1, i + 1, Owned}, [3]any{m.Request, m.Attempt, m.Ownership}, "attempt %d", i+1)
			}
			assert.Equal(t, []int{503, 503, 201}, []int{r.Mutations[0].StatusCode, r.Mutations[1].StatusCode, r.Mutations[2].StatusCode})
			assert.Equal(t, Owned, r.Ownership)
			assert.Contains(t, r.String(), "mutations=1 ownership=owned")
		})
	}
	t.Run("two operations are two mutations", func(t *testing.T) {
		srv := newScript(sequenceOf(reply(503), reply(201)))
		tr := New(srv)
		b := NewBudget("s")
		ctx := WithBudget(context.Background(), b)
		for _, body := range []string{"one", "two"} {
			resp, err := tr.RoundTrip(mutation(t, WithOperation(ctx), http.MethodPut, base+"/x", body))
			require.NoError(t, err)
			drain(resp)
		}
		r := b.Report()
		require.Len(t, r.Mutations, 2)
		assert.Equal(t, [2]int{1, 2}, [2]int{r.Mutations[0].Request, r.Mutations[1].Request})
		assert.Equal(t, Unproven, r.Mutations[0].Ownership)
		assert.Equal(t, Owned, r.Mutations[1].Ownership)
	})
}

// ownership-needs-ack: only a successful read sent after a mutation was
// sent observes it; a GET in flight when the PUT was sent, answered after
// it, does not.
func TestReadSentBeforeMutationNeverObserves(t *testing.T) {
	getSent, putDone := make(chan struct{}), make(chan struct{})
	srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet {
			close(getSent)
			<-putDone // answered only after the PUT's outcome
			return reply(200)(req), nil
		}
		return nil, context.DeadlineExceeded // the PUT: no response, outcome unknown
	})
	tr := New(srv)
	b := NewBudget("index-a")
	ctx := WithBudget(context.Background(), b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		if assert.NoError(t, err) {
			drain(resp)
		}
	}()
	<-getSent
	_, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}"))
	require.Error(t, err)
	close(putDone)
	<-done
	r := b.Report()
	assert.Equal(t, Unproven, r.Ownership, "the read was sent before the PUT")
	require.Len(t, r.SuccessfulReads, 1)

	// A read sent after the PUT observes it.
	srv.handle = sequenceOf(reply(200))
	resp, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
	require.NoError(t, err)
	drain(resp)
	assert.Equal(t, Observed, b.Report().Ownership)
}
