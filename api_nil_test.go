package readrecovery

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nilJournal is a Journal implementation whose nil pointer is a typed nil.
type nilJournal struct{ hookLog }

// Every public function and method of the package with zero values, nil
// arguments and typed nils: a clear result or error, never a panic.
func TestPublicAPIZeroAndNil(t *testing.T) {
	ok := newScript(sequenceOf(reply(200)))
	var nilCtx context.Context
	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"New(nil) and New with nil options", func(t *testing.T) {
			require.NotNil(t, New(nil, nil, WithTracerProvider(nil), WithMeterProvider(nil), WithLogger(nil), withClock(nil)))
		}},
		{"NewClient with nil options", func(t *testing.T) {
			c := NewClient(nil)
			require.NotNil(t, c.Transport)
			require.NotNil(t, c.CheckRedirect)
		}},
		{"nil *Transport: RoundTrip refuses a nil request, CloseIdleConnections is a no-op", func(t *testing.T) {
			var tr *Transport
			_, err := tr.RoundTrip(nil)
			require.ErrorIs(t, err, errNilRequest)
			tr.CloseIdleConnections()
		}},
		{"zero Transport: RoundTrip(nil)", func(t *testing.T) {
			var tr Transport
			_, err := tr.RoundTrip(nil)
			require.ErrorIs(t, err, errNilRequest)
		}},
		{"a request with a nil URL after a throttled mutation", func(t *testing.T) {
			srv := newScript(sequenceOf(reply(429, "Retry-After", "1")))
			ctx := WithBudget(context.Background(), NewBudget("s"))
			resp, err := New(srv).RoundTrip(mutation(t, ctx, http.MethodPut, base+"/a", "x"))
			require.NoError(t, err)
			drain(resp)
			req := mutation(t, ctx, http.MethodPut, base+"/a", "x")
			req.URL = nil
			_, err = New(srv).RoundTrip(req)
			require.ErrorIs(t, err, errNilURL)
			assert.Len(t, srv.Hits(), 1)
		}},
		{"a request with a nil URL and a nil Header, with an operation", func(t *testing.T) {
			req := &http.Request{Method: http.MethodPost, Header: nil}
			req = req.WithContext(WithOperation(context.Background()))
			_, err := New(ok).RoundTrip(req)
			require.ErrorIs(t, err, errNilURL)
		}},
		{"a nil Header with a Budget", func(t *testing.T) {
			u, _ := url.Parse(base + "/x")
			req := (&http.Request{Method: http.MethodPut, URL: u}).WithContext(WithBudget(context.Background(), NewBudget("s")))
			resp, err := New(newScript(sequenceOf(reply(429)))).RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, 429, resp.StatusCode)
		}},
		{"a nil context panics as the context package's does; BudgetFrom(nil) is nil", func(t *testing.T) {
			const msg = "cannot create context from nil parent"
			assert.PanicsWithValue(t, msg, func() { _ = context.WithValue(nilCtx, stateKey{}, nil) }, "the context package's own")
			for name, with := range map[string]func(){
				"WithBudget":         func() { WithBudget(nilCtx, NewBudget("s")) },
				"WithBudget, nil b":  func() { WithBudget(nilCtx, nil) },
				"WithQueueRetry":     func() { WithQueueRetry(nilCtx) },
				"WithJournal, nil j": func() { WithJournal(nilCtx, nil) },
				"WithOperation":      func() { WithOperation(nilCtx) },
			} {
				assert.PanicsWithValue(t, msg, with, name)
			}
			assert.Nil(t, BudgetFrom(nilCtx))
		}},
		{"nil and typed-nil Journal", func(t *testing.T) {
			var j *nilJournal
			ctx := WithJournal(context.Background(), j)
			assert.Nil(t, stateFrom(ctx), "a typed nil is no journal")
			resp, err := New(ok).RoundTrip(get(t, ctx, base+"/x"))
			require.NoError(t, err)
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, context.Background(), WithJournal(context.Background(), nil))
		}},
		{"nil and zero Budget", func(t *testing.T) {
			var b *Budget
			assert.Equal(t, Report{}, b.Report())
			assert.Equal(t, "", b.Name())
			assert.Equal(t, context.Background(), WithBudget(context.Background(), nil))
			var z Budget
			assert.Equal(t, "", z.Name())
			assert.Equal(t, 0, z.Report().Requests)
			resp, err := New(ok).RoundTrip(get(t, WithBudget(context.Background(), &z), base+"/x"))
			require.NoError(t, err)
			drain(resp)
			assert.Equal(t, 1, z.Report().Requests)
		}},
		{"NewBudget with nil and out-of-range options", func(t *testing.T) {
			b := NewBudget("", nil, MaxRequests(-1), MaxTotal(-time.Second), MaxWait(-1))
			l := b.s.limits
			assert.Equal(t, []any{200, 60 * time.Second, 30 * time.Second}, []any{l.maxRequests(), l.maxTotal(), l.maxWait()})
		}},
		{"ParseRetryAfter with a nil header and a zero time", func(t *testing.T) {
			ra, timing, diag := ParseRetryAfter(nil, time.Time{})
			assert.Equal(t, RetryAfter{Kind: RetryAfterMissing}, ra)
			assert.Nil(t, timing)
			assert.NotEmpty(t, diag)
		}},
		{"nil and zero StopError", func(t *testing.T) {
			var se *StopError
			assert.NotEmpty(t, se.Error())
			assert.False(t, errors.Is(se, ErrSequenceStopped))
			assert.Nil(t, se.Unwrap())
			assert.NotEmpty(t, (&StopError{}).Error())
		}},
		{"zero Report, WaitRecord and WindowRecord print and marshal", func(t *testing.T) {
			assert.NotEmpty(t, Report{}.String())
			_, err := Report{}.MarshalJSON()
			require.NoError(t, err)
			_, err = WaitRecord{}.MarshalJSON()
			require.NoError(t, err)
			_, err = WindowRecord{}.MarshalJSON()
			require.NoError(t, err)
			assert.Equal(t, "", Report{}.LogValue().Group()[0].Value.String())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic: %v", r)
				}
			}()
			tc.run(t)
		})
	}
}

// The zero Transport sends as New(nil) does: with a go-cleanhttp pooled
// transport (one for every zero Transport), not http.DefaultTransport.
func TestZeroTransportBase(t *testing.T) {
	var a, b Transport
	base, ok := a.baseRT().(*http.Transport)
	require.True(t, ok)
	assert.NotSame(t, http.DefaultTransport, base)
	assert.Same(t, base, b.baseRT())
	_, ok = New(nil).base.(*http.Transport)
	assert.True(t, ok)
	assert.Equal(t, base.MaxIdleConnsPerHost, New(nil).base.(*http.Transport).MaxIdleConnsPerHost, "the same go-cleanhttp settings")
}
