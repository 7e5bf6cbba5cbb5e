package journal

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
)

// snapshotFiles returns the content of every file of dir by name.
func snapshotFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)
		out[n] = string(b)
	}
	return out
}

// abandoned is a run whose worker was killed while a.bin's upload was in
// flight: its marker stays. It returns the directory.
func abandoned(t *testing.T) string {
	t.Helper()
	j, _ := newRun(t)
	a := WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(a, putReq(t)))
	kill(j)
	return j.Dir() // the process is gone: nothing completes the request
}

// failFS is the real file system whose Link fails for names with prefix
// linkFails, and whose Remove of the marker fails when removeFails.
type failFS struct {
	fsys.OS
	linkFails   string
	removeFails bool
}

func (f *failFS) Link(oldname, newname string) error {
	if f.linkFails != "" && strings.HasPrefix(filepath.Base(newname), f.linkFails) {
		return errInjected
	}
	return f.OS.Link(oldname, newname)
}

func (f *failFS) Remove(name string) error {
	if f.removeFails && filepath.Base(name) == record.MarkerName {
		return errInjected
	}
	return f.OS.Remove(name)
}

// pending-review: the way out of a killed worker's marker. The
// review is an immutable, chained record bound to the marker's digest;
// every other file is kept byte for byte; the marker's file is unknown;
// the run waits the review time plus 30 s, then a decision review and a
// new approval make the file eligible again.
func TestPendingReviewIsTheWayOut(t *testing.T) {
	dir := abandoned(t)
	j := reopen(t, dir, t0.Add(time.Minute))
	require.Equal(t, Unresolved, j.Status(t0.Add(time.Minute)).State)
	_, err := j.Review(context.Background(), "a.bin", DecisionReupload, "")
	require.ErrorIs(t, err, ErrRestricted, "a decision review needs the marker resolved first")
	before := snapshotFiles(t, dir)
	markerDigest := record.DigestOf([]byte(before[record.MarkerName]))

	clk := newFakeClock(t0.Add(time.Minute))
	j, err = Open(dir, Existing(), withClock(clk), WithPlan(plan3))
	require.NoError(t, err)
	rec, err := j.ReviewPending(context.Background(), "worker 3 was killed\x1b[0m", 0)
	require.NoError(t, err)
	assert.Equal(t, "review-0001.json", rec.Name)
	assert.Equal(t, record.DecisionPending, rec.Decision)
	assert.Equal(t, markerDigest, rec.MarkerDigest)
	assert.Equal(t, record.FileDigest("a.bin"), rec.MarkerFileDigest)
	assert.Equal(t, t0.Unix()+60+30, rec.NotBeforeUTC)
	assert.True(t, rec.Removed)
	assert.Equal(t, "worker 3 was killed [0m", rec.Note)

	after := snapshotFiles(t, dir)
	for n, c := range before {
		if n != record.MarkerName {
			assert.Equal(t, c, after[n], "%s is kept byte for byte", n)
		}
	}
	assert.Equal(t, []string{"plan.json", "review-0001.json", "run.json"}, names(t, dir))
	assert.Contains(t, after["review-0001.json"], `"decision":"pending"`)
	assert.Contains(t, after["review-0001.json"], `"marker":{"digest":"`+markerDigest+`"`)

	// A later invocation: waiting 30 s, then elapsed; the file is unknown.
	at := func(d time.Duration) time.Time { return t0.Add(time.Minute + d) }
	st := reopen(t, dir, at(0)).Status(at(0))
	assert.Equal(t, map[FileState]int{FileAcked: 0, FileInFlight: 0, FileNeverAttempted: 2, FileUnknown: 1, FileReviewed: 0}, st.Files)
	st.Files, st.Shards = nil, nil // the run at a glance: TestStatusAtAGlance
	assert.Equal(t, Status{State: Waiting, ReceivedAtUTC: at(0).Unix(), NotBeforeUTC: at(30 * time.Second).Unix(),
		ServerDelaySeconds: 30, RemainingSeconds: 30, reviewed: true, // Next waits it out (dead-upload-waits)
		Reason: "review-0001.json: pending review of an abandoned request, whose restriction is unknown: waits 30 s until not_before_utc"}, st)
	assert.Equal(t, Waiting, reopen(t, dir, at(29*time.Second)).Status(at(29*time.Second)).State)
	j2 := reopen(t, dir, at(30*time.Second))
	assert.Equal(t, Elapsed, j2.Status(at(30*time.Second)).State)
	c, err := j2.PlanContinuation(plan3, NewApproval, at(30*time.Second))
	require.NoError(t, err)
	assert.Equal(t, FileUnknown, c.Files[0].State)
	assert.Equal(t, "review-0001.json: its request was in flight under a dead marker (pending review): outcome unknown; never replayed, needs operator review", c.Files[0].Reason)
	assert.Equal(t, []string{"b.bin", "c.bin"}, c.Uploads())
	require.ErrorIs(t, j2.Begin(WithUpload(context.Background(), "a.bin"), putReq(t)), errReplay)

	// Then the usual decision review of the unknown file.
	clk.Set(at(30 * time.Second))
	_, err = j.Review(context.Background(), "a.bin", DecisionReupload, "blob absent")
	require.NoError(t, err)
	c, err = reopen(t, dir, at(30*time.Second)).PlanContinuation(plan3, NewApproval, at(30*time.Second))
	require.NoError(t, err)
	assert.Equal(t, []string{"a.bin", "b.bin", "c.bin"}, c.Uploads())
	fs, err := verify(dir)
	require.NoError(t, err)
	assert.Empty(t, fs)
}

// pending-review: --not-before later than review time + 30 s is the bound;
// a marker of a request of no file makes no file unknown; nothing to
// resolve and an unrepresentable --not-before are refused.
func TestPendingReviewNotBefore(t *testing.T) {
	j, _ := newRun(t)
	require.NoError(t, j.Begin(context.Background(), getReq(t)))
	_, err := j.ReviewPending(context.Background(), "", 1<<62)
	require.ErrorIs(t, err, errReviewRefused)
	kill(j)
	j2 := reopen(t, j.Dir(), t0)
	rec, err := j2.ReviewPending(context.Background(), "", t0.Unix()+600)
	require.NoError(t, err)
	assert.Equal(t, t0.Unix()+600, rec.NotBeforeUTC)
	assert.Equal(t, "", rec.MarkerFileDigest)
	st := reopen(t, j.Dir(), t0.Add(599*time.Second)).Status(t0.Add(599 * time.Second))
	assert.Equal(t, Waiting, st.State)
	assert.Equal(t, int64(1), st.RemainingSeconds)
	c, err := reopen(t, j.Dir(), t0.Add(600*time.Second)).PlanContinuation(plan3, NewApproval, t0.Add(600*time.Second))
	require.NoError(t, err)
	assert.Equal(t, []string{"a.bin", "b.bin", "c.bin"}, c.Uploads(), "a GET's marker names no file")

	_, err = reopen(t, j.Dir(), t0).ReviewPending(context.Background(), "", 0)
	require.ErrorIs(t, err, errReviewRefused, "no marker: nothing to resolve")
}

// pending-review: a review that fails to write leaves nothing behind that
// blocks. A pending review whose link fails writes nothing (the run is as
// it was, and a second try works); a decision review whose link fails
// removes its own marker; a pending review written whose marker cannot be
// removed resolves it all the same, and a second one removes it.
func TestFailedReviewLeavesNothingThatBlocks(t *testing.T) {
	t.Run("pending review not written", func(t *testing.T) {
		dir := abandoned(t)
		before := snapshotFiles(t, dir)
		j, err := Open(dir, Existing(), withClock(newFakeClock(t0)), withFS(&failFS{linkFails: "review-"}))
		require.NoError(t, err)
		_, err = j.ReviewPending(context.Background(), "", 0)
		require.ErrorIs(t, err, errInjected)
		assert.Equal(t, before, snapshotFiles(t, dir), "nothing new on disk")
		_, err = reopen(t, dir, t0).ReviewPending(context.Background(), "", 0)
		require.NoError(t, err)
	})
	t.Run("decision review not written", func(t *testing.T) {
		j := unknownRun(t)
		dir := j.Dir()
		before := snapshotFiles(t, dir)
		j, err := Open(dir, Existing(), withClock(newFakeClock(t0)), withFS(&failFS{linkFails: "review-"}))
		require.NoError(t, err)
		_, err = j.Review(context.Background(), "a.bin", DecisionSkip, "")
		require.ErrorIs(t, err, errInjected)
		assert.Equal(t, before, snapshotFiles(t, dir), "its marker is removed again")
		assert.Equal(t, Clear, reopen(t, dir, t0).Status(t0).State)
	})
	t.Run("marker not removed", func(t *testing.T) {
		dir := abandoned(t)
		j, err := Open(dir, Existing(), withClock(newFakeClock(t0)), withFS(&failFS{removeFails: true}))
		require.NoError(t, err)
		rec, err := j.ReviewPending(context.Background(), "", 0)
		require.NoError(t, err)
		assert.False(t, rec.Removed)
		assert.Equal(t, []string{record.MarkerName, "plan.json", "review-0001.json", "run.json"}, names(t, dir))
		j2 := reopen(t, dir, t0)
		assert.Equal(t, Waiting, j2.Status(t0).State, "the resolved marker blocks no status")
		fs, err := verify(dir)
		require.NoError(t, err)
		assert.Empty(t, fs)
		// While its removal keeps failing, a second review is the same
		// review, and a Begin is refused naming it.
		again, err := j.ReviewPending(context.Background(), "", 0)
		require.NoError(t, err)
		assert.Equal(t, rec, again, "the same review, no second one")
		assert.False(t, again.Removed)
		jf, err := Open(dir, Existing(), withClock(newFakeClock(t0.Add(30*time.Second))), withFS(&failFS{removeFails: true}), WithPlan(plan3))
		require.NoError(t, err)
		err = jf.Begin(WithUpload(context.Background(), "b.bin"), putReq(t))
		require.ErrorIs(t, err, ErrPending)
		assert.Contains(t, err.Error(), "resolved by review-0001.json but still present")
		// The next Begin that can remove it finishes it, then goes.
		j3 := reopen(t, dir, t0.Add(30*time.Second))
		require.NoError(t, j3.Begin(WithUpload(context.Background(), "b.bin"), putReq(t)))
		require.NoError(t, j3.Complete(WithUpload(context.Background(), "b.bin"), putReq(t), ok201("b")))
		assert.Equal(t, []string{"plan.json", "receipt-" + record.FileHex(record.FileDigest("b.bin")) + ".json", "review-0001.json", "run.json"}, names(t, dir))
		fs, err = verify(dir)
		require.NoError(t, err)
		assert.Empty(t, fs)
	})
}

// pending-review: a pending review is verified like every review: edited,
// it is a finding and resolves nothing.
func TestPendingReviewIsVerified(t *testing.T) {
	dir := abandoned(t)
	j, err := Open(dir, Existing(), withClock(newFakeClock(t0)), withFS(&failFS{removeFails: true}))
	require.NoError(t, err)
	_, err = j.ReviewPending(context.Background(), "", 0)
	require.NoError(t, err)
	p := filepath.Join(dir, "review-0001.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(b), `"not_before_utc":1700000030`, `"not_before_utc":1700000031`, 1)), 0o600))
	fs, err := verify(dir)
	require.NoError(t, err)
	assert.Equal(t, []Finding{{File: "review-0001.json", Problem: "digest does not match the content (edited)"}, {File: record.MarkerName, Problem: runread.PendingProblem}}, fs)
}

// in-flight: while another worker's marker names a file, a
// Journal opened WithPendingWait plans it in-flight, never never-attempted
// and never eligible; the others stay eligible. Once the request
// completed the file is acked.
func TestInFlightFilesAreNeverEligible(t *testing.T) {
	st := newMemStore()
	a := openMem(t, st, t0)
	b := openMem(t, st, t0, WithPendingWait(time.Second))
	ctx := WithUpload(context.Background(), "a.bin")
	require.NoError(t, a.Begin(ctx, putReq(t)))
	for range 5 {
		c, err := b.PlanContinuation(plan3, NewApproval, t0)
		require.NoError(t, err)
		assert.Equal(t, FileInFlight, c.Files[0].State)
		assert.False(t, c.Files[0].Upload)
		assert.Equal(t, "pending-request.json: another worker's request of this file is in flight; never eligible while it is", c.Files[0].Reason)
		assert.Equal(t, []string{"b.bin", "c.bin"}, c.Uploads())
		assert.Equal(t, "no backoff entries; pending-request.json: another worker's request is in flight", c.Status.Reason)
		assert.Equal(t, 1, c.Count(FileInFlight))
	}
	require.NoError(t, a.Complete(ctx, putReq(t), ok201("r")))
	c, err := b.PlanContinuation(plan3, NewApproval, t0)
	require.NoError(t, err)
	assert.Equal(t, FileAcked, c.Files[0].State)
	assert.Equal(t, 0, c.Count(FileInFlight))
}

// restriction-review: the way out of an entry without timing (a
// Retry-After beyond the representable bound, here): unresolved until an
// operator bounds it; then waiting until the given not-before, elapsed
// after it, verify clean, the entry's file still unknown. An entry with
// its own timing, one bounded already, or a not-before sooner than the
// review time + 30 s are refused.
func TestRestrictionReview(t *testing.T) {
	j, clk := newRun(t)
	ctx := WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(ctx, putReq(t)))
	_, err := j.Backoff(ctx, putReq(t), out429("r"), secs(300000000000), &readrecovery.RetryAfterTiming{ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() + 300000000000, ServerDelaySeconds: 300000000000})
	require.NoError(t, err)
	require.Equal(t, Unresolved, reopen(t, j.Dir(), t0.Add(time.Hour)).Status(t0.Add(time.Hour)).State)

	clk.Set(t0.Add(time.Hour))
	at := t0.Add(time.Hour).Unix()
	for _, tc := range []struct {
		entry string
		nb    int64
	}{{"backoff-0002.json", at + 600}, {"receipt-x.json", at + 600}, {"backoff-0001.json", at + 29}} {
		_, err := j.ReviewRestriction(context.Background(), tc.entry, "", tc.nb)
		require.ErrorIs(t, err, errReviewRefused, "%+v", tc)
	}
	rec, err := j.ReviewRestriction(context.Background(), "backoff-0001.json", "the service's support: 10 minutes", at+600)
	require.NoError(t, err)
	assert.Equal(t, record.DecisionRestriction, rec.Decision)
	assert.Equal(t, "review-0001.json", rec.Name)
	_, err = j.ReviewRestriction(context.Background(), "backoff-0001.json", "", at+900)
	require.ErrorIs(t, err, errReviewRefused, "bounded already")

	st := reopen(t, j.Dir(), time.Unix(at, 0)).Status(time.Unix(at, 0))
	st.Files, st.Shards = nil, nil // the run at a glance: TestStatusAtAGlance
	assert.Equal(t, Status{State: Waiting, ReceivedAtUTC: at, NotBeforeUTC: at + 600, ServerDelaySeconds: 600, RemainingSeconds: 600,
		Reason: "review-0001.json: restriction review of backoff-0001.json, whose server restriction has no timing: waits 600 s until not_before_utc"}, st)
	later := reopen(t, j.Dir(), time.Unix(at+600, 0))
	assert.Equal(t, Elapsed, later.Status(time.Unix(at+600, 0)).State)
	c, err := later.PlanContinuation(plan3, NewApproval, time.Unix(at+600, 0))
	require.NoError(t, err)
	assert.Equal(t, FileUnknown, c.Files[0].State, "the file met 429: unknown")
	assert.Equal(t, []string{"b.bin", "c.bin"}, c.Uploads())
	fs, err := verify(j.Dir())
	require.NoError(t, err)
	assert.Empty(t, fs)

	// Edited, the review bounds nothing: both are findings.
	p := filepath.Join(j.Dir(), "review-0001.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(b), "10 minutes", "10 seconds", 1)), 0o600))
	fs, err = verify(j.Dir())
	require.NoError(t, err)
	require.Len(t, fs, 2)
	assert.Equal(t, "review-0001.json", fs[0].File)
	assert.Equal(t, "backoff-0001.json", fs[1].File)

	// An entry with its own timing needs no bound.
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, plan3, t0, []int64{5}, nil)
	_, err = reopen(t, dir, t0).ReviewRestriction(context.Background(), "backoff-0001.json", "", t0.Unix()+600)
	require.ErrorIs(t, err, errReviewRefused)
}

// pending-review, R83: a review whose head cannot be written leaves
// nothing that blocks for long: its record is in the run, its marker (a
// review's, which sends nothing: dead once the review returns) stays, and
// the next call that may write (here Admit, then Begin) writes the head
// its writer would have written and removes the marker. The run then
// verifies clean and the review counts. The same for a pending review:
// the marker it resolved goes.
func TestReviewWithoutHeadIsFinished(t *testing.T) {
	t.Run("decision review", func(t *testing.T) {
		dir := unknownRun(t).Dir()
		j, err := Open(dir, Existing(), withClock(newFakeClock(t0)), withFS(&failFS{linkFails: "head-"}), WithPlan(plan3))
		require.NoError(t, err)
		_, err = j.Review(context.Background(), "a.bin", DecisionSkip, "checked")
		require.ErrorIs(t, err, errInjected)
		require.Contains(t, names(t, dir), record.MarkerName, "the review's marker is left")
		require.Contains(t, names(t, dir), "review-0001.json")
		st := reopen(t, dir, t0).Status(t0)
		require.Equal(t, Unresolved, st.State, st.Reason)

		k := reopen(t, dir, t0)
		require.NoError(t, k.Admit(WithUpload(context.Background(), "b.bin"), t0))
		require.NotContains(t, names(t, dir), record.MarkerName)
		fs, err := verify(dir)
		require.NoError(t, err)
		require.Empty(t, fs)
		c, err := k.PlanContinuation(plan3, NewApproval, t0)
		require.NoError(t, err)
		require.Equal(t, FileReviewed, c.Files[0].State, c.Files[0].Reason)
		require.Equal(t, DecisionSkip, c.Files[0].Decision)
	})
	t.Run("pending review", func(t *testing.T) {
		// A request of no file (no begun head): its pending review writes
		// the head itself.
		g, _ := newRun(t)
		require.NoError(t, g.Begin(context.Background(), getReq(t)))
		kill(g)
		dir := g.Dir()
		j, err := Open(dir, Existing(), withClock(newFakeClock(t0)), withFS(&failFS{linkFails: "head-"}), WithPlan(plan3))
		require.NoError(t, err)
		_, err = j.ReviewPending(context.Background(), "killed", 0)
		require.ErrorIs(t, err, errInjected)
		require.Contains(t, names(t, dir), record.MarkerName)

		k := reopen(t, dir, t0.Add(30*time.Second))
		require.NoError(t, k.Begin(WithUpload(context.Background(), "b.bin"), putReq(t)))
		require.NoError(t, k.Complete(WithUpload(context.Background(), "b.bin"), putReq(t), ok201("b")))
		require.NotContains(t, names(t, dir), record.MarkerName)
		require.Contains(t, names(t, dir), "review-0001.json", "the review counts")
		fs, err := verify(dir)
		require.NoError(t, err)
		require.Empty(t, fs)
	})
	t.Run("pending review of an upload", func(t *testing.T) {
		// The upload's begun head stands for the review (R85): no head
		// to write, so none to fail.
		dir := abandoned(t)
		j, err := Open(dir, Existing(), withClock(newFakeClock(t0)), withFS(&failFS{linkFails: "head-"}), WithPlan(plan3))
		require.NoError(t, err)
		rec, err := j.ReviewPending(context.Background(), "killed", 0)
		require.NoError(t, err)
		require.True(t, rec.Removed)
		require.Equal(t, []string{"plan.json", "review-0001.json", "run.json"}, names(t, dir))
		fs, err := verify(dir)
		require.NoError(t, err)
		require.Empty(t, fs)
		c, err := reopen(t, dir, t0.Add(30*time.Second)).PlanContinuation(plan3, NewApproval, t0.Add(30*time.Second))
		require.NoError(t, err)
		require.Equal(t, FileUnknown, c.Files[0].State, "the dead worker's file: %s", c.Files[0].Reason)
	})
}
