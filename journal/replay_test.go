package journal_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// send sends one POST /files of id through rt, marked with mark
// (journal.WithUpload, journal.WithUploadPart, or nil for none), in ctx.
func send(t *testing.T, rt http.RoundTripper, ctx context.Context, mark func(context.Context, string) context.Context, id string) (*http.Response, error) {
	t.Helper()
	if mark != nil {
		ctx = mark(ctx, id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://files.example/files?sig=SECRET", bytes.NewReader([]byte("content of "+id)))
	require.NoError(t, err)
	return rt.RoundTrip(req)
}

// requireReplayRefused asserts the refusal of a file the journal never
// sends again: replay-refused, the request only (the sequence goes on).
func requireReplayRefused(t *testing.T, err error) {
	t.Helper()
	var se *readrecovery.StopError
	require.True(t, errors.As(err, &se), "err = %v", err)
	assert.Equal(t, readrecovery.StopReplayRefused, se.Reason)
	assert.ErrorIs(t, err, readrecovery.ErrRequestRefused)
	// The journal's own refusal (a file it never sends again), not one of
	// a file outside the plan.
	assert.ErrorContains(t, err, "journal: upload not sent again")
	assert.NotErrorIs(t, err, journal.ErrPlanMismatch)
}

// no-replay-of-unknown: after its upload's 429 a file is
// unknown, and the Journal that received the 429 never sends it again —
// with or without a Budget, whatever the context marks, once the
// restriction has elapsed — until a reupload review; the server sees the
// upload once. A part without a committed ACK and a failed part close the
// file the same way; only a part's 2xx lets the same upload go on to its
// commit.
func TestNoReplayOfUnknown(t *testing.T) {
	budget := func(ctx context.Context) context.Context {
		return readrecovery.WithBudget(ctx, readrecovery.NewBudget("again"))
	}
	queue := func(ctx context.Context) context.Context { return readrecovery.WithQueueRetry(budget(ctx)) }
	none := func(ctx context.Context) context.Context { return ctx }
	for _, tc := range []struct {
		name string
		// first is the mark of the first request, and its script.
		first  func(context.Context, string) context.Context
		status int // what the server answers the first request
		// again is the context of the second send (of the commit).
		again func(context.Context) context.Context
		// sentTwice: the second request reaches the server (a part's 2xx
		// continues the upload).
		sentTwice bool
	}{
		{"429, again without a Budget", journal.WithUpload, 429, none, false},
		{"429, again with a new Budget", journal.WithUpload, 429, budget, false},
		{"429, again marked for the queue route", journal.WithUpload, 429, queue, false},
		{"part 429, then the commit", journal.WithUploadPart, 429, budget, false},
		{"part 500, then the commit", journal.WithUploadPart, 500, none, false},
		{"part 201, then the commit", journal.WithUploadPart, 201, none, true},
		{"201, again", journal.WithUpload, 201, budget, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "run")
				plan := []journal.PlannedFile{{ID: "a.csv"}}
				j, err := journal.Open(dir, journal.WithPlan(plan))
				require.NoError(t, err)
				srv := fakeserver.New()
				defer srv.Close()
				switch tc.status {
				case 429:
					srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(1)), fakeserver.Nth(1))
				case 500:
					srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Status(500), fakeserver.Nth(1))
				}
				rt := readrecovery.New(srv.Transport())
				ctx := readrecovery.WithJournal(context.Background(), j)
				resp, err := send(t, rt, ctx, tc.first, "a.csv")
				require.NoError(t, err)
				require.Equal(t, tc.status, resp.StatusCode)
				resp.Body.Close()

				time.Sleep(2 * time.Second) // the restriction has elapsed
				resp, err = send(t, rt, tc.again(ctx), journal.WithUpload, "a.csv")
				if tc.sentTwice {
					require.NoError(t, err)
					assert.Equal(t, http.StatusCreated, resp.StatusCode)
					assert.Equal(t, 2, srv.Count(fakeserver.RouteFileUpload, http.MethodPost))
					return
				}
				requireReplayRefused(t, err)
				assert.Equal(t, 1, srv.Count(fakeserver.RouteFileUpload, http.MethodPost), "the server saw the file once")
				assert.NoFileExists(t, filepath.Join(dir, "pending-request.json"), "a refusal leaves no marker")

				// A later Journal (another invocation) refuses it too, as
				// does the plan.
				j2, err := journal.Open(dir, journal.WithPlan(plan))
				require.NoError(t, err)
				_, err = send(t, rt, readrecovery.WithJournal(context.Background(), j2), journal.WithUpload, "a.csv")
				requireReplayRefused(t, err)
				assert.Equal(t, 1, srv.Count(fakeserver.RouteFileUpload, http.MethodPost))
				c, err := j2.PlanContinuation(plan, journal.NewApproval, time.Now())
				require.NoError(t, err)
				assert.Empty(t, c.Uploads())
			})
		})
	}
}

// markerSeer is a base transport that records, for each request, whether
// the run's pending marker existed when it was sent.
type markerSeer struct {
	base http.RoundTripper
	dir  string
	seen []bool
}

func (m *markerSeer) RoundTrip(req *http.Request) (*http.Response, error) {
	_, err := os.Stat(filepath.Join(m.dir, "pending-request.json"))
	m.seen = append(m.seen, err == nil)
	return m.base.RoundTrip(req)
}

// every-mutation-journaled: a mutation of a journaled sequence
// without WithUpload or WithUploadPart (a source creation, a batch create)
// is sent under the marker, its 429 becomes a backoff entry without file
// provenance, and its 2xx leaves no receipt; nothing is sent unrecorded.
func TestEveryMutationIsJournaled(t *testing.T) {
	t.Run("without a Budget", func(t *testing.T) { testEveryMutationIsJournaled(t, false) })
	t.Run("with a Budget", func(t *testing.T) { testEveryMutationIsJournaled(t, true) })
}

func testEveryMutationIsJournaled(t *testing.T, budget bool) {
	synctest.Test(t, func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		j, err := journal.Open(dir, journal.WithPlan([]journal.PlannedFile{{ID: "a.csv"}}))
		require.NoError(t, err)
		srv := fakeserver.New()
		defer srv.Close()
		srv.Script().Add(fakeserver.RouteFileUpload, fakeserver.Throttle(fakeserver.RetryAfterSeconds(4)), fakeserver.Nth(1))
		seer := &markerSeer{base: srv.Transport(), dir: dir}
		rt := readrecovery.New(seer)
		ctx := readrecovery.WithJournal(context.Background(), j)
		if budget {
			ctx = readrecovery.WithBudget(ctx, readrecovery.NewBudget("create"))
		}

		resp, err := send(t, rt, ctx, nil, "batch")
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		resp.Body.Close()
		assert.Equal(t, []string{"backoff-0001.json", "plan.json", "run.json"}, names(t, dir))
		entry := readJSON(t, filepath.Join(dir, "backoff-0001.json"))["body"].(map[string]any)
		assert.Equal(t, map[string]any{"file_digest": "", "attempt": 1.0, "resend_of": ""}, entry["provenance"])
		assert.Equal(t, "POST", entry["method"])
		st := j.Status(time.Now())
		assert.Equal(t, journal.Waiting, st.State, "the unmarked mutation's 429 restricts the run")
		assert.Equal(t, int64(4), st.RemainingSeconds)

		time.Sleep(4 * time.Second)
		if budget {
			// A new sequence: the first one's mutation met 429 (its repeat
			// guard is the transport's, not the journal's).
			ctx = readrecovery.WithBudget(readrecovery.WithJournal(context.Background(), j), readrecovery.NewBudget("create again"))
		}
		resp, err = send(t, rt, ctx, nil, "batch")
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Equal(t, []string{"backoff-0001.json", "plan.json", "run.json"}, names(t, dir), "no receipt for an unmarked mutation")
		assert.Equal(t, []bool{true, true}, seer.seen, "each was sent under the marker")
	})
}
