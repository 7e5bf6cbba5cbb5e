package journal

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/stretchr/testify/require"
)

// filesOfShards returns, for a run of n shards, the first planned file of
// each shard: out[k] is a file of shard k.
func filesOfShards(plan []PlannedFile, n int) map[int]string {
	out := map[int]string{}
	for _, f := range plan {
		if k := record.ShardIndex(record.FileDigest(f.ID), n); out[k] == "" {
			out[k] = f.ID
		}
	}
	return out
}

// parallel-dead-worker: in a parallel run another worker's marker is a
// request in flight, not a restriction: while its worker holds it (R83)
// other shards send, the plan shows its file in-flight, the status is
// clear, and a pending review is refused (errLive) and writes nothing.
// Once its worker dies it is dead at once: Admit and every shard's Begin
// refuse, unresolved, naming shard-02/pending-request.json.
// ReviewPendingMarker without a name finds it (the only dead one); the run
// then waits until the review time + 30 s, then is elapsed, the dead
// worker's file unknown and the others eligible.
func TestParallelDeadWorkerMarker(t *testing.T) {
	for _, kind := range []string{"dir", "mem+prefix"} {
		t.Run(kind, func(t *testing.T) {
			run := newShardedRun(t, kind)
			plan := manyFiles(32)
			clk := newFakeClock(t0)
			open := opener4(t, run.st, plan, clk)
			dead, live := open(), open()
			fs := filesOfShards(plan, 4)
			deadCtx := WithUpload(context.Background(), fs[2])
			require.NoError(t, dead.Begin(deadCtx, putReq(t))) // its request in flight; the worker dies later

			send := func(j *Journal, k int) error {
				ctx := WithUpload(context.Background(), fs[k])
				if err := j.Admit(ctx, clk.Now()); err != nil {
					return err
				}
				if err := j.Begin(ctx, putReq(t)); err != nil {
					return err
				}
				return j.Complete(ctx, putReq(t), ok201("ok"))
			}
			clk.Set(t0.Add(10 * time.Second))
			require.NoError(t, send(live, 1), "another shard's young marker is a request in flight")
			c, err := live.PlanContinuation(plan, NewApproval, clk.Now())
			require.NoError(t, err)
			require.Equal(t, Clear, c.Status.State, c.Status.Reason)
			for _, fd := range c.Files {
				switch fd.ID {
				case fs[2]:
					require.Equal(t, FileInFlight, fd.State, fd.Reason)
					require.False(t, fd.Upload)
				case fs[1]:
					require.Equal(t, FileAcked, fd.State)
				default:
					require.Equal(t, FileNeverAttempted, fd.State)
					require.True(t, fd.Upload)
				}
			}
			before := run.files(t)
			_, err = live.ReviewPendingMarker(context.Background(), "", "too early", 0)
			require.ErrorIs(t, err, errReviewRefused)
			require.ErrorIs(t, err, errLive, "R83: its worker holds it")
			require.Contains(t, err.Error(), "shard-02/pending-request.json")
			require.Equal(t, before, run.files(t), "a refused review writes nothing")

			kill(dead)                                   // R83: dead at once, at the same clock reading
			for _, j := range []*Journal{live, open()} { // a worker that saw it, and a new one
				err := j.Admit(context.Background(), clk.Now())
				var re *RestrictedError
				require.ErrorAs(t, err, &re)
				require.ErrorIs(t, err, ErrPending)
				require.Equal(t, "shard-02/pending-request.json: "+runread.PendingProblem+" (`journal review --pending --marker shard-02/pending-request.json`)", re.Status.Reason)
				err = send(j, 3)
				require.ErrorIs(t, err, ErrPending, "every shard's Begin refuses")
			}
			require.Equal(t, []int{2}, run.markers(4))
			require.Equal(t, Unresolved, live.Status(clk.Now()).State)
			c, err = live.PlanContinuation(plan, NewApproval, clk.Now())
			require.NoError(t, err)
			require.Equal(t, Unresolved, c.Status.State)
			for _, fd := range c.Files {
				if fd.ID == fs[2] { // the dead worker's file: its outcome is unknown, never in flight
					require.Equal(t, FileUnknown, fd.State)
					require.Equal(t, "shard-02/pending-request.json: dead marker: its upload's outcome is unknown", fd.Reason)
				}
			}

			op := open()
			rec, err := op.ReviewPendingMarker(context.Background(), "", "worker 2 was killed", 0)
			require.NoError(t, err)
			require.Equal(t, "shard-02/pending-request.json", rec.Marker)
			require.Equal(t, "shard-02/review-0001.json", rec.Name)
			require.Equal(t, record.FileDigest(fs[2]), rec.MarkerFileDigest)
			require.True(t, rec.Removed)
			require.Equal(t, clk.Now().Unix()+30, rec.NotBeforeUTC)
			require.Empty(t, run.markers(4))

			_ = live.Admit(context.Background(), clk.Now()) // reads every shard again
			st := live.Status(clk.Now())
			require.Equal(t, Waiting, st.State, st.Reason)
			require.Equal(t, clk.Now().Unix()+30, st.NotBeforeUTC)
			require.True(t, strings.HasPrefix(st.Reason, "shard-02/review-0001.json"), st.Reason)
			require.ErrorIs(t, send(live, 3), ErrRestricted, "waiting: no shard sends")

			clk.Set(t0.Add(61 * time.Second))
			require.NoError(t, send(live, 3))
			c, err = live.PlanContinuation(plan, NewApproval, clk.Now())
			require.NoError(t, err)
			require.Equal(t, Elapsed, c.Status.State, c.Status.Reason)
			for _, fd := range c.Files {
				if fd.ID == fs[2] {
					require.Equal(t, FileUnknown, fd.State, fd.Reason)
					require.False(t, fd.Upload)
				}
			}
			sum, err := InspectStore(context.Background(), run.st)
			require.NoError(t, err)
			require.Empty(t, sum.Findings)
			require.Equal(t, 2, sum.Receipts)
			require.Equal(t, 1, sum.Reviews)
		})
	}
}

// parallel-dead-worker: with two dead markers ReviewPendingMarker
// without a name refuses and lists both; --marker names one; a name that
// is not a shard's marker is refused.
func TestParallelReviewPendingNamesTheMarker(t *testing.T) {
	run := newShardedRun(t, "dir")
	plan := manyFiles(32)
	clk := newFakeClock(t0)
	open := opener4(t, run.st, plan, clk)
	fs := filesOfShards(plan, 4)
	var ws []*Journal
	for _, k := range []int{1, 3} {
		w := open()
		require.NoError(t, w.Begin(WithUpload(context.Background(), fs[k]), putReq(t)))
		ws = append(ws, w)
	}
	for _, w := range ws {
		kill(w) // both workers die
	}
	op := open()
	_, err := op.ReviewPendingMarker(context.Background(), "", "n", 0)
	require.ErrorIs(t, err, errReviewRefused)
	require.Contains(t, err.Error(), "2 dead markers: shard-01/pending-request.json, shard-03/pending-request.json")
	for _, bad := range []string{"pending-request.json", "shard-05/pending-request.json", "shard-01/review-0001.json", "../shard-01/pending-request.json"} {
		_, err = op.ReviewPendingMarker(context.Background(), bad, "n", 0)
		require.ErrorIs(t, err, errReviewRefused, bad)
	}
	_, err = op.ReviewPendingMarker(context.Background(), "shard-02/pending-request.json", "n", 0)
	require.ErrorIs(t, err, errReviewRefused)
	require.Contains(t, err.Error(), "no pending marker")
	rec, err := op.ReviewPendingMarker(context.Background(), "shard-03/pending-request.json", "killed", 0)
	require.NoError(t, err)
	require.Equal(t, "shard-03/pending-request.json", rec.Marker)
	require.Equal(t, []int{1}, run.markers(4))
	// ReviewPending is the unnamed form: the one dead marker left.
	rec, err = op.ReviewPending(context.Background(), "killed too", 0)
	require.NoError(t, err)
	require.Equal(t, "shard-01/pending-request.json", rec.Marker)
	require.Empty(t, run.markers(4))
}

// parallelFuzzBase is a parallel run of two shards holding a 60 s
// restriction (in the shard of its GETs) as a MapFS under "run", and the
// time at which it is waiting.
func parallelFuzzBase(t testing.TB) (fstest.MapFS, time.Time) {
	dir := filepath.Join(t.TempDir(), "run")
	clk := newFakeClock(t0)
	j, err := Open(dir, withClock(clk), WithPlan(plan3), WithParallel(2))
	require.NoError(t, err)
	record429(t, j, context.Background(), getReq(t), secs(60), timing(t0, 60))
	m := fstest.MapFS{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(dir), p)
		if d.IsDir() {
			m[filepath.ToSlash(rel)] = &fstest.MapFile{Mode: fs.ModeDir | 0o700}
			return nil
		}
		b, err := os.ReadFile(p)
		m[filepath.ToSlash(rel)] = &fstest.MapFile{Data: b, Mode: 0o600}
		return err
	}))
	return m, t0.Add(30 * time.Second)
}

// FuzzLoadRootManifest puts arbitrary bytes in place of the root's
// run.json of a waiting parallel run, and of shard-01's run.json (a shard
// that claims to be a root, "parallel": 1 or 17, an edited digest): never
// a panic, and the run is refused at open or never clear or elapsed.
func FuzzLoadRootManifest(f *testing.F) {
	base, now := parallelFuzzBase(f)
	valid := base["run/run.json"].Data
	seeds(f, valid)
	seeds(f, base["run/shard-01/run.json"].Data)
	for _, p := range []string{"0", "1", "3", "17", "-2", `"2"`, "2.0", "null"} {
		f.Add(bytes.Replace(valid, []byte(`"parallel":2`), []byte(`"parallel":`+p), 1))
	}
	f.Add(bytes.Replace(valid, []byte(`,"parallel":2`), nil, 1))
	j, err := Open("run", Existing(), withFS(memFS{base}), withClock(newFakeClock(now)))
	require.NoError(f, err)
	require.Equal(f, 2, j.Parallel())
	require.Equal(f, Waiting, j.Status(now).State, "the base run waits")
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range []string{"run/run.json", "run/shard-01/run.json"} {
			m := fstest.MapFS{}
			for k, v := range base {
				m[k] = v
			}
			m[name] = &fstest.MapFile{Data: data, Mode: 0o600}
			j, err := Open("run", Existing(), withFS(memFS{m}), withClock(newFakeClock(now)))
			if err != nil {
				continue // refused at open: never sends
			}
			if st := j.Status(now); st.State == Clear || st.State == Elapsed {
				t.Fatalf("%s replaced by %q: %+v", name, data, st)
			}
		}
	})
}

// parallel-shards: runs written without the option open unchanged — a
// run written by hand (writeRun) and one the journal wrote keep their
// manifests byte for byte, have no shards (Parallel 0, Shard 0), and
// WithParallel on them is refused. A new run without the option has
// today's files and no "parallel" key. (The run of commit 93c5847, an
// earlier unreleased format, no longer opens: TestEarlierFormatDoesNotOpen.)
func TestRunsWithoutParallelOpenUnchanged(t *testing.T) {
	old := filepath.Join(t.TempDir(), "old")
	writeRun(t, old, plan3, t0, []int64{5}, []string{"a.bin"})
	now := t0.Add(20 * time.Second)
	cur, _ := newRun(t)
	require.NoError(t, cur.Begin(WithUpload(context.Background(), "a.bin"), putReq(t)))
	require.NoError(t, cur.Complete(WithUpload(context.Background(), "a.bin"), putReq(t), ok201("a")))
	for _, dir := range []string{old, cur.Dir()} {
		before, err := os.ReadFile(filepath.Join(dir, record.ManifestName))
		require.NoError(t, err)
		require.NotContains(t, string(before), "parallel")
		j, err := Open(dir, withClock(newFakeClock(now)))
		require.NoError(t, err)
		require.Equal(t, 0, j.Parallel())
		require.Equal(t, 0, j.Shard("a.bin"))
		require.NotEqual(t, Unresolved, j.Status(now).State)
		_, err = Open(dir, WithParallel(2))
		require.ErrorContains(t, err, "created without WithParallel")
		after, err := os.ReadFile(filepath.Join(dir, record.ManifestName))
		require.NoError(t, err)
		require.Equal(t, before, after)
		fs, err := verify(dir)
		require.NoError(t, err)
		require.Empty(t, fs)
	}
	require.Equal(t, []string{"head-0001.json", record.PlanName, receiptName(record.FileDigest("a.bin")), record.ManifestName}, allNames(t, cur.Dir()))
}

// parallel-shards: a shard swapped with another, or a shard deleted
// whole, leaves the run unresolved and verify names it; Open with the
// plan never makes the missing shard again (its records would be lost).
func TestParallelShardSwappedOrDeleted(t *testing.T) {
	newRoot := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "run")
		j, err := Open(dir, WithPlan(parPlan), WithParallel(2), withClock(newFakeClock(t0)))
		require.NoError(t, err)
		for _, f := range parPlan {
			ctx := WithUpload(context.Background(), f.ID)
			require.NoError(t, j.Begin(ctx, putReq(t)))
			require.NoError(t, j.Complete(ctx, putReq(t), ok201("x")))
		}
		return dir
	}
	t.Run("swapped", func(t *testing.T) {
		dir := newRoot(t)
		a, b := filepath.Join(dir, "shard-01"), filepath.Join(dir, "shard-02")
		require.NoError(t, os.Rename(a, a+".x"))
		require.NoError(t, os.Rename(b, a))
		require.NoError(t, os.Rename(a+".x", b))
		st := reopen(t, dir, t0).Status(t0)
		require.Equal(t, Unresolved, st.State)
		require.Equal(t, "shard-01/run.json: plan_digest is not this shard's part of the root plan (a shard of another run)", st.Reason)
		fs, err := verify(dir)
		require.NoError(t, err)
		require.Equal(t, Finding{File: "shard-01/run.json", Problem: "plan_digest is not this shard's part of the root plan (a shard of another run)"}, fs[0])
	})
	t.Run("deleted", func(t *testing.T) {
		dir := newRoot(t)
		require.NoError(t, os.RemoveAll(filepath.Join(dir, "shard-02")))
		j, err := Open(dir, WithPlan(parPlan), withClock(newFakeClock(t0)))
		require.NoError(t, err)
		st := j.Status(t0)
		require.Equal(t, Unresolved, st.State)
		require.True(t, strings.HasPrefix(st.Reason, "shard-02/.: cannot read the shard"), st.Reason)
		require.NoDirExists(t, filepath.Join(dir, "shard-02"), "never made again")
		fs, err := verify(dir)
		require.NoError(t, err)
		require.Equal(t, "shard-02", fs[0].File)
		c, err := j.PlanContinuation(parPlan, NewApproval, t0)
		require.NoError(t, err)
		require.Empty(t, c.Uploads(), "nothing is sent from a run missing a shard")
	})
}
