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
