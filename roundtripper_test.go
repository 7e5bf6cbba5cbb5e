package readrecovery

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const base = "https://acct.search.windows.net"

// budget-in-context: one delay opportunity per sequence, shared by every page; never per
// page. A 429 on page 2 is waited and re-sent; a 429 on page 4 stops.
func TestOneDelayPerSequenceNotPerPage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			switch n {
			case 2, 5: // page 2's first send, page 4's first send
				return reply(429, "Retry-After", "2", "x-ms-request-id", "rid-"+req.URL.Query().Get("page"))(req), nil
			}
			return reply(200)(req), nil
		})
		tr := New(srv)
		b := NewBudget("inventory")
		ctx := WithBudget(context.Background(), b)
		var statuses []int
		for page := 1; page <= 5; page++ {
			resp, err := tr.RoundTrip(get(t, ctx, base+"/files?page="+string(rune('0'+page))))
			if err != nil {
				require.ErrorIs(t, err, ErrSequenceStopped)
				statuses = append(statuses, -1)
				continue
			}
			statuses = append(statuses, resp.StatusCode)
			drain(resp)
		}
		assert.Equal(t, []int{200, 200, 200, 429, -1}, statuses)
		hits := srv.Hits()
		require.Len(t, hits, 5, "page 5 must not reach the server")
		assert.Equal(t, 2*time.Second, hits[2].At.Sub(hits[1].At), "page 2 re-sent exactly 2 s after its 429")
		r := b.Report()
		assert.Equal(t, 5, r.Requests)
		assert.Equal(t, 1, r.Waits)
		assert.Equal(t, StopOpportunityUsed, r.Stop)
	})
}

// limits-only-tighten: the ceilings clamp, never raise.
func TestCeilingsClamp(t *testing.T) {
	b := NewBudget("s", MaxRequests(500), MaxTotal(2*time.Minute), MaxWait(45*time.Second))
	assert.Equal(t, 200, b.s.limits.maxRequests())
	assert.Equal(t, 60*time.Second, b.s.limits.maxTotal())
	assert.Equal(t, 30*time.Second, b.s.limits.maxWait())
	b = NewBudget("s", MaxRequests(3), MaxTotal(10*time.Second), MaxWait(5*time.Second), MaxRequests(0), MaxTotal(-1), nil)
	assert.Equal(t, 3, b.s.limits.maxRequests())
	assert.Equal(t, 10*time.Second, b.s.limits.maxTotal())
	assert.Equal(t, 5*time.Second, b.s.limits.maxWait())
}

// limits-only-tighten, stopped-stays-stopped: the request limit counts the re-sent request; the request after
// the limit fails before network access.
func TestRequestLimitCountsResend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(200), reply(429, "Retry-After", "1"), reply(200)))
		tr := New(srv)
		b := NewBudget("s", MaxRequests(3))
		ctx := WithBudget(context.Background(), b)
		for range 2 {
			resp, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
			require.NoError(t, err)
			assert.Equal(t, 200, resp.StatusCode)
		}
		_, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.ErrorIs(t, err, ErrSequenceStopped)
		assert.Equal(t, StopRequestsExhausted, stopReason(err))
		assert.Len(t, srv.Hits(), 3)
		assert.Equal(t, 3, b.Report().Requests)
	})
}

// limits-only-tighten, stop-not-shorten: a re-send with no request left is not attempted; the 429 goes back.
func TestNoRequestLeftForResend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "1")))
		b := NewBudget("s", MaxRequests(1))
		resp, err := New(srv).RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		assert.Len(t, srv.Hits(), 1)
		assert.Equal(t, StopRequestsExhausted, b.Report().Stop)
		assert.Equal(t, 0, b.Report().Waits)
	})
}

// limits-only-tighten, total-cuts-off: the total runs from the first request; when it runs out, a body
// being read is cut off and the next request fails before network access.
func TestTotalCutsOffBodyInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			r := reply(200)(req)
			r.Body = stalledBody{ctx: req.Context()}
			return r, nil
		})
		b := NewBudget("s", MaxTotal(5*time.Second))
		ctx := WithBudget(context.Background(), b)
		start := time.Now()
		resp, err := New(srv).RoundTrip(get(t, ctx, base+"/blob"))
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(start), "cut off exactly at the total")
		_, err = New(srv).RoundTrip(get(t, ctx, base+"/blob"))
		require.ErrorIs(t, err, ErrSequenceStopped)
		assert.Equal(t, StopTotalExhausted, stopReason(err))
		assert.Len(t, srv.Hits(), 1)
	})
}

// total-cuts-off: a caller context with its own cancellation still gets the total.
func TestTotalWithCancelableParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			<-req.Context().Done() // a request that never answers
			return nil, req.Context().Err()
		})
		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		b := NewBudget("s", MaxTotal(3*time.Second))
		start := time.Now()
		_, err := New(srv).RoundTrip(get(t, WithBudget(parent, b), base+"/x"))
		require.ErrorIs(t, err, ErrSequenceStopped)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, StopTotalExhausted, b.Report().Stop)
	})
}

// stopped-stays-stopped: after a stop, every further request fails before any network access
// with ErrSequenceStopped, saying why.
func TestStoppedSequenceFailsBeforeNetwork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "1"), reply(429, "Retry-After", "1"), reply(200)))
		tr := New(srv)
		b := NewBudget("readback")
		ctx := WithBudget(context.Background(), b)
		resp, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode, "persistent 429: the re-sent request's 429 goes back")
		for _, m := range []string{http.MethodGet, http.MethodPut} {
			_, err = tr.RoundTrip(mutation(t, ctx, m, base+"/indexes/a", "{}"))
			require.ErrorIs(t, err, ErrSequenceStopped)
			assert.Contains(t, err.Error(), `sequence "readback" stopped: persistent-429`)
		}
		assert.Len(t, srv.Hits(), 2)
		assert.Equal(t, StopPersistent429, b.Report().Stop)
	})
}

// no-budget-no-recovery: no Budget, no delayed recovery: the 429 passes through untouched.
func TestNoBudgetPassesThrough(t *testing.T) {
	srv := newScript(sequenceOf(reply(429, "Retry-After", "1")))
	resp, err := New(srv).RoundTrip(get(t, context.Background(), base+"/x"))
	require.NoError(t, err)
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "body of Too Many Requests", drain(resp))
	assert.Len(t, srv.Hits(), 1)
}

// get-only-resend, wait-before-readback: a mutation's 429 is never re-sent; it goes back untouched, body
// unread and open.
func TestMutationsNeverResent(t *testing.T) {
	for _, m := range []string{http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete} {
		t.Run(m, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(sequenceOf(reply(429, "Retry-After", "1")))
				b := NewBudget("s")
				resp, err := New(srv).RoundTrip(mutation(t, WithBudget(context.Background(), b), m, base+"/indexes/a", `{"n":1}`))
				require.NoError(t, err)
				assert.Equal(t, 429, resp.StatusCode)
				tb := resp.Body.(*trackedBody)
				assert.False(t, tb.read || tb.closed, "untouched-when-not-recovered: body unread and open")
				time.Sleep(time.Minute)
				assert.Len(t, srv.Hits(), 1)
				assert.Equal(t, 0, b.Report().Waits)
			})
		})
	}
}

// wait-before-readback: write 429 → the next GET of the sequence waits the Retry-After
// (measured from the 429's receipt) before it is sent; this uses the
// opportunity.
func TestWaitBeforeReadback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(
			reply(429, "Retry-After", "3", "x-ms-request-id", "put-1"),
			reply(200, "x-ms-request-id", "get-1", "ETag", `"0x8D1"`),
			reply(429, "Retry-After", "1"),
		))
		tr, rec, _ := newTraced(srv)
		b := NewBudget("index-a")
		ctx := WithBudget(context.Background(), b)
		resp, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}"))
		require.NoError(t, err)
		require.Equal(t, 429, resp.StatusCode)
		drain(resp)
		time.Sleep(time.Second) // the caller takes a second before its readback
		resp, err = tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		hits := srv.Hits()
		require.Len(t, hits, 2)
		assert.Equal(t, 3*time.Second, hits[1].At.Sub(hits[0].At), "GET sent 3 s after the PUT's 429")
		r := b.Report()
		require.Len(t, r.WaitLog, 1)
		assert.Equal(t, "write-429", r.WaitLog[0].Trigger)
		assert.Equal(t, RetryAfter{Kind: RetryAfterSeconds, Value: 3}, r.WaitLog[0].RetryAfter)
		assert.Equal(t, 2*time.Second, r.WaitLog[0].Planned)
		assert.Equal(t, "put-1", r.WaitLog[0].RequestID)
		assert.Equal(t, &MutationOutcome{Request: 1, Method: "PUT", StatusCode: 429, RequestID: "put-1", Attempt: 1, Ownership: Observed}, r.Mutation)
		assert.Equal(t, Observed, r.Ownership, "ownership-needs-ack: a GET that finds the object after a write 429 observes it")
		// The opportunity is used: a later GET 429 stops.
		resp, err = tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		assert.Equal(t, StopOpportunityUsed, b.Report().Stop)
		spans := rec.Ended()
		require.Len(t, spans, 2)
		assert.Equal(t, "readrecovery.wait", spans[0].Name())
		assert.Equal(t, "readrecovery.stop", spans[1].Name(), "stop-is-recorded: with no span in the context, the stop gets a span of its own")
	})
}

// get-only-resend: a GET 429 after an ACK is re-sent once after the wait; the re-sent
// answer goes back whatever it is (here 404).
func TestOneDelayedGETAnswerReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(
			reply(201, "x-ms-request-id", "put-ok"),
			reply(429, "Retry-After", "4"),
			reply(404, "x-ms-request-id", "get-404"),
		))
		b := NewBudget("index-a")
		ctx := WithBudget(context.Background(), b)
		tr := New(srv)
		resp, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}"))
		require.NoError(t, err)
		require.Equal(t, 201, resp.StatusCode)
		resp, err = tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.NoError(t, err)
		assert.Equal(t, 404, resp.StatusCode)
		hits := srv.Hits()
		require.Len(t, hits, 3)
		assert.Equal(t, []string{"PUT", "GET", "GET"}, []string{hits[0].Method, hits[1].Method, hits[2].Method})
		assert.Equal(t, 4*time.Second, hits[2].At.Sub(hits[1].At))
		r := b.Report()
		assert.Equal(t, Owned, r.Ownership)
		assert.Equal(t, "", string(r.Stop))
		assert.Equal(t, []ReadEvidence{{StatusCode: 429}, {StatusCode: 404, RequestID: "get-404"}}, r.FailedReads)
	})
}

// get-only-resend, ownership-needs-ack: after a write with unknown outcome (no response), a read may
// recover but what it finds stays observed, never owned.
func TestUnknownWriteOutcomeStaysObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset := errors.New("connection reset by peer")
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			switch n {
			case 1:
				return nil, reset
			case 2:
				return reply(429, "Retry-After", "1")(req), nil
			}
			return reply(200, "x-ms-request-id", "found")(req), nil
		})
		b := NewBudget("index-a")
		ctx := WithBudget(context.Background(), b)
		tr := New(srv)
		_, err := tr.RoundTrip(mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}"))
		require.ErrorIs(t, err, reset, "other-statuses-pass-through: transport errors pass through")
		resp, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		r := b.Report()
		assert.Equal(t, Observed, r.Ownership)
		assert.False(t, r.Mutation.Acked)
		assert.Equal(t, "connection reset by peer", r.Mutation.Error)
		assert.Equal(t, 1, r.Waits)
		assert.Len(t, srv.Hits(), 3)
	})
}

// queue-429-route: a marked upload with GetBody is re-sent once, unchanged, after its
// wait; without the mark or without GetBody it is not.
func TestQueueRetryRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "2", "x-ms-request-id", "q1"), reply(201, "x-ms-request-id", "up")))
		b := NewBudget("upload")
		ctx := WithQueueRetry(WithBudget(context.Background(), b))
		req := mutation(t, ctx, http.MethodPost, base+"/files?sig=SECRET", "file-bytes")
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("x-ms-file-name", "a.txt")
		resp, err := New(srv).RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 201, resp.StatusCode)
		hits := srv.Hits()
		require.Len(t, hits, 2)
		for _, h := range hits {
			assert.Equal(t, "POST", h.Method)
			assert.Equal(t, base+"/files?sig=SECRET", h.URL)
			assert.Equal(t, "file-bytes", h.Body)
			assert.Equal(t, "Bearer tok", h.Header.Get("Authorization"))
			assert.Equal(t, "a.txt", h.Header.Get("x-ms-file-name"))
		}
		assert.Equal(t, 2*time.Second, hits[1].At.Sub(hits[0].At))
		r := b.Report()
		assert.Equal(t, "queue-429", r.WaitLog[0].Trigger)
		assert.Equal(t, []MutationOutcome{
			{Request: 1, Method: "POST", StatusCode: 429, RequestID: "q1", Attempt: 1, Ownership: Owned},
			{Request: 1, Method: "POST", StatusCode: 201, RequestID: "up", Acked: true, Attempt: 2, Ownership: Owned},
		}, r.Mutations, "count-what-was-sent: the re-send's outcome belongs to its own original request")
		assert.Equal(t, &r.Mutations[1], r.Mutation)
		assert.Equal(t, Owned, r.Ownership)
	})
	t.Run("without GetBody", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(429, "Retry-After", "1"), reply(201)))
			b := NewBudget("upload")
			req := mutation(t, WithQueueRetry(WithBudget(context.Background(), b)), http.MethodPost, base+"/files", "x")
			req.GetBody = nil
			resp, err := New(srv).RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, 429, resp.StatusCode)
			assert.Len(t, srv.Hits(), 1)
		})
	})
	t.Run("queue 429 twice is persistent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(429, "Retry-After", "1")))
			b := NewBudget("upload")
			resp, err := New(srv).RoundTrip(mutation(t, WithQueueRetry(WithBudget(context.Background(), b)), http.MethodPost, base+"/files", "x"))
			require.NoError(t, err)
			assert.Equal(t, 429, resp.StatusCode)
			assert.Len(t, srv.Hits(), 2)
			assert.Equal(t, StopPersistent429, b.Report().Stop)
		})
	})
}

// same-request-no-redirects: the re-sent GET is the same request (URL, Authorization, endpoint);
// NewClient returns redirects; a redirect-produced request is refused.
func TestSameRequestNoRedirects(t *testing.T) {
	var seen []string
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.String())
		auth = append(auth, r.Header.Get("Authorization"))
		switch {
		case r.URL.Path == "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case len(seen) == 1:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(429)
		default:
			w.WriteHeader(200)
		}
	}))
	defer srv.Close()
	client := NewClient()
	ctx := WithBudget(context.Background(), NewBudget("s"))
	req := get(t, ctx, srv.URL+"/blob?sv=1&sig=S")
	req.Header.Set("Authorization", "SharedKey acct:abc")
	resp, err := client.Do(req)
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	drain(resp)
	assert.Equal(t, []string{"GET /blob?sv=1&sig=S", "GET /blob?sv=1&sig=S"}, seen)
	assert.Equal(t, []string{"SharedKey acct:abc", "SharedKey acct:abc"}, auth)

	resp, err = client.Do(get(t, ctx, srv.URL+"/moved"))
	require.NoError(t, err)
	assert.Equal(t, http.StatusFound, resp.StatusCode)
	assert.Equal(t, "/elsewhere", resp.Header.Get("Location"))
	drain(resp)
	assert.Len(t, seen, 3, "the redirect was not followed")

	// An http.Client that follows redirects: the transport refuses the
	// second hop before sending it.
	following := &http.Client{Transport: New(nil)}
	_, err = following.Do(get(t, context.Background(), srv.URL+"/moved"))
	require.ErrorIs(t, err, ErrRedirectRefused)
	var nr interface{ NonRetriable() }
	assert.True(t, errors.As(err, &nr))
	assert.Len(t, seen, 4)
}

// close-unread-before-wait: the 429 body is closed, unread, before the wait.
func TestBodyClosedUnreadBeforeWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := reply(429, "Retry-After", "5")(nil)
		tb := first.Body.(*trackedBody)
		var closedBeforeResend bool
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			if n == 1 {
				return first, nil
			}
			tb.mu.Lock()
			closedBeforeResend = tb.closed && !tb.read
			tb.mu.Unlock()
			return reply(200)(req), nil
		})
		resp, err := New(srv).RoundTrip(get(t, WithBudget(context.Background(), NewBudget("s")), base+"/x"))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.True(t, closedBeforeResend)
	})
}

// close-unread-before-wait: a failed Close means no wait and no re-send; the error carries the
// original status, request ID and a sanitized diagnostic; the sequence stops.
func TestCloseFailureStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			r := reply(429, "Retry-After", "5", "x-ms-request-id", "rid-429")(req)
			r.Body.(*trackedBody).closeErr = errors.New("close https://acct.blob.core.windows.net/c/b?sig=SECRET: broken pipe")
			return r, nil
		})
		b := NewBudget("s")
		start := time.Now()
		resp, err := New(srv).RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
		assert.Nil(t, resp)
		require.ErrorIs(t, err, ErrSequenceStopped)
		var se *StopError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, StopCleanupFailed, se.Reason)
		assert.Equal(t, 429, se.StatusCode)
		assert.Equal(t, "rid-429", se.RequestID)
		assert.Contains(t, se.Detail, "broken pipe")
		assert.NotContains(t, err.Error(), "SECRET")
		assert.Equal(t, time.Duration(0), time.Since(start), "no wait")
		assert.Len(t, srv.Hits(), 1, "no re-send")
		assert.Equal(t, 0, b.Report().Waits)
	})
}

// untouched-when-not-recovered: an unrecovered 429 (opportunity used) goes back with its body
// unread and open.
func TestUnrecoveredBodyUntouched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "1")))
		b := NewBudget("s")
		b.s.win = &window{} // the sequence already had its window
		resp, err := New(srv).RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
		require.NoError(t, err)
		tb := resp.Body.(*trackedBody)
		assert.False(t, tb.read)
		assert.False(t, tb.closed)
		assert.Equal(t, "body of Too Many Requests", drain(resp))
	})
}

// stop-not-shorten: cancellation ends the wait at once with the context's error.
func TestCancelEndsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "10"), reply(200)))
		tr, rec, _ := newTraced(srv)
		b := NewBudget("s")
		ctx, cancel := context.WithCancel(WithBudget(context.Background(), b))
		time.AfterFunc(3*time.Second, cancel)
		start := time.Now()
		_, err := tr.RoundTrip(get(t, ctx, base+"/x"))
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Len(t, srv.Hits(), 1)
		r := b.Report()
		assert.Equal(t, StopWaitCanceled, r.Stop)
		require.Len(t, r.WaitLog, 1)
		assert.True(t, r.WaitLog[0].Canceled)
		assert.Equal(t, 3*time.Second, r.WaitLog[0].Actual)
		spans := rec.Ended()
		require.Len(t, spans, 2)
		assert.Equal(t, "readrecovery.stop", spans[0].Name())
		assert.Equal(t, "readrecovery.wait", spans[1].Name())
		assert.Equal(t, "Error", spans[1].Status().Code.String(), "every-wait-is-a-span: a cancelled wait ends with status Error")
	})
}

// stop-not-shorten: a valid delay above the ceiling, or above what remains of the
// total, stops the sequence instead of being shortened.
func TestStopInsteadOfShorten(t *testing.T) {
	cases := []struct {
		name   string
		header string
		opts   []BudgetOption
		before time.Duration
		want   StopReason
	}{
		{"overlong 31 s", "31", nil, 0, StopOverlong},
		{"overlong 3600 s", "3600", nil, 0, StopOverlong},
		{"above the budget's wait ceiling", "10", []BudgetOption{MaxWait(5 * time.Second)}, 0, StopOverlong},
		{"longer than the total left", "8", []BudgetOption{MaxTotal(10 * time.Second)}, 5 * time.Second, StopWaitExceedsTotal},
		{"oversized field", strings.Repeat("1", 129), nil, 0, StopOversized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
					if n == 1 {
						return reply(200)(req), nil
					}
					time.Sleep(tc.before)
					return reply(429, "Retry-After", tc.header)(req), nil
				})
				b := NewBudget("s", tc.opts...)
				ctx := WithBudget(context.Background(), b)
				tr := New(srv)
				_, err := tr.RoundTrip(get(t, ctx, base+"/x"))
				require.NoError(t, err)
				start := time.Now()
				resp, err := tr.RoundTrip(get(t, ctx, base+"/x"))
				require.NoError(t, err)
				assert.Equal(t, 429, resp.StatusCode)
				assert.Equal(t, tc.before, time.Since(start), "no wait")
				assert.Len(t, srv.Hits(), 2)
				assert.Equal(t, tc.want, b.Report().Stop)
				assert.Equal(t, 0, b.Report().Waits)
			})
		})
	}
}

// stop-not-shorten, strict-retry-after, diagnosed-fallback: the wait is never shorter than asked, for every kind: a
// missing or invalid field waits the 1 s fallback; a date waits until it.
func TestWaitNeverShorter(t *testing.T) {
	cases := []struct {
		name  string
		kv    []string
		want  time.Duration
		kind  RetryAfterKind
		value int64
		diag  bool
	}{
		{"seconds", []string{"Retry-After", "7"}, 7 * time.Second, RetryAfterSeconds, 7, false},
		{"zero", []string{"Retry-After", "0"}, 0, RetryAfterSeconds, 0, false},
		{"missing", nil, time.Second, RetryAfterMissing, 0, true},
		{"malformed", []string{"Retry-After", "1.5"}, time.Second, RetryAfterInvalid, 0, true},
		{"duplicate", []string{"Retry-After", "2", "Retry-After", "3"}, time.Second, RetryAfterInvalid, 0, true},
		{"imf date", []string{"Retry-After", "Sat, 01 Jan 2000 00:00:12 GMT"}, 12 * time.Second, RetryAfterDate, 12, false},
		{"rfc850 date", []string{"Retry-After", "Saturday, 01-Jan-00 00:00:09 GMT"}, 9 * time.Second, RetryAfterDate, 9, false},
		{"asctime date", []string{"Retry-After", "Sat Jan  1 00:00:04 2000"}, 4 * time.Second, RetryAfterDate, 4, false},
		{"past date", []string{"Retry-After", "Fri, 31 Dec 1999 23:59:00 GMT"}, 0, RetryAfterDate, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bubble starts at 2000-01-01 00:00:00 UTC.
				srv := newScript(sequenceOf(reply(429, tc.kv...), reply(200)))
				b := NewBudget("s")
				resp, err := New(srv).RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
				require.NoError(t, err)
				assert.Equal(t, 200, resp.StatusCode)
				hits := srv.Hits()
				require.Len(t, hits, 2)
				assert.Equal(t, tc.want, hits[1].At.Sub(hits[0].At))
				w := b.Report().WaitLog[0]
				assert.Equal(t, RetryAfter{Kind: tc.kind, Value: tc.value}, w.RetryAfter)
				assert.Equal(t, tc.diag, w.Diagnostic != "")
			})
		})
	}
}

// other-statuses-pass-through: other statuses and transport errors pass through untouched.
func TestOtherStatusesPassThrough(t *testing.T) {
	for _, status := range []int{200, 201, 304, 400, 404, 408, 500, 503} {
		srv := newScript(sequenceOf(reply(status, "Retry-After", "1")))
		b := NewBudget("s")
		resp, err := New(srv).RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
		require.NoError(t, err)
		assert.Equal(t, status, resp.StatusCode)
		assert.Equal(t, "body of "+http.StatusText(status), drain(resp))
		assert.Len(t, srv.Hits(), 1)
		assert.Equal(t, 0, b.Report().Waits)
		assert.Equal(t, StopReason(""), b.Report().Stop)
	}
}

// Every error RoundTrip returns for a decision of its own carries the
// NonRetriable marker azcore's retry policy looks for with errors.As
// (stops-are-nonretriable); an error of the base transport is returned as
// it is, without the marker.
func TestOwnDecisionErrorsAreNonRetriable(t *testing.T) {
	type nonRetriable interface{ NonRetriable() }
	for _, tc := range []struct {
		name  string
		run   func(t *testing.T) error // the error of the request under test
		is    error                    // the sentinel it must match
		marks bool                     // NonRetriable expected
	}{
		{"stopped sequence", func(t *testing.T) error {
			tr := New(newScript(sequenceOf(reply(429, "Retry-After", "1"))))
			ctx := WithBudget(context.Background(), NewBudget("s"))
			resp, err := tr.RoundTrip(get(t, ctx, base+"/a")) // 429, re-sent, 429: persistent
			require.NoError(t, err)
			drain(resp)
			_, err = tr.RoundTrip(get(t, ctx, base+"/b"))
			return err
		}, ErrSequenceStopped, true},
		{"cleanup failed", func(t *testing.T) error {
			tr := New(newScript(func(_ int, req *http.Request) (*http.Response, error) {
				r := reply(429, "Retry-After", "1")(req)
				r.Body.(*trackedBody).closeErr = errors.New("broken pipe")
				return r, nil
			}))
			_, err := tr.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("s")), base+"/a"))
			return err
		}, ErrSequenceStopped, true},
		{"repeat refused", func(t *testing.T) error {
			tr := New(newScript(sequenceOf(reply(429, "Retry-After", "1"))))
			ctx := WithBudget(context.Background(), NewBudget("s"))
			put := func() *http.Request {
				req := mutation(t, ctx, http.MethodPut, base+"/indexes/a", "{}")
				req.Header.Set("x-ms-client-request-id", "one-id")
				return req
			}
			resp, err := tr.RoundTrip(put())
			require.NoError(t, err)
			drain(resp)
			_, err = tr.RoundTrip(put())
			return err
		}, ErrRequestRefused, true},
		{"redirect refused", func(t *testing.T) error {
			req := get(t, context.Background(), base+"/moved")
			req.Response = &http.Response{StatusCode: http.StatusFound}
			_, err := New(newScript(sequenceOf(reply(200)))).RoundTrip(req)
			return err
		}, ErrRedirectRefused, true},
		{"base transport error passes through", func(t *testing.T) error {
			tr := New(newScript(func(int, *http.Request) (*http.Response, error) {
				return nil, errConnReset
			}))
			_, err := tr.RoundTrip(get(t, WithBudget(context.Background(), NewBudget("s")), base+"/a"))
			return err
		}, errConnReset, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				err := tc.run(t)
				require.ErrorIs(t, err, tc.is)
				var nr nonRetriable
				assert.Equal(t, tc.marks, errors.As(err, &nr), "NonRetriable marker")
			})
		})
	}
}

// errConnReset is a base transport's own error.
var errConnReset = errors.New("read tcp: connection reset by peer")

// in-flight-joins (per sequence): 20 concurrent pages all meet 429: each joins the one
// window the first opened, and each is re-sent once, when it ends.
func TestConcurrentPagesJoinOneWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		allInFlight := make(chan struct{})
		srv := newScript(func(n int, req *http.Request) (*http.Response, error) {
			if n > 20 {
				return reply(200)(req), nil
			}
			if n == 20 {
				close(allInFlight)
			}
			<-allInFlight // the 20 first requests are in flight together
			return reply(429, "Retry-After", "1")(req), nil
		})
		tr := New(srv)
		b := NewBudget("s")
		ctx := WithBudget(context.Background(), b)
		start := time.Now()
		var wg sync.WaitGroup
		statuses := make(chan int, 20)
		for range 20 {
			wg.Go(func() {
				resp, err := tr.RoundTrip(get(t, ctx, base+"/x"))
				if assert.NoError(t, err) {
					statuses <- resp.StatusCode
					drain(resp)
				}
			})
		}
		wg.Wait()
		close(statuses)
		for s := range statuses {
			assert.Equal(t, 200, s)
		}
		hits := srv.Hits()
		require.Len(t, hits, 40)
		for i, h := range hits {
			want := time.Duration(0)
			if i >= 20 {
				want = time.Second
			}
			assert.Equal(t, want, h.At.Sub(start), "hit %d", i)
		}
		r := b.Report()
		assert.Equal(t, 20, r.Waits)
		assert.Equal(t, 40, r.Requests)
		require.NotNil(t, r.Window)
		assert.Equal(t, 19, r.Window.Joined)
		assert.Equal(t, time.Second, r.Window.Length)
		assert.Equal(t, StopReason(""), r.Stop)
	})
}

// clock-is-internal: the clock and sleeper are an internal seam: a fake clock sees the
// exact sleeps the transport asks for.
func TestClockSeam(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	srv := newScript(sequenceOf(reply(429, "Retry-After", "Mon, 30 Nov 2026 12:00:06 GMT"), reply(200)))
	b := NewBudget("s")
	resp, err := New(srv, withClock(clk)).RoundTrip(get(t, WithBudget(context.Background(), b), base+"/x"))
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, []time.Duration{6 * time.Second}, clk.slept)
	w := b.Report().WaitLog[0]
	assert.Equal(t, &RetryAfterTiming{ReceivedAtUTC: clk.start().Unix(), NotBeforeUTC: clk.start().Unix() + 6, ServerDelaySeconds: 6}, w.Timing)
}

// queue-429-route, close-unread-before-wait: when GetBody fails after the wait, nothing is re-sent and the
// sequence stops.
func TestGetBodyFailureStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "1", "x-ms-request-id", "q"), reply(201)))
		b := NewBudget("upload")
		req := mutation(t, WithQueueRetry(WithBudget(context.Background(), b)), http.MethodPost, base+"/files", "x")
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("source file vanished") }
		_, err := New(srv).RoundTrip(req)
		require.ErrorIs(t, err, ErrSequenceStopped)
		assert.Equal(t, StopUnreplayableBody, stopReason(err))
		assert.Len(t, srv.Hits(), 1)
	})
}

// limits-only-tighten, evidence-in-report: a sequence that finished before its total ran out keeps a report
// without a stop; only a request after the total is refused, and then the
// report says so.
func TestTotalStopsOnlyWhatItRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(200)))
		b := NewBudget("readback")
		ctx := WithBudget(context.Background(), b)
		tr := New(srv)
		resp, err := tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		require.NoError(t, err)
		drain(resp)
		time.Sleep(61 * time.Second)
		assert.Equal(t, StopReason(""), b.Report().Stop, "nothing was cut off")
		_, err = tr.RoundTrip(get(t, ctx, base+"/indexes/a"))
		assert.Equal(t, StopTotalExhausted, stopReason(err))
		assert.Equal(t, StopTotalExhausted, b.Report().Stop)
		assert.Len(t, srv.Hits(), 1)
	})
}
