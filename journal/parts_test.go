package journal

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ok201(id string) readrecovery.JournalOutcome {
	return readrecovery.JournalOutcome{StatusCode: 201, RequestID: id, ETag: `"0x` + id + `"`}
}

// sendPart runs Begin and Complete for one part of id that got out.
func sendPart(t *testing.T, j *Journal, id string, out readrecovery.JournalOutcome) {
	t.Helper()
	ctx := WithUploadPart(context.Background(), id)
	require.NoError(t, j.Begin(ctx, putReq(t)))
	require.NoError(t, j.Complete(ctx, putReq(t), out))
}

func stateOf(t *testing.T, j *Journal, id string) FileDecision {
	t.Helper()
	return decisionOf(t, j, plan3, j.clock.Now(), id)
}

// decisionOf is the continuation's decision for file id of plan at now.
func decisionOf(t *testing.T, j *Journal, plan []PlannedFile, now time.Time, id string) FileDecision {
	t.Helper()
	c, err := j.PlanContinuation(plan, NewApproval, now)
	require.NoError(t, err)
	for _, f := range c.Files {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("%s not in the plan", id)
	return FileDecision{}
}

// TestPartsAreNeverTheACK: three parts of one file, each a 201, leave
// three chained part receipts and the file unknown (not acked); the commit's
// 201 is the ACK; nothing of the file is sent after it.
func TestPartsAreNeverTheACK(t *testing.T) {
	j, _ := newRun(t)
	for i := range 3 {
		sendPart(t, j, "a.bin", ok201("blk"+string(rune('1'+i))))
	}
	hex := record.FileHex(record.FileDigest("a.bin"))
	want := []string{"part-" + hex + "-0001.json", "part-" + hex + "-0002.json", "part-" + hex + "-0003.json", "plan.json", "run.json"}
	require.Equal(t, want, names(t, j.Dir()))
	requirePrivate(t, j.Dir())
	fd := stateOf(t, j, "a.bin")
	assert.Equal(t, FileUnknown, fd.State, "parts-are-not-acks: parts without a committed ACK are unknown")
	assert.False(t, fd.Upload)
	assert.Contains(t, fd.Reason, "part-"+hex+"-0001.json")

	p2 := readJSONFile(t, filepath.Join(j.Dir(), want[1]))
	p1 := readJSONFile(t, filepath.Join(j.Dir(), want[0]))
	b2 := p2["body"].(map[string]any)
	assert.Equal(t, 2.0, b2["part"])
	assert.Equal(t, true, b2["accepted"])
	assert.Nil(t, b2["ack"], "a part has no ACK field")
	assert.Equal(t, 2.0, p2["seq"])
	assert.Equal(t, map[string]any{"name": want[0], "digest": p1["digest"]}, p2["prev"], "parts are in the run's one chain")
	assert.Len(t, p2, 5, "one envelope (seq, kind, prev, body, digest): no second chain beside the run's")
	assert.Nil(t, b2["previous_digest"], "no second chain beside the run's")

	commit := WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(commit, putReq(t)))
	require.NoError(t, j.Complete(commit, putReq(t), ok201("commit")))
	assert.Equal(t, FileAcked, stateOf(t, j, "a.bin").State)
	r := readBody(t, filepath.Join(j.Dir(), receiptName(record.FileDigest("a.bin"))))
	assert.Equal(t, true, r["ack"])
	assert.Equal(t, "commit", r["request_id"])

	for _, ctx := range []context.Context{commit, WithUploadPart(context.Background(), "a.bin")} {
		err := j.Begin(ctx, putReq(t))
		require.ErrorIs(t, err, errReplay)
		require.ErrorIs(t, err, readrecovery.ErrReplayRefused, "refusal-says-what-it-is: the transport stops it as replay-refused")
	}
	findings, err := verify(j.Dir())
	require.NoError(t, err)
	require.Empty(t, findings)
	require.NotContains(t, names(t, j.Dir()), record.MarkerName)
}

// TestPartWith429: a part that meets 429 gets a backoff entry marked
// part; its queue-429 re-send is allowed (this Journal's upload), and the
// part receipt names the entry.
func TestPartWith429(t *testing.T) {
	j, clk := newRun(t)
	ctx := WithUploadPart(context.Background(), "b.bin")
	d := record429(t, j, ctx, putReq(t), secs(2), timing(t0, 2))
	e := readBody(t, filepath.Join(j.Dir(), "backoff-0001.json"))
	prov := e["provenance"].(map[string]any)
	assert.Equal(t, true, prov["part"])
	assert.Equal(t, record.FileDigest("b.bin"), prov["file_digest"])

	clk.Set(t0.Add(2 * time.Second))
	r2 := putReq(t)
	r2.Attempt, r2.ResendOf = 2, d
	require.NoError(t, j.Begin(ctx, r2))
	require.NoError(t, j.Complete(ctx, r2, ok201("b2")))
	p := readBody(t, filepath.Join(j.Dir(), record.PartName(record.FileDigest("b.bin"), 1)))
	assert.Equal(t, d, p["resend_of"])
	assert.Equal(t, 2.0, p["attempt"])
	assert.Equal(t, FileUnknown, stateOf(t, j, "b.bin").State)
}

// TestAnotherInvocationsPartsAreUnknown: a later Journal (a new
// invocation) must not continue or restart an upload whose parts an
// earlier one sent: the file is unknown until a review.
func TestAnotherInvocationsPartsAreUnknown(t *testing.T) {
	j, _ := newRun(t)
	sendPart(t, j, "a.bin", ok201("p1"))
	sendPart(t, j, "a.bin", ok201("p2"))
	later := reopen(t, j.Dir(), t0)
	before := names(t, j.Dir())
	for _, ctx := range []context.Context{WithUploadPart(context.Background(), "a.bin"), WithUpload(context.Background(), "a.bin")} {
		err := later.Begin(ctx, putReq(t))
		require.ErrorIs(t, err, errReplay)
		require.ErrorIs(t, err, readrecovery.ErrReplayRefused)
	}
	require.Equal(t, before, names(t, j.Dir()), "a refusal leaves nothing behind")
	fd := stateOf(t, later, "a.bin")
	assert.Equal(t, FileUnknown, fd.State)
	assert.False(t, fd.Upload)
	// The first Journal continues its own upload.
	sendPart(t, j, "a.bin", ok201("p3"))
}

// TestRefusalsSayWhatTheyAre: every refusal of Begin has its own class.
func TestRefusalsSayWhatTheyAre(t *testing.T) {
	j, _ := newRun(t)
	commit := WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(commit, putReq(t)))
	require.NoError(t, j.Complete(commit, putReq(t), ok201("a")))

	err := j.Begin(commit, putReq(t))
	require.ErrorIs(t, err, errReplay)
	require.ErrorIs(t, err, readrecovery.ErrReplayRefused)
	var re *RestrictedError
	require.False(t, errors.As(err, &re))

	err = j.Begin(WithUpload(context.Background(), "zzz"), putReq(t))
	require.ErrorIs(t, err, ErrPlanMismatch)
	require.ErrorIs(t, err, readrecovery.ErrReplayRefused)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = j.Begin(ctx, getReq(t))
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, readrecovery.ErrReplayRefused)
	require.NotErrorIs(t, err, ErrRestricted)

	record429(t, j, context.Background(), getReq(t), secs(9), timing(t0, 9))
	err = j.Begin(context.Background(), getReq(t))
	require.ErrorAs(t, err, &re)
	require.Equal(t, Waiting, re.Status.State)
	require.NotErrorIs(t, err, readrecovery.ErrReplayRefused)
	var marked interface{ JournalRestricted() }
	require.ErrorAs(t, err, &marked, "a transport can tell a restriction from a persistence failure")
	require.Equal(t, []string{"backoff-0001.json", "plan.json", receiptName(record.FileDigest("a.bin")), "run.json"}, names(t, j.Dir()))
}

// TestSlotWaitEndsWithTheContext: a Begin waiting for this Journal's
// request in flight returns the context's error at exactly its deadline
// (the transport passes the sequence's deadline), and at once on a cancel,
// writing nothing.
func TestSlotWaitEndsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, _ := newRun(t)
		require.NoError(t, j.Begin(context.Background(), getReq(t)))
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := j.Begin(WithUpload(ctx, "a.bin"), putReq(t))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 2*time.Second, time.Since(start), "journal-slot-honours-deadline: the wait ends at the deadline, not later")

		ctx2, cancel2 := context.WithCancel(context.Background())
		var err2 error
		done := make(chan struct{})
		go func() { err2 = j.Begin(ctx2, getReq(t)); close(done) }()
		time.Sleep(time.Second)
		synctest.Wait()
		cancel2()
		<-done
		require.ErrorIs(t, err2, context.Canceled)
		require.Equal(t, 3*time.Second, time.Since(start))

		require.Equal(t, []string{"pending-request.json", "plan.json", "run.json"}, names(t, j.Dir()))
		require.NoError(t, j.Complete(context.Background(), getReq(t), readrecovery.JournalOutcome{StatusCode: 200}))
		require.Equal(t, []string{"plan.json", "run.json"}, names(t, j.Dir()))
	})
}

// hookFS is the real file system that calls hook just before it creates
// the pending marker, and again just after the marker is durable (the
// directory fsync that follows it): the two points where another process
// can act between a claim and a check.
type hookFS struct {
	fsys.OS
	mu            sync.Mutex
	markerPending bool
	beforeClaim   func()
	afterClaim    func()
}

func (h *hookFS) OpenFile(name string, flag int, perm os.FileMode) (fsys.File, error) {
	if final, _ := record.ParseTempName(filepath.Base(name)); final == record.MarkerName && flag&os.O_EXCL != 0 {
		if h.beforeClaim != nil {
			f := h.beforeClaim
			h.beforeClaim = nil
			f()
		}
		h.mu.Lock()
		h.markerPending = true
		h.mu.Unlock()
	}
	return h.OS.OpenFile(name, flag, perm)
}

func (h *hookFS) SyncDir(name string) error {
	err := h.OS.SyncDir(name)
	h.mu.Lock()
	fire := h.markerPending
	h.markerPending = false
	h.mu.Unlock()
	if fire && h.afterClaim != nil {
		f := h.afterClaim
		h.afterClaim = nil
		f()
	}
	return err
}

// TestClaimThenCheck: two Journals on one run directory (two
// processes). B is paused between its first check and its claim while A
// uploads the same file (ACK) or records a 60 s restriction; under its
// claim B sees A's records and is refused: there is no second
// authorisation. Paused after its claim, B holds the marker and A is
// refused.
func TestClaimThenCheck(t *testing.T) {
	sent := func(t *testing.T, a *Journal, ctx context.Context) {
		require.NoError(t, a.Begin(ctx, putReq(t)), "A is authorised")
		require.NoError(t, a.Complete(ctx, putReq(t), ok201("a")))
	}
	t.Run("ACK between check and claim", func(t *testing.T) {
		a, _ := newRun(t)
		h := &hookFS{}
		b, err := Open(a.Dir(), Existing(), withFS(h), withClock(newFakeClock(t0)), WithPlan(plan3))
		require.NoError(t, err)
		commit := WithUpload(context.Background(), "a.bin")
		h.beforeClaim = func() { sent(t, a, commit) }
		err = b.Begin(commit, putReq(t))
		require.ErrorIs(t, err, errReplay, "journal-claim-then-check: B must not be authorised to re-upload an acked file")
		require.ErrorIs(t, err, readrecovery.ErrReplayRefused)
		require.Equal(t, []string{"plan.json", receiptName(record.FileDigest("a.bin")), "run.json"}, names(t, a.Dir()), "B's claim was removed")
		require.Equal(t, Clear, b.Status(t0).State)
	})
	t.Run("restriction between check and claim", func(t *testing.T) {
		a, _ := newRun(t)
		h := &hookFS{}
		b, err := Open(a.Dir(), Existing(), withFS(h), withClock(newFakeClock(t0.Add(time.Second))), WithPlan(plan3))
		require.NoError(t, err)
		h.beforeClaim = func() { record429(t, a, context.Background(), getReq(t), overlong, timing(t0, 60)) }
		err = b.Begin(WithUpload(context.Background(), "b.bin"), putReq(t))
		var re *RestrictedError
		require.ErrorAs(t, err, &re, "journal-claim-then-check: B must not send during A's restriction")
		require.Equal(t, Waiting, re.Status.State)
		require.Equal(t, int64(59), re.Status.RemainingSeconds)
		require.Equal(t, []string{"backoff-0001.json", "plan.json", "run.json"}, names(t, a.Dir()))
	})
	t.Run("other process after the claim", func(t *testing.T) {
		a, _ := newRun(t)
		h := &hookFS{}
		b, err := Open(a.Dir(), Existing(), withFS(h), withClock(newFakeClock(t0)), WithPlan(plan3))
		require.NoError(t, err)
		commit := WithUpload(context.Background(), "a.bin")
		var aErr error
		h.afterClaim = func() { aErr = a.Begin(commit, putReq(t)) }
		require.NoError(t, b.Begin(commit, putReq(t)), "B claimed first")
		require.ErrorIs(t, aErr, ErrPending, "A is refused while B holds the marker")
		require.ErrorIs(t, aErr, ErrRestricted)
		require.NoError(t, b.Complete(commit, putReq(t), ok201("b")))
		require.ErrorIs(t, a.Begin(commit, putReq(t)), errReplay, "and after it, A sees B's ACK")
	})
}

// TestEarlierFormatDoesNotOpen: a run written by this project's code
// before the one record model (commit 93c5847: entries chained among
// themselves, records without a place in the run's chain, no head, each
// kind's own name for its digest) was
// never released and need not open (R82): it does not verify, is
// unresolved, and sends nothing; nothing of it is rewritten.
func TestEarlierFormatDoesNotOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	copyDir(t, filepath.Join("testdata", "run-93c5847"), dir) // git keeps no 0600/0700
	before := names(t, dir)
	findings, err := verify(dir)
	require.NoError(t, err)
	var lines []string
	for _, f := range findings {
		lines = append(lines, f.String())
	}
	require.Equal(t, []string{
		"run.json: digest does not match the content (edited)",
		"backoff-0001.json: not a record envelope (an earlier, unreleased format, or made by hand)",
		"backoff-0002.json: not a record envelope (an earlier, unreleased format, or made by hand)",
		"receipt-4fef9cffec13baaa0b8bab5ae61005c5.json: not a record envelope (an earlier, unreleased format, or made by hand)",
		"receipt-87b6c6feb9fc94a9998018df8566c728.json: not a record envelope (an earlier, unreleased format, or made by hand)",
	}, lines)
	j, err := Open(dir, WithPlan(plan3), withClock(newFakeClock(t0.Add(20*time.Second))))
	require.NoError(t, err)
	require.Equal(t, Unresolved, j.Status(t0.Add(20*time.Second)).State)
	c, err := j.PlanContinuation(plan3, NewApproval, t0.Add(20*time.Second))
	require.ErrorIs(t, err, runread.ErrCorrupt, "its manifest is not of this format: nothing is planned")
	require.Empty(t, c.Uploads(), "an unresolved run sends nothing")
	require.ErrorIs(t, j.Admit(context.Background(), t0.Add(20*time.Second)), ErrRestricted)
	require.Equal(t, before, names(t, dir))
}

func readJSONFile(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// readBody is the body of the record at path (its envelope's "body").
func readBody(t *testing.T, path string) map[string]any {
	t.Helper()
	b, ok := readJSONFile(t, path)["body"].(map[string]any)
	require.True(t, ok, "%s is a record envelope", path)
	return b
}
