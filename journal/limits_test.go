package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/unixtime"
)

// requireFull asserts a journal-full refusal: a *fullError that wraps
// errLimit, says journal-full, and is never a persistence failure.
func requireFull(t *testing.T, err error, detail string) {
	t.Helper()
	var fe *fullError
	require.ErrorAs(t, err, &fe)
	assert.ErrorIs(t, err, errLimit)
	assert.Equal(t, "journal-full: "+detail, err.Error())
	var full interface{ JournalFull() }
	assert.True(t, errors.As(err, &full), "the transport finds JournalFull")
}

// bounded-journal, representable-times: the entry limit and the file limit are journal-full
// refusals, before any network access, that name the limit.
func TestLimitsAreJournalFull(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, plan3, t0.Add(-time.Hour), make([]int64, record.MaxEntries), nil)
	requireFull(t, reopen(t, dir, t0).Begin(context.Background(), getReq(t)),
		"200 backoff entries recorded, the most a run holds: entry 201 could not be written, so nothing is sent")

	plan := manyFiles(1001)
	dir2 := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir2, plan, t0.Add(-time.Hour), nil, ids(plan[:999])) // run.json, 999 receipts and the head
	j, err := Open(dir2, Existing(), withClock(newFakeClock(t0)), WithPlan(plan))
	require.NoError(t, err)
	requireFull(t, j.Begin(context.Background(), getReq(t)),
		"1001 files in the run; a request needs room for 4 more of at most 1003, so nothing is sent")
	assert.NotContains(t, names(t, dir2), record.MarkerName)
}

// representable-times: a valid restriction beyond the representable bound (Retry-After:
// 300000000000 seconds, a not-before after year 9999) is recorded, never a
// persistence failure: the entry is written without timing, the marker is
// removed, and the run is unresolved (its end is unknown).
func TestUnrepresentableRestrictionIsRecorded(t *testing.T) {
	for name, tm := range map[string]*readrecovery.RetryAfterTiming{
		"not-before beyond the bound": {ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() + 300000000000, ServerDelaySeconds: 300000000000},
		"received beyond the bound":   {ReceivedAtUTC: unixtime.Max + 1, NotBeforeUTC: unixtime.Max + 2, ServerDelaySeconds: 1},
	} {
		t.Run(name, func(t *testing.T) {
			j, _ := newRun(t)
			ctx := WithUpload(context.Background(), "a.bin")
			require.NoError(t, j.Begin(ctx, putReq(t)))
			d, err := j.Backoff(ctx, putReq(t), out429("r"), secs(300000000000), tm)
			require.NoError(t, err, "a representable restriction is never a persistence failure")
			assert.True(t, record.IsDigest(d))
			assert.Equal(t, []string{"backoff-0001.json", "plan.json", "run.json"}, names(t, j.Dir()))
			raw, err := os.ReadFile(filepath.Join(j.Dir(), "backoff-0001.json"))
			require.NoError(t, err)
			assert.Contains(t, string(raw), `"retry_after":{"kind":"seconds","value":300000000000},"timing":null`)
			st := reopen(t, j.Dir(), t0).Status(t0)
			assert.Equal(t, Unresolved, st.State)
			assert.Equal(t, "backoff-0001.json: retry_after seconds without timing: unrepresentable or unknown delay (unresolved)", st.Reason)
		})
	}
}

// no-replay-of-unknown: after a part's 429 the Journal that sent it lets
// only the queue-429 re-send of that part follow (attempt 2 naming its
// entry); once the re-send is accepted, the upload goes on to its commit.
// Any other send of the file in between is refused.
func TestOnlyTheQueueResendFollowsA429(t *testing.T) {
	j, clk := newRun(t)
	part := WithUploadPart(context.Background(), "a.bin")
	commit := WithUpload(context.Background(), "a.bin")
	d := record429(t, j, part, putReq(t), secs(1), timing(t0, 1))
	clk.Set(t0.Add(time.Second))
	again := putReq(t)
	require.ErrorIs(t, j.Begin(part, again), errReplay, "a new attempt 1 of the part")
	require.ErrorIs(t, j.Begin(commit, again), errReplay, "the commit before the part was accepted")
	wrong := putReq(t)
	wrong.Attempt, wrong.ResendOf = 2, record.DigestOf([]byte("another entry"))
	require.Error(t, j.Begin(part, wrong), "a re-send naming another entry")
	resend := putReq(t)
	resend.Attempt, resend.ResendOf = 2, d
	require.NoError(t, j.Begin(part, resend))
	require.NoError(t, j.Complete(part, resend, ok201("p")))
	require.NoError(t, j.Begin(commit, putReq(t)), "the accepted part continues the upload")
	require.NoError(t, j.Complete(commit, putReq(t), ok201("c")))
	c, err := j.PlanContinuation(plan3, NewApproval, t0.Add(time.Second))
	require.NoError(t, err)
	assert.Equal(t, FileAcked, c.Files[0].State)
	require.ErrorIs(t, j.Begin(commit, putReq(t)), errReplay, "acked: never again")
}
