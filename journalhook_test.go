package readrecovery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hookLog is a Journal that records every call and fails where told.
type hookLog struct {
	mu          sync.Mutex
	calls       []string
	admitErr    error
	beginErr    error
	completeErr error
	backoffErr  error
}

func (h *hookLog) log(s string) {
	h.mu.Lock()
	h.calls = append(h.calls, s)
	h.mu.Unlock()
}

func (h *hookLog) Admit(ctx context.Context, now time.Time) error {
	h.log("admit")
	return h.admitErr
}

func (h *hookLog) Begin(ctx context.Context, r JournalRequest) error {
	h.log(fmt.Sprintf("begin %s #%d resend-of=%q", r.Method, r.Attempt, r.ResendOf))
	return h.beginErr
}

func (h *hookLog) Complete(ctx context.Context, r JournalRequest, o JournalOutcome) error {
	h.log(fmt.Sprintf("complete %s #%d %d %s", r.Method, r.Attempt, o.StatusCode, o.RequestID))
	return h.completeErr
}

func (h *hookLog) Backoff(ctx context.Context, r JournalRequest, o JournalOutcome, ra RetryAfter, tm *RetryAfterTiming) (string, error) {
	h.log(fmt.Sprintf("backoff %s #%d %s/%d delay=%d", r.Method, r.Attempt, ra.Kind, ra.Value, tm.ServerDelaySeconds))
	return "sha256:event1", h.backoffErr
}

// queue-429-route, journal-claim-then-check: the queue-429 route under a journal: admission, the
// pending marker before each send, the backoff entry for the 429, the
// re-send naming the event digest that allowed it, its receipt.
func TestJournalHookQueueRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newScript(sequenceOf(reply(429, "Retry-After", "2", "x-ms-request-id", "q1"), reply(201, "x-ms-request-id", "up")))
		j := &hookLog{}
		b := NewBudget("upload")
		ctx := WithJournal(WithQueueRetry(WithBudget(context.Background(), b)), j)
		resp, err := New(srv).RoundTrip(mutation(t, ctx, http.MethodPost, base+"/files", "bytes"))
		require.NoError(t, err)
		assert.Equal(t, 201, resp.StatusCode)
		assert.Equal(t, []string{
			"admit",
			"begin POST #1 resend-of=\"\"",
			"backoff POST #1 seconds/2 delay=2",
			"admit",
			"begin POST #2 resend-of=\"sha256:event1\"",
			"complete POST #2 201 up",
		}, j.calls)
		assert.Len(t, srv.Hits(), 2)
	})
}

// no-budget-no-recovery: a journal without a budget records the 429 but recovers nothing.
func TestJournalWithoutBudgetRecordsButDoesNotRecover(t *testing.T) {
	srv := newScript(sequenceOf(reply(429, "Retry-After", "1"), reply(200)))
	j := &hookLog{}
	resp, err := New(srv).RoundTrip(get(t, WithJournal(context.Background(), j), base+"/files"))
	require.NoError(t, err)
	assert.Equal(t, 429, resp.StatusCode)
	assert.Len(t, srv.Hits(), 1)
	assert.Equal(t, []string{"admit", `begin GET #1 resend-of=""`, "backoff GET #1 seconds/1 delay=1"}, j.calls)
}

// status-before-network: a restricted journal blocks before any network access, with or
// without a budget.
func TestJournalAdmissionBlocksBeforeNetwork(t *testing.T) {
	restricted := errors.New("journal: waiting until 1700000060")
	for _, withBudget := range []bool{false, true} {
		srv := newScript(sequenceOf(reply(200)))
		j := &hookLog{admitErr: restricted}
		ctx := WithJournal(context.Background(), j)
		var b *Budget
		if withBudget {
			b = NewBudget("s")
			ctx = WithBudget(ctx, b)
		}
		_, err := New(srv).RoundTrip(get(t, ctx, base+"/files"))
		require.ErrorIs(t, err, ErrSequenceStopped)
		require.ErrorIs(t, err, restricted)
		assert.Equal(t, StopJournalRestricted, stopReason(err))
		assert.Empty(t, srv.Hits())
		assert.Equal(t, []string{"admit"}, j.calls)
		if withBudget {
			assert.Equal(t, StopJournalRestricted, b.Report().Stop)
			assert.Equal(t, 0, b.Report().Requests, "a refused request was not sent")
		}
	}
}

// persistence-failure-is-terminal: a persistence failure is terminal before recovery: the pending
// marker cannot be written → nothing is sent; the backoff entry cannot be
// written → no wait, no re-send, the original 429 goes back.
func TestPersistenceFailureIsTerminal(t *testing.T) {
	t.Run("begin", func(t *testing.T) {
		srv := newScript(sequenceOf(reply(200)))
		b := NewBudget("s")
		j := &hookLog{beginErr: errors.New("disk full")}
		_, err := New(srv).RoundTrip(get(t, WithJournal(WithBudget(context.Background(), b), j), base+"/files"))
		assert.Equal(t, StopPersistenceFailed, stopReason(err))
		assert.Empty(t, srv.Hits())
	})
	t.Run("backoff", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(429, "Retry-After", "1", "x-ms-request-id", "r429"), reply(200)))
			b := NewBudget("s")
			j := &hookLog{backoffErr: errors.New("disk full")}
			start := time.Now()
			resp, err := New(srv).RoundTrip(get(t, WithJournal(WithBudget(context.Background(), b), j), base+"/files"))
			require.NoError(t, err)
			assert.Equal(t, 429, resp.StatusCode)
			assert.False(t, resp.Body.(*trackedBody).closed, "the original 429, untouched")
			assert.Equal(t, time.Duration(0), time.Since(start))
			assert.Len(t, srv.Hits(), 1)
			r := b.Report()
			assert.Equal(t, StopPersistenceFailed, r.Stop)
			assert.Equal(t, 0, r.Waits)
		})
	})
}

// receipt-failure-keeps-ack: a receipt failure keeps the ACK (returned and reported) and stops
// further requests.
func TestReceiptFailureKeepsACK(t *testing.T) {
	srv := newScript(sequenceOf(reply(201, "x-ms-request-id", "ack-1"), reply(200)))
	b := NewBudget("upload")
	j := &hookLog{completeErr: errors.New("fsync: input/output error")}
	ctx := WithJournal(WithBudget(context.Background(), b), j)
	resp, err := New(srv).RoundTrip(mutation(t, ctx, http.MethodPost, base+"/files", "x"))
	require.NoError(t, err)
	assert.Equal(t, 201, resp.StatusCode)
	r := b.Report()
	assert.Equal(t, StopReceiptFailed, r.Stop)
	assert.Equal(t, &MutationOutcome{Request: 1, Method: "POST", StatusCode: 201, RequestID: "ack-1", Acked: true, Attempt: 1, Ownership: Owned}, r.Mutation)
	assert.Equal(t, Owned, r.Ownership)
	_, err = New(srv).RoundTrip(get(t, ctx, base+"/files"))
	assert.Equal(t, StopReceiptFailed, stopReason(err))
	assert.Len(t, srv.Hits(), 1)
}

// slotJournal's Begin waits for a slot that never frees, until its context
// ends, as a journal whose one in-flight slot another request holds.
type slotJournal struct{ hookLog }

func (j *slotJournal) Begin(ctx context.Context, r JournalRequest) error {
	j.log("begin")
	<-ctx.Done()
	return fmt.Errorf("waiting for the journal's slot: %w", ctx.Err())
}

type restrictedErr struct{}

func (restrictedErr) Error() string      { return "another worker's request is pending" }
func (restrictedErr) JournalRestricted() {}

// A journal's refusal says what it is: a replay refuses the one request and
// the sequence goes on; the caller's own context ending returns its error;
// the wait for the journal's slot ends at the sequence's deadline as
// total-exhausted; a restriction found under the claim stops the sequence as
// journal-restricted, not as a failed write.
func TestJournalRefusalsSayWhatTheyAre(t *testing.T) {
	t.Run("replay refused", func(t *testing.T) {
		srv := newScript(sequenceOf(reply(200)))
		b := NewBudget("batch")
		j := &hookLog{beginErr: fmt.Errorf("journal: a.csv: %w", ErrReplayRefused)}
		ctx := WithJournal(WithBudget(context.Background(), b), j)
		_, err := New(srv).RoundTrip(mutation(t, ctx, http.MethodPost, base+"/files", "a"))
		require.ErrorIs(t, err, ErrRequestRefused)
		require.ErrorIs(t, err, ErrReplayRefused)
		assert.NotErrorIs(t, err, ErrSequenceStopped)
		assert.Equal(t, StopReplayRefused, stopReason(err))
		assert.Empty(t, srv.Hits())
		r := b.Report()
		assert.Equal(t, StopReason(""), r.Stop, "the batch goes on")
		assert.Equal(t, 0, r.Requests)
	})
	t.Run("caller's context ends during the slot wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(200)))
			b := NewBudget("batch")
			ctx, cancel := context.WithCancel(WithJournal(WithBudget(context.Background(), b), &slotJournal{}))
			time.AfterFunc(2*time.Second, cancel)
			start := time.Now()
			_, err := New(srv).RoundTrip(mutation(t, ctx, http.MethodPost, base+"/files", "a"))
			require.ErrorIs(t, err, context.Canceled)
			assert.Equal(t, 2*time.Second, time.Since(start))
			assert.Equal(t, StopReason(""), b.Report().Stop, "not journal-restricted, not persistence-failed")
			assert.Empty(t, srv.Hits())
		})
	})
	t.Run("slot wait ends at the sequence's deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(200)))
			b := NewBudget("batch", MaxTotal(3*time.Second))
			ctx := WithJournal(WithBudget(context.Background(), b), &slotJournal{})
			start := time.Now()
			_, err := New(srv).RoundTrip(mutation(t, ctx, http.MethodPost, base+"/files", "a"))
			require.ErrorIs(t, err, ErrSequenceStopped)
			assert.Equal(t, StopTotalExhausted, stopReason(err))
			assert.Equal(t, 3*time.Second, time.Since(start))
			assert.Equal(t, 0, b.Report().Requests)
		})
	})
	t.Run("restricted under the claim", func(t *testing.T) {
		srv := newScript(sequenceOf(reply(200)))
		b := NewBudget("batch")
		j := &hookLog{beginErr: fmt.Errorf("journal: %w", restrictedErr{})}
		_, err := New(srv).RoundTrip(mutation(t, WithJournal(WithBudget(context.Background(), b), j), http.MethodPost, base+"/files", "a"))
		assert.Equal(t, StopJournalRestricted, stopReason(err))
		assert.Empty(t, srv.Hits())
	})
}

// fullErr is a journal's "no room" error: it has both methods, as
// *journal.FullError does, and journal-full must win.
type fullErr struct{}

func (fullErr) Error() string      { return "journal-full: 200 backoff entries" }
func (fullErr) JournalFull()       {}
func (fullErr) JournalRestricted() {}

// bounded-journal: a journal whose limits leave no room stops the sequence
// as journal-full, from Admit, Begin or Backoff, never persistence-failed;
// nothing more is sent.
func TestJournalFullStops(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hook  func() *hookLog
		first int // the status the first send meets
		hits  int
		calls []string
	}{
		{"admit", func() *hookLog { return &hookLog{admitErr: fullErr{}} }, 200, 0, []string{"admit"}},
		{"begin", func() *hookLog { return &hookLog{beginErr: fullErr{}} }, 200, 0, []string{"admit", `begin GET #1 resend-of=""`}},
		{"backoff", func() *hookLog { return &hookLog{backoffErr: fullErr{}} }, 429, 1, []string{"admit", `begin GET #1 resend-of=""`, "backoff GET #1 seconds/1 delay=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScript(sequenceOf(reply(tc.first, "Retry-After", "1", "x-ms-request-id", "r1")))
			j := tc.hook()
			b := NewBudget("s")
			resp, err := New(srv).RoundTrip(get(t, WithJournal(WithBudget(context.Background(), b), j), base+"/files"))
			if tc.first == 429 {
				require.NoError(t, err, "the original 429 goes back")
				assert.Equal(t, 429, resp.StatusCode)
				resp.Body.Close()
			} else {
				require.ErrorIs(t, err, ErrSequenceStopped)
				assert.Equal(t, StopJournalFull, stopReason(err))
			}
			assert.Equal(t, StopJournalFull, b.Report().Stop)
			assert.Len(t, srv.Hits(), tc.hits)
			assert.Equal(t, tc.calls, j.calls)
		})
	}
}
