package journal

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewRunIsPrivateAndVersioned: Open creates a 0700 directory whose
// only file is a 0600 run.json declaring backoff_version 1.0 and the plan.
func TestNewRunIsPrivateAndVersioned(t *testing.T) {
	j, _ := newRun(t)
	require.Equal(t, []string{"plan.json", "run.json"}, names(t, j.Dir()))
	requirePrivate(t, j.Dir())

	var m map[string]any
	b, err := os.ReadFile(filepath.Join(j.Dir(), "run.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &m))
	_, pd, _ := digestOfPlan(plan3)
	assert.Equal(t, "1.0", m["backoff_version"])
	assert.Equal(t, pd, m["plan_digest"])
	assert.Equal(t, float64(t0.Unix()), m["created_at_utc"])
	assert.Len(t, m, 4)
	assert.True(t, record.IsDigest(m["digest"].(string)))
	assert.Equal(t, Clear, j.Status(t0).State)
}

// TestOpenAloneWorks: Open(dir) with no option creates a run with the
// empty plan and the real clock; OpenExisting never creates one.
func TestOpenAloneWorks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	_, err := Open(dir, Existing())
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, fs.ErrNotExist, "OpenExisting must not create the directory")

	j, err := Open(dir)
	require.NoError(t, err)
	require.Equal(t, Clear, j.Status(time.Now()).State)
	j2, err := Open(dir, Existing())
	require.NoError(t, err)
	require.Equal(t, Clear, j2.Status(time.Now()).State)

	empty := t.TempDir()
	_, err = Open(empty, Existing())
	require.ErrorIs(t, err, fs.ErrNotExist, "an empty directory holds no run")
	require.Empty(t, names(t, empty))
}

// TestPlanMismatch: reopening with another plan fails.
func TestPlanMismatch(t *testing.T) {
	j, _ := newRun(t)
	_, err := Open(j.Dir(), WithPlan([]PlannedFile{{ID: "other"}}))
	require.ErrorIs(t, err, ErrPlanMismatch)
	_, err = Open(j.Dir(), WithPlan(plan3[:0]))
	require.ErrorIs(t, err, ErrPlanMismatch)
	_, err = Open(j.Dir(), WithPlan([]PlannedFile{plan3[2], plan3[0], plan3[1]}))
	require.NoError(t, err, "the order of the plan does not matter")
	_, err = Open(filepath.Join(t.TempDir(), "x"), WithPlan([]PlannedFile{{ID: "a"}, {ID: "a"}}))
	require.Error(t, err)
}

// TestFilesAfterEachStep asserts the exact file names and modes on
// disk after every step of a queue-429 upload: attempt 1 meets 429, attempt
// 2 names its event digest and gets the ACK.
func TestFilesAfterEachStep(t *testing.T) {
	j, clk := newRun(t)
	dir := j.Dir()
	ctx := WithUpload(context.Background(), "a.bin")
	req := putReq(t)

	require.NoError(t, j.Admit(ctx, t0))
	require.NoError(t, j.Begin(ctx, req))
	require.Equal(t, []string{"pending-request.json", "plan.json", "run.json"}, names(t, dir))
	requirePrivate(t, dir)
	assert.Equal(t, Unresolved, j.Status(t0).State, "journal-claim-then-check: while the marker exists the on-disk state is unresolved")
	assert.NoError(t, j.Admit(ctx, t0), "the marker of this Journal's own request does not block Admit")

	d1, err := j.Backoff(ctx, req, out429("req-1"), secs(2), timing(t0, 2))
	require.NoError(t, err)
	require.Equal(t, []string{"backoff-0001.json", "plan.json", "run.json"}, names(t, dir))
	requirePrivate(t, dir)
	assert.Equal(t, Waiting, j.Status(t0).State)

	var re *RestrictedError
	require.ErrorAs(t, j.Admit(ctx, t0.Add(time.Second)), &re, "status-before-network: waiting blocks")
	assert.ErrorIs(t, re, ErrRestricted)
	assert.Equal(t, int64(1), re.Status.RemainingSeconds)

	later := t0.Add(2 * time.Second)
	clk.Set(later)
	require.NoError(t, j.Admit(ctx, later))
	req2 := req
	req2.Attempt, req2.ResendOf = 2, d1
	require.NoError(t, j.Begin(ctx, req2))
	require.Equal(t, []string{"backoff-0001.json", "pending-request.json", "plan.json", "run.json"}, names(t, dir))
	require.NoError(t, j.Complete(ctx, req2, readrecovery.JournalOutcome{StatusCode: 201, RequestID: "req-2", ETag: `"0x8DB"`}))
	rn := receiptName(record.FileDigest("a.bin"))
	require.Equal(t, []string{"backoff-0001.json", "plan.json", rn, "run.json"}, names(t, dir))
	requirePrivate(t, dir)

	var r map[string]any
	b, err := os.ReadFile(filepath.Join(dir, rn))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &r))
	r = r["body"].(map[string]any)
	assert.Equal(t, true, r["ack"])
	assert.Equal(t, float64(201), r["status"])
	assert.Equal(t, "req-2", r["request_id"])
	assert.Equal(t, `"0x8DB"`, r["etag"])
	assert.Equal(t, float64(2), r["attempt"])
	assert.Equal(t, d1, r["resend_of"])
	assert.Equal(t, record.FileDigest("a.bin"), r["file_digest"])

	// A non-upload request leaves nothing behind.
	require.NoError(t, j.Begin(context.Background(), getReq(t)))
	require.NoError(t, j.Complete(context.Background(), getReq(t), readrecovery.JournalOutcome{StatusCode: 200}))
	require.Equal(t, []string{"backoff-0001.json", "plan.json", rn, "run.json"}, names(t, dir))

	// Reopened, the run says the same.
	j2 := reopen(t, dir, later)
	assert.Equal(t, Elapsed, j2.Status(later).State)
	findings, err := verify(dir)
	require.NoError(t, err)
	assert.Empty(t, findings)
}

// TestEntryFields asserts every JSON field of an entry, its digest
// and the chain, and that nothing secret reaches the file (nothing-secret-leaves).
func TestEntryFields(t *testing.T) {
	j, clk := newRun(t)
	ctx := WithUpload(context.Background(), "b.bin")
	req := putReq(t)
	d1 := record429(t, j, ctx, req, secs(5), timing(t0, 5))
	clk.Set(t0.Add(5 * time.Second))

	req2 := req
	req2.Attempt, req2.ResendOf = 2, d1
	require.NoError(t, j.Begin(ctx, req2))
	d2, err := j.Backoff(ctx, req2, out429("bad id with spaces"), overlong, timing(t0.Add(5*time.Second), 60))
	require.NoError(t, err)

	b, err := os.ReadFile(filepath.Join(j.Dir(), "backoff-0002.json"))
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(b), "}\n"))
	for _, secret := range []string{"SECRETSIG", "sig=", "acct.file.core.windows.net", "file-1.bin", "b.bin", "spaces"} {
		assert.NotContains(t, string(b), secret, "nothing-secret-leaves")
	}
	var e map[string]any
	require.NoError(t, json.Unmarshal(b, &e))
	_, pd, _ := digestOfPlan(plan3)
	body := map[string]any{
		"backoff_version": "1.0",
		"sequence":        float64(2),
		"plan_digest":     pd,
		"method":          "PUT",
		"url_digest":      urlDigest(t, secretURL),
		"request_id":      e["request_id"],
		"status":          float64(429),
		"retry_after":     map[string]any{"kind": "overlong", "value": float64(0)},
		"timing": map[string]any{"received_at_utc": float64(t0.Unix() + 5), "not_before_utc": float64(t0.Unix() + 65),
			"server_delay_seconds": float64(60)},
		"provenance": map[string]any{"file_digest": record.FileDigest("b.bin"), "attempt": float64(2), "resend_of": d1},
	}
	eb, _ := e["body"].(map[string]any)
	body["request_id"] = eb["request_id"]
	want := map[string]any{
		"seq":    float64(2),
		"kind":   "backoff",
		"prev":   map[string]any{"name": "backoff-0001.json", "digest": d1},
		"body":   body,
		"digest": d2,
	}
	assert.Equal(t, want, e)
	assert.Regexp(t, `^sha256:[0-9a-f]{16}$`, eb["request_id"], "sanitized-request-ids: sanitized request ID")

	// The event digest is the SHA-256 of the canonical envelope without it.
	canonical := strings.Replace(strings.TrimSuffix(string(b), "\n"), `,"digest":"`+d2+`"`, "", 1)
	assert.Equal(t, record.DigestOf([]byte(canonical)), d2)
	ee, _, _, err := record.Unseal(b)
	require.NoError(t, err)
	assert.Equal(t, d2, ee.Digest)

	// The first record of the run's chain names the manifest's own digest.
	b1, _ := os.ReadFile(filepath.Join(j.Dir(), "backoff-0001.json"))
	m, _ := os.ReadFile(filepath.Join(j.Dir(), "run.json"))
	mi, err := record.ParseManifest(m)
	require.NoError(t, err)
	e1, _, _, err := record.Unseal(b1)
	require.NoError(t, err)
	assert.Equal(t, record.Env{Seq: 1, Prev: record.Link{Name: record.ManifestName, Digest: mi.Genesis}, Digest: d1}, e1)
}

// TestResendMustNameAnEntry: a re-send whose resend_of names no entry
// of this run is refused before the network.
func TestResendMustNameAnEntry(t *testing.T) {
	j, _ := newRun(t)
	req := putReq(t)
	req.Attempt, req.ResendOf = 2, record.DigestOf([]byte("nothing"))
	require.Error(t, j.Begin(WithUpload(context.Background(), "a.bin"), req))
	require.Equal(t, []string{"plan.json", "run.json"}, names(t, j.Dir()))
}

// step is one row of a status table: the status at a time.
type step struct {
	at   time.Time
	want Status
}

// runSteps checks j.Status at fixed times, as rate_test.go does.
func runSteps(t *testing.T, j *Journal, steps []step) {
	t.Helper()
	for i, s := range steps {
		got := j.Status(s.at)
		got.cause = nil
		got.Files, got.Shards = nil, nil // the run at a glance: TestStatusAtAGlance
		if s.want.Reason == "" {
			got.Reason = ""
		}
		assert.Equal(t, s.want, got, "step %d at t0%+v", i, s.at.Sub(t0))
	}
}

// TestStatusTable: clear → waiting (exact remaining) → elapsed;
// a 60 s overlong delay keeps the run waiting for 60 s, not 30; a clock
// before the receipt time is unresolved.
func TestStatusTable(t *testing.T) {
	j, clk := newRun(t)
	runSteps(t, j, []step{{t0, Status{State: Clear, Reason: "no backoff entries"}}})

	ctx := WithUpload(context.Background(), "a.bin")
	record429(t, j, ctx, putReq(t), secs(5), timing(t0, 5))
	w := func(rem int64) Status {
		return Status{State: Waiting, ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() + 5, ServerDelaySeconds: 5, RemainingSeconds: rem}
	}
	el := Status{State: Elapsed, ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() + 5, ServerDelaySeconds: 5}
	runSteps(t, j, []step{
		{t0, w(5)},
		{t0.Add(1 * time.Millisecond), w(5)},
		{t0.Add(999 * time.Millisecond), w(5)},
		{t0.Add(1 * time.Second), w(4)},
		{t0.Add(4*time.Second + time.Nanosecond), w(1)},
		{t0.Add(5 * time.Second), el},
		{t0.Add(time.Hour), el},
		{t0.Add(-time.Second), Status{State: Unresolved, ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() + 5, ServerDelaySeconds: 5,
			Reason: "clock regression: now (1699999999) is before received_at_utc 1700000000 recorded in backoff-0001.json"}},
	})

	// not-before-survives: an overlong 60 s delay at t0+10 keeps the run waiting until
	// t0+70 — not until t0+40 (a new 30 s budget).
	t10 := t0.Add(10 * time.Second)
	clk.Set(t10)
	// (Another file: a.bin is unknown since its 429 and never sent again.)
	record429(t, j, WithUpload(context.Background(), "b.bin"), putReq(t), overlong, timing(t10, 60))
	o := func(rem int64) Status {
		return Status{State: Waiting, ReceivedAtUTC: t10.Unix(), NotBeforeUTC: t10.Unix() + 60, ServerDelaySeconds: 60, RemainingSeconds: rem}
	}
	runSteps(t, j, []step{
		{t10, o(60)},
		{t10.Add(30 * time.Second), o(30)},
		{t10.Add(31 * time.Second), o(29)},
		{t10.Add(59 * time.Second), o(1)},
		{t10.Add(60 * time.Second), Status{State: Elapsed, ReceivedAtUTC: t10.Unix(), NotBeforeUTC: t10.Unix() + 60, ServerDelaySeconds: 60}},
		{t0.Add(9 * time.Second), Status{State: Unresolved, ReceivedAtUTC: t10.Unix(), NotBeforeUTC: t10.Unix() + 60, ServerDelaySeconds: 60}},
	})

	// The same across invocations: a new process sees the retained
	// not_before, with nothing carried but the UTC seconds.
	j2 := reopen(t, j.Dir(), t10.Add(45*time.Second))
	runSteps(t, j2, []step{{t10.Add(45 * time.Second), o(15)}})
	var re *RestrictedError
	require.ErrorAs(t, j2.Admit(context.Background(), t10.Add(45*time.Second)), &re)
	require.Equal(t, Waiting, re.Status.State)
	require.NoError(t, j2.Admit(context.Background(), t10.Add(60*time.Second)))

	// A later, shorter restriction (another process's, say) does not
	// shorten the latest one.
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, plan3, t0, []int64{60, 1}, nil)
	runSteps(t, reopen(t, dir, t0), []step{{t0.Add(3 * time.Second), Status{State: Waiting, ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() + 60, ServerDelaySeconds: 60, RemainingSeconds: 57}}})
}

// TestUntimedIsUnresolved: typed-only metadata (missing, invalid,
// overlong without timing) and oversized entries are unresolved, never a
// zero wait; a missing field with its diagnosed 1 s timing waits 1 s.
func TestUntimedIsUnresolved(t *testing.T) {
	for _, kind := range []readrecovery.RetryAfterKind{readrecovery.RetryAfterMissing, readrecovery.RetryAfterInvalid,
		readrecovery.RetryAfterOverlong, readrecovery.RetryAfterOversized} {
		t.Run(string(kind), func(t *testing.T) {
			j, _ := newRun(t)
			record429(t, j, context.Background(), getReq(t), readrecovery.RetryAfter{Kind: kind}, nil)
			st := j.Status(t0.Add(time.Hour))
			assert.Equal(t, Unresolved, st.State)
			assert.Contains(t, st.Reason, "backoff-0001.json: retry_after "+string(kind))
			assert.Equal(t, Unresolved, reopen(t, j.Dir(), t0).Status(t0.Add(time.Hour)).State)
			b, _ := st.CommandJSON()
			assert.Contains(t, string(b), `"received_at_utc":null`)
			assert.Contains(t, string(b), `"remaining_seconds":null`)
		})
	}
	t.Run("oversized with timing", func(t *testing.T) {
		j, _ := newRun(t)
		record429(t, j, context.Background(), getReq(t), readrecovery.RetryAfter{Kind: readrecovery.RetryAfterOversized}, timing(t0, 1))
		assert.Equal(t, Unresolved, j.Status(t0.Add(time.Hour)).State)
	})
	t.Run("missing with fallback timing", func(t *testing.T) {
		j, _ := newRun(t)
		record429(t, j, context.Background(), getReq(t), readrecovery.RetryAfter{Kind: readrecovery.RetryAfterMissing}, timing(t0, 1))
		runSteps(t, j, []step{
			{t0, Status{State: Waiting, ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() + 1, ServerDelaySeconds: 1, RemainingSeconds: 1}},
			{t0.Add(time.Second), Status{State: Elapsed, ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() + 1, ServerDelaySeconds: 1}},
		})
	})
}

// TestInvalidBackoffIsAPersistenceFailure: an impossible timing or an
// unknown kind is not recorded; Backoff fails, the marker stays, and the
// run is unresolved (in this process and the next).
func TestInvalidBackoffIsAPersistenceFailure(t *testing.T) {
	for name, tc := range map[string]struct {
		ra readrecovery.RetryAfter
		tm *readrecovery.RetryAfterTiming
	}{
		"unknown kind":       {readrecovery.RetryAfter{Kind: "soon"}, timing(t0, 1)},
		"inconsistent":       {secs(5), &readrecovery.RetryAfterTiming{ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() + 1, ServerDelaySeconds: 5}},
		"negative delay":     {secs(0), &readrecovery.RetryAfterTiming{ReceivedAtUTC: t0.Unix(), NotBeforeUTC: t0.Unix() - 5, ServerDelaySeconds: -5}},
		"overlong has value": {readrecovery.RetryAfter{Kind: readrecovery.RetryAfterOverlong, Value: 60}, timing(t0, 60)},
	} {
		t.Run(name, func(t *testing.T) {
			j, _ := newRun(t)
			require.NoError(t, j.Begin(context.Background(), getReq(t)))
			_, err := j.Backoff(context.Background(), getReq(t), out429("r"), tc.ra, tc.tm)
			require.Error(t, err)
			assert.Equal(t, []string{"pending-request.json", "plan.json", "run.json"}, names(t, j.Dir()))
			assert.Equal(t, Unresolved, j.Status(t0).State)
			assert.ErrorIs(t, j.Admit(context.Background(), t0), ErrRestricted)
			st := reopen(t, j.Dir(), t0).Status(t0)
			assert.Equal(t, Unresolved, st.State)
			assert.Equal(t, "pending-request.json: "+runread.PendingProblem, st.Reason)
		})
	}
}

// TestPendingMarkerBlocks: a marker left by an earlier process makes
// the run unresolved, Admit and Begin refuse with ErrPending, and nothing
// is written.
func TestPendingMarkerBlocks(t *testing.T) {
	j, _ := newRun(t)
	require.NoError(t, os.WriteFile(filepath.Join(j.Dir(), record.MarkerName), []byte("{}"), 0o600))
	err := j.Admit(context.Background(), t0)
	var re *RestrictedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, Unresolved, re.Status.State)
	assert.ErrorIs(t, err, ErrPending)
	assert.ErrorIs(t, j.Begin(context.Background(), getReq(t)), ErrPending)
	assert.Equal(t, []string{"pending-request.json", "plan.json", "run.json"}, names(t, j.Dir()))
}

// TestReadsAnotherProcessesRecords: Admit re-reads the directory, so a
// restriction written by another process blocks this one.
func TestReadsAnotherProcessesRecords(t *testing.T) {
	a, _ := newRun(t)
	b := reopen(t, a.Dir(), t0)
	require.NoError(t, b.Admit(context.Background(), t0))
	record429(t, a, context.Background(), getReq(t), secs(9), timing(t0, 9))
	var re *RestrictedError
	require.ErrorAs(t, b.Admit(context.Background(), t0.Add(time.Second)), &re)
	assert.Equal(t, int64(8), re.Status.RemainingSeconds)
	// b cannot append a conflicting entry 0001 either: Begin re-reads.
	require.ErrorIs(t, b.Begin(context.Background(), getReq(t)), ErrRestricted)
}

// TestConcurrentBeginsAreOrdered: a second Begin of the same Journal waits
// for the request in flight, then sees its restriction (safe for concurrent
// use; run with -race). In a synctest bubble, synctest.Wait is the moment
// the second Begin is blocked on the slot.
func TestConcurrentBeginsAreOrdered(t *testing.T) {
	synctest.Test(t, testConcurrentBeginsAreOrdered)
}

func testConcurrentBeginsAreOrdered(t *testing.T) {
	j, clk := newRun(t)
	require.NoError(t, j.Begin(context.Background(), getReq(t)))
	var wg sync.WaitGroup
	var err2 error
	wg.Add(1)
	go func() {
		defer wg.Done()
		err2 = j.Begin(context.Background(), getReq(t))
	}()
	synctest.Wait() // the goroutine is blocked on the slot
	_, err := j.Backoff(context.Background(), getReq(t), out429("x"), secs(3), timing(t0, 3))
	require.NoError(t, err)
	wg.Wait()
	require.ErrorIs(t, err2, ErrRestricted, "the second request must see the first one's 429")

	clk.Set(t0.Add(3 * time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, j.Begin(ctx, getReq(t)))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, j.Begin(ctx2, getReq(t)), context.DeadlineExceeded)
	cancel()
	require.NoError(t, j.Complete(ctx, getReq(t), readrecovery.JournalOutcome{StatusCode: 200}))
	require.Equal(t, []string{"backoff-0001.json", "plan.json", "run.json"}, names(t, j.Dir()))
}

// TestCompleteRefuses429: a 429 passed to Complete instead of Backoff
// keeps the marker, so the restriction is not silently lost.
func TestCompleteRefuses429(t *testing.T) {
	j, _ := newRun(t)
	require.NoError(t, j.Begin(context.Background(), getReq(t)))
	require.Error(t, j.Complete(context.Background(), getReq(t), out429("x")))
	require.Equal(t, []string{"pending-request.json", "plan.json", "run.json"}, names(t, j.Dir()))
	require.Equal(t, Unresolved, reopen(t, j.Dir(), t0).Status(t0).State)
}

// TestCompleteWithoutBegin fails and writes nothing.
func TestCompleteWithoutBegin(t *testing.T) {
	j, _ := newRun(t)
	require.Error(t, j.Complete(context.Background(), getReq(t), readrecovery.JournalOutcome{StatusCode: 200}))
	_, err := j.Backoff(context.Background(), getReq(t), out429("x"), secs(1), timing(t0, 1))
	require.Error(t, err)
	require.Equal(t, []string{"plan.json", "run.json"}, names(t, j.Dir()))
}

// TestReplayGuard: Begin refuses an upload whose outcome is recorded
// and a file outside the plan.
func TestReplayGuard(t *testing.T) {
	j, _ := newRun(t)
	ctx := WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(ctx, putReq(t)))
	require.NoError(t, j.Complete(ctx, putReq(t), readrecovery.JournalOutcome{StatusCode: 500, RequestID: "r"}))
	require.ErrorIs(t, j.Begin(ctx, putReq(t)), errReplay)
	require.ErrorIs(t, j.Begin(WithUpload(context.Background(), "zzz"), putReq(t)), ErrPlanMismatch)
	// A GET of the same file is not an upload.
	require.NoError(t, j.Begin(ctx, getReq(t)))
	require.NoError(t, j.Complete(ctx, getReq(t), readrecovery.JournalOutcome{StatusCode: 200}))
}

// TestTamperIsUnresolved: an edited byte (at every position), a
// truncation, two swapped entries, a deleted middle entry, an extra file,
// a loosened mode or a deleted manifest make the run unresolved with a
// reason naming the file; never clear, never elapsed.
func TestTamperIsUnresolved(t *testing.T) {
	base := filepath.Join(t.TempDir(), "base")
	writeRun(t, base, plan3, t0, []int64{1, 2, 3}, []string{"a.bin"})
	now := t0.Add(time.Hour) // every restriction has elapsed: tampering must not be mistaken for that
	require.Equal(t, Elapsed, reopen(t, base, now).Status(now).State)

	mutate := func(t *testing.T, f func(dir string)) (Status, []Finding) {
		dir := filepath.Join(t.TempDir(), "run")
		copyDir(t, base, dir)
		f(dir)
		st := reopen(t, dir, now).Status(now)
		findings, err := verify(dir)
		require.NoError(t, err)
		return st, findings
	}
	cases := []struct {
		name, file string
		f          func(dir string)
	}{
		{"truncate entry", "backoff-0002.json", func(dir string) { truncate(t, filepath.Join(dir, "backoff-0002.json"), 40) }},
		{"empty entry", "backoff-0002.json", func(dir string) { truncate(t, filepath.Join(dir, "backoff-0002.json"), 0) }},
		{"drop newline", "backoff-0003.json", func(dir string) {
			p := filepath.Join(dir, "backoff-0003.json")
			b, _ := os.ReadFile(p)
			truncate(t, p, int64(len(b)-1))
		}},
		{"swap entries", "backoff-0001.json", func(dir string) {
			a, b := filepath.Join(dir, "backoff-0001.json"), filepath.Join(dir, "backoff-0002.json")
			require.NoError(t, os.Rename(a, a+".x"))
			require.NoError(t, os.Rename(b, a))
			require.NoError(t, os.Rename(a+".x", b))
		}},
		{"entry from another run", "backoff-0002.json", func(dir string) {
			// Self-consistent, right sequence, right plan: only the chain
			// tells it does not belong.
			other := filepath.Join(t.TempDir(), "other")
			writeRun(t, other, plan3, t0.Add(-time.Minute), []int64{1, 2, 3}, nil)
			b, err := os.ReadFile(filepath.Join(other, "backoff-0002.json"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "backoff-0002.json"), b, 0o600))
		}},
		{"delete middle entry", "backoff-0003.json", func(dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "backoff-0002.json"))) }},
		{"entry beyond 0200", "backoff-0201.json", func(dir string) { copyFile(t, dir, "backoff-0003.json", "backoff-0201.json") }},
		{"five-digit entry", "backoff-00004.json", func(dir string) { copyFile(t, dir, "backoff-0003.json", "backoff-00004.json") }},
		{"temp file", "backoff-0004.json.tmp", func(dir string) { copyFile(t, dir, "backoff-0003.json", "backoff-0004.json.tmp") }},
		{"entry mode", "backoff-0001.json", func(dir string) { require.NoError(t, os.Chmod(filepath.Join(dir, "backoff-0001.json"), 0o644)) }},
		{"dir mode", ".", func(dir string) { require.NoError(t, os.Chmod(dir, 0o755)) }},
		{"manifest deleted", "run.json", func(dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "run.json"))) }},
		{"manifest edited", "run.json", func(dir string) { editByte(t, filepath.Join(dir, "run.json"), 30) }},
		{"oversized entry", "backoff-0001.json", func(dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "backoff-0001.json"), make([]byte, record.MaxRecordBytes+1), 0o600))
		}},
		{"receipt edited", receiptName(record.FileDigest("a.bin")), func(dir string) { editByte(t, filepath.Join(dir, receiptName(record.FileDigest("a.bin"))), 50) }},
		{"receipt renamed", receiptName(record.FileDigest("b.bin")), func(dir string) {
			require.NoError(t, os.Rename(filepath.Join(dir, receiptName(record.FileDigest("a.bin"))), filepath.Join(dir, receiptName(record.FileDigest("b.bin")))))
		}},
		{"symlink", "backoff-0003.json", func(dir string) {
			p := filepath.Join(dir, "backoff-0003.json")
			require.NoError(t, os.Rename(p, filepath.Join(t.TempDir(), "elsewhere")))
			require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "x"), p))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, findings := mutate(t, tc.f)
			assert.Equal(t, Unresolved, st.State)
			assert.True(t, strings.HasPrefix(st.Reason, tc.file+": "), "reason %q names %s", st.Reason, tc.file)
			require.NotEmpty(t, findings)
			assert.Equal(t, tc.file, findings[0].File)
		})
	}
	t.Run("every byte of an entry", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(base, "backoff-0002.json"))
		require.NoError(t, err)
		dir := filepath.Join(t.TempDir(), "run")
		copyDir(t, base, dir)
		p := filepath.Join(dir, "backoff-0002.json")
		for i := range b {
			for _, delta := range []byte{1, 0x20} {
				c := append([]byte(nil), b...)
				c[i] ^= delta
				require.NoError(t, os.WriteFile(p, c, 0o600))
				st := reopen(t, dir, now).Status(now)
				if st.State != Unresolved || !strings.HasPrefix(st.Reason, "backoff-0002.json: ") {
					t.Fatalf("byte %d ^ %#x: %+v", i, delta, st)
				}
			}
		}
	})
}

func truncate(t *testing.T, p string, n int64) { require.NoError(t, os.Truncate(p, n)) }

func editByte(t *testing.T, p string, i int) {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	b[i] ^= 1
	require.NoError(t, os.WriteFile(p, b, 0o600))
}

func copyFile(t *testing.T, dir, from, to string) {
	b, err := os.ReadFile(filepath.Join(dir, from))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, to), b, 0o600))
}

// TestLegacyRun: a manifest without backoff_version is a legacy run.
// Its receipts stay usable (acked files are never re-sent); a 429 record
// without timing makes it unresolved.
func TestLegacyRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "legacy")
	require.NoError(t, os.Mkdir(dir, 0o700))
	_, pd, _ := digestOfPlan(plan3)
	// Written by hand, as an older version would have.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run.json"),
		[]byte(`{"plan_digest": "`+pd+`", "created": "2023-01-01T00:00:00Z", "tool": "provisioner 0.9"}`+"\n"), 0o600))
	data, _, err := record.Seal(record.KindReceipt, 0, record.Link{}, &record.ReceiptBody{PlanDigest: pd, FileDigest: record.FileDigest("a.bin"), Method: "PUT",
		URLDigest: urlDigest(t, secretURL), Attempt: 1, Status: 201, ACK: true, RequestID: "old", RecordedAtUTC: t0.Unix() - 99})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, receiptName(record.FileDigest("a.bin"))), data, 0o600))

	j := reopen(t, dir, t0)
	st := j.Status(t0)
	assert.Equal(t, Clear, st.State)
	assert.Equal(t, "legacy run (no backoff_version): no backoff entries", st.Reason)
	c, err := j.PlanContinuation(plan3, NewApproval, t0)
	require.NoError(t, err)
	assert.Equal(t, []FileState{FileAcked, FileNeverAttempted, FileNeverAttempted}, states(c))
	assert.Equal(t, []string{"b.bin", "c.bin"}, c.Uploads())

	// A legacy 429 record without timing.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "backoff-0001.json"),
		[]byte(`{"status":429,"retry_after":{"kind":"overlong","value":0},"request_id":"old-429"}`+"\n"), 0o600))
	j = reopen(t, dir, t0)
	st = j.Status(t0.Add(24 * time.Hour))
	assert.Equal(t, Unresolved, st.State)
	assert.True(t, strings.HasPrefix(st.Reason, "backoff-0001.json: legacy 429 without verifiable timing"), st.Reason)
	c, err = j.PlanContinuation(plan3, NewApproval, t0)
	require.NoError(t, err)
	assert.Empty(t, c.Uploads(), "status-before-network: an unresolved run sends nothing")
	assert.Equal(t, FileAcked, c.Files[0].State, "crash-never-loses-restriction: legacy non-429 evidence stays usable")
}

// TestLegacyRunAppends: a legacy run without 429 records can record a
// new, verifiable 1.0 entry chained to the legacy manifest's bytes.
func TestLegacyRunAppends(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "legacy")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run.json"), []byte(`{"note":"old"}`), 0o600))
	j, err := Open(dir, withClock(newFakeClock(t0)))
	require.NoError(t, err)
	record429(t, j, context.Background(), getReq(t), secs(4), timing(t0, 4))
	st := reopen(t, dir, t0).Status(t0)
	assert.Equal(t, Waiting, st.State)
	assert.Equal(t, int64(4), st.RemainingSeconds)
}

func states(c Continuation) []FileState {
	var out []FileState
	for _, f := range c.Files {
		out = append(out, f.State)
	}
	return out
}

// TestEntryLimit: with 200 entries, Begin fails closed with errLimit
// before any network access and writes nothing (entry 201).
func TestEntryLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	delays := make([]int64, record.MaxEntries)
	writeRun(t, dir, plan3, t0.Add(-time.Hour), delays, nil)
	j := reopen(t, dir, t0)
	require.Equal(t, Elapsed, j.Status(t0).State)
	require.NoError(t, j.Admit(context.Background(), t0))
	sent := 0
	err := j.Begin(context.Background(), getReq(t))
	if err == nil {
		sent++
	}
	require.ErrorIs(t, err, errLimit)
	assert.Contains(t, err.Error(), "entry 201")
	assert.Equal(t, 0, sent, "nothing is sent")
	assert.NotContains(t, names(t, dir), "pending-request.json")
	assert.Len(t, names(t, dir), record.MaxEntries+1)

	// 199 entries: the 200th can be written.
	dir2 := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir2, plan3, t0.Add(-time.Hour), delays[:record.MaxEntries-1], nil)
	j2 := reopen(t, dir2, t0)
	record429(t, j2, context.Background(), getReq(t), secs(1), timing(t0, 1))
	assert.Contains(t, names(t, dir2), "backoff-0200.json")
	j2 = reopen(t, dir2, t0.Add(time.Second))
	require.NoError(t, j2.Admit(context.Background(), t0.Add(time.Second)))
	require.ErrorIs(t, j2.Begin(context.Background(), getReq(t)), errLimit)
}

// TestFileLimit: a journaled request needs room for its marker, its
// temporary file and its entry or receipt. With 1000 files it proceeds and
// the directory never holds more than 1003; with 1001 files (and with 1003)
// Begin fails closed with errLimit before any network access: file 1004 is
// never created. A directory that already holds 1004 files is unresolved.
func TestFileLimit(t *testing.T) {
	plan := manyFiles(1000)
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, plan, t0.Add(-time.Hour), nil, ids(plan[:997])) // run.json, 997 receipts and the head
	require.Len(t, allNames(t, dir), 999)

	ff := &faultFS{crashAt: -1, failAt: -1}
	peak := 0
	ff.after = func() {
		if n := len(allNames(t, dir)); n > peak {
			peak = n
		}
	}
	j, err := Open(dir, Existing(), withClock(newFakeClock(t0)), withFS(ff), WithPlan(plan))
	require.NoError(t, err)
	require.Equal(t, Clear, j.Status(t0).State)
	ctx := WithUpload(context.Background(), plan[999].ID)
	require.NoError(t, j.Begin(ctx, putReq(t)))
	require.NoError(t, j.Complete(ctx, putReq(t), readrecovery.JournalOutcome{StatusCode: 201}))
	assert.Equal(t, record.MaxFiles-1, peak, "an upload's peak: marker, its begun head and the head's temporary file; the old head goes before the receipt is written (R85)")
	require.Len(t, allNames(t, dir), 1000, "the new head replaced the old one")

	err = j.Begin(context.Background(), getReq(t))
	require.ErrorIs(t, err, errLimit)
	require.Len(t, allNames(t, dir), 1000, "no marker was created")

	// 1003 files: still readable, still refusing.
	for i := 0; i < 3; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(dir, receiptName(record.FileDigest("extra"+itoa4(i)))), nil, 0o600))
	}
	j3, err := Open(dir, Existing())
	require.NoError(t, err)
	require.ErrorIs(t, j3.Begin(context.Background(), getReq(t)), errLimit)

	// 1004 files: unresolved, and nothing is read.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "extra"), nil, 0o600))
	st := reopen(t, dir, t0).Status(t0)
	assert.Equal(t, Unresolved, st.State)
	assert.Equal(t, ".: more than 1003 files (limit exceeded)", st.Reason)
	findings, err := verify(dir)
	require.NoError(t, err)
	assert.Equal(t, []Finding{{File: ".", Problem: "more than 1003 files (limit exceeded)"}}, findings)
}

// TestRestrictedErrorUnwrap checks the error chain.
func TestRestrictedErrorUnwrap(t *testing.T) {
	err := error(&RestrictedError{Status: Status{State: Waiting, NotBeforeUTC: 5, RemainingSeconds: 2, Reason: "r"}})
	assert.True(t, errors.Is(err, ErrRestricted))
	assert.False(t, errors.Is(err, runread.ErrCorrupt))
	assert.Equal(t, "journal: run waiting until not_before_utc 5 (2 s remaining): r", err.Error())
}
