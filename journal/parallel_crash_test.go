package journal

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/require"
)

// parScenario is one step sequence on a parallel run of two shards,
// crashed before each of its steps (and with each write torn).
type parScenario struct {
	name string
	// setup writes the starting run with the real file system ("" for
	// none: the scenario creates the run).
	setup func(t *testing.T, dir string)
	run   func(j *Journal) (sent bool, err error)
	// want checks the reopened run at stale (after the pending wait).
	want func(t *testing.T, dir string, done func(string) int, sent bool)
}

// parFile is a.bin (the file of the upload scenarios) and parOther a file
// of the other shard of a run of two shards.
var parPlan = []PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}, {ID: "c.bin"}, {ID: "d.bin"}, {ID: "e.bin"}}

const parStale = 31 * time.Second

// parSetup makes a parallel run of two shards holding one elapsed 429 in
// the shard that is not a.bin's (a lost restriction would show as clear),
// and, with dead, an abandoned marker of a.bin's shard.
func parSetup(dead bool) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		clk := newFakeClock(t0.Add(-100 * time.Second))
		j, err := Open(dir, withClock(clk), WithPlan(parPlan), WithParallel(2))
		require.NoError(t, err)
		other := ""
		for _, f := range parPlan {
			if j.Shard(f.ID) != j.Shard("a.bin") {
				other = f.ID
				break
			}
		}
		require.NotEmpty(t, other)
		ctx := WithUpload(context.Background(), other)
		record429(t, j, ctx, putReq(t), secs(5), timing(clk.Now(), 5))
		if dead {
			clk.Set(t0.Add(-90 * time.Second))
			require.NoError(t, j.Begin(WithUpload(context.Background(), "a.bin"), putReq(t)))
			kill(j) // its worker dies: its marker is dead at once (R83)
		}
	}
}

// reopenPar opens the parallel run in dir with the real file system at now.
func reopenPar(t *testing.T, dir string, now time.Time) *Journal {
	t.Helper()
	j, err := Open(dir, Existing(), withClock(newFakeClock(now)))
	require.NoError(t, err)
	return j
}

func fileOf(t *testing.T, j *Journal, now time.Time, id string) FileDecision {
	t.Helper()
	return decisionOf(t, j, parPlan, now, id)
}

var parScenarios = []parScenario{
	{
		name: "Open(create, parallel)",
		run:  func(*Journal) (bool, error) { return false, nil },
		want: func(t *testing.T, dir string, _ func(string) int, _ bool) {
			// The root's manifest is linked last, after both shards: a
			// creation killed before it sent nothing, and the next Open
			// finishes it (R84: no dead end), clear, with nothing left
			// that Inspect finds; one killed after it is complete.
			j, err := Open(dir, withClock(newFakeClock(t0)), WithParallel(2))
			require.NoError(t, err)
			require.Equal(t, Clear, j.Status(t0).State, j.Status(t0).Reason)
			sum, err := inspectDir(dir)
			require.NoError(t, err)
			require.Empty(t, sum.Findings)
		},
	},
	{
		name:  "Begin+Backoff in a shard",
		setup: parSetup(false),
		run: func(j *Journal) (bool, error) {
			ctx := WithUpload(context.Background(), "a.bin")
			if err := j.Begin(ctx, putReq(nil)); err != nil {
				return false, err
			}
			_, err := j.Backoff(ctx, putReq(nil), out429("r2"), secs(600), timing(t0, 600))
			return true, err
		},
		want: func(t *testing.T, dir string, done func(string) int, sent bool) {
			j, now := settled(t, dir)
			st := j.Status(now)
			switch {
			case !sent && !markerIn(dir):
				require.Equal(t, Elapsed, st.State, st.Reason)
			case done("remove pending-request.json") > 0:
				require.Equal(t, Waiting, st.State, st.Reason)
				require.Equal(t, t0.Unix()+600, st.NotBeforeUTC)
			default:
				require.Equal(t, Unresolved, st.State, "crash-never-loses-restriction: the entry is on disk or the shard's marker remains: %s", st.Reason)
			}
		},
	},
	{
		name:  "Begin+Complete(ACK) in a shard",
		setup: parSetup(false),
		run: func(j *Journal) (bool, error) {
			ctx := WithUpload(context.Background(), "a.bin")
			if err := j.Begin(ctx, putReq(nil)); err != nil {
				return false, err
			}
			return true, j.Complete(ctx, putReq(nil), readrecovery.JournalOutcome{StatusCode: 201, RequestID: "ok"})
		},
		want: func(t *testing.T, dir string, done func(string) int, sent bool) {
			j, now := settled(t, dir)
			fd := fileOf(t, j, now, "a.bin")
			st := j.Status(now)
			if markerIn(dir) {
				require.Equal(t, Unresolved, st.State)
			} else {
				require.Equal(t, Elapsed, st.State, st.Reason)
			}
			switch {
			case !sent:
				require.NotEqual(t, FileAcked, fd.State)
			case done("link "+receiptName(record.FileDigest("a.bin"))) > 0:
				require.Equal(t, FileAcked, fd.State)
			default:
				require.Equal(t, FileUnknown, fd.State, "a sent upload without a receipt is never replayable: %s", fd.Reason)
				require.False(t, fd.Upload)
			}
		},
	},
	{
		name:  "ReviewPendingMarker of a dead worker",
		setup: parSetup(true),
		run: func(j *Journal) (bool, error) {
			_, err := j.ReviewPendingMarker(context.Background(), "", "killed", 0)
			return false, err
		},
		want: func(t *testing.T, dir string, done func(string) int, _ bool) {
			now := t0.Add(parStale)
			j := reopenPar(t, dir, now)
			st := j.Status(now)
			fd := fileOf(t, j, now, "a.bin")
			require.Equal(t, FileUnknown, fd.State, "the dead worker's file is never eligible: %s", fd.Reason)
			if done("link review-0001.json") > 0 {
				require.Equal(t, Waiting, st.State, "the review is durable: the run waits: %s", st.Reason)
				require.Equal(t, now.Unix()+30, st.NotBeforeUTC)
			} else {
				require.Equal(t, Unresolved, st.State, "no review: the dead marker still makes the run unresolved: %s", st.Reason)
			}
		},
	},
}

// settled reopens the run in dir after the pending wait and looks at it
// twice, the pending wait apart, as a worker that stays does: a marker it
// cannot read (a crash between its create and its write) has no
// begun_at_utc, so only this process's sight ages it. It returns the
// Journal and the time of the second look.
func settled(t *testing.T, dir string) (*Journal, time.Time) {
	t.Helper()
	j := reopenPar(t, dir, t0.Add(parStale))
	_ = j.Admit(context.Background(), t0.Add(parStale))
	now := t0.Add(2 * parStale)
	_ = j.Admit(context.Background(), now)
	return j, now
}

// markerIn reports whether any shard of the root dir holds a marker.
func markerIn(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "shard-*", record.MarkerName))
	return len(m) > 0
}

// TestCrashAtEveryStepParallel is the crash-point table of a parallel run
// (parallel-shards): each scenario crashed before each step, each write
// torn, then reopened with the real file system after the pending wait:
// the restriction is on disk (waiting) or the shard's marker remains
// (unresolved) — never clear, never a lost restriction, never a
// replayable sent upload; a dead worker's review is durable (waiting) or
// not written (still unresolved).
func TestCrashAtEveryStepParallel(t *testing.T) {
	total := 0
	for _, sc := range parScenarios {
		runOne := func(t *testing.T, ff *faultFS) (string, bool, error) {
			dir := filepath.Join(t.TempDir(), "run")
			clk := newFakeClock(t0)
			if sc.setup == nil {
				_, err := Open(dir, withClock(clk), withFS(ff), WithParallel(2))
				return dir, false, err
			}
			sc.setup(t, dir)
			if strings.HasPrefix(sc.name, "ReviewPending") {
				clk.Set(t0.Add(parStale))
			}
			j, err := Open(dir, Existing(), withClock(clk), withFS(ff), WithPlan(parPlan))
			require.NoError(t, err)
			sent, err := sc.run(j)
			return dir, sent, err
		}
		ref := newFaultFS()
		_, _, err := runOne(t, ref)
		require.NoError(t, err)
		total += crashEach(t, sc.name, ref.ops, runOne, func(t *testing.T, i int, steps []string, dir string, sent bool, err error) {
			if i < len(steps) && !(strings.HasPrefix(sc.name, "ReviewPending") && markerRemovalAt(steps, i)) {
				require.True(t, errors.Is(err, errCrashed), "a crash is reported to the caller: %v", err)
			}
			sc.want(t, dir, stepsBefore(steps, i), sent)
		})
	}
	t.Logf("crash points: %d", total)
}
