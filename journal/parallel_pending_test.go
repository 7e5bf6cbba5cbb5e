package journal

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// filesOfShards returns, for a run of n shards, the first planned file of
// each shard: out[k] is a file of shard k.
func filesOfShards(plan []PlannedFile, n int) map[int]string {
	out := map[int]string{}
	for _, f := range plan {
		if k := shardIndex(FileDigest(f.ID), n); out[k] == "" {
			out[k] = f.ID
		}
	}
	return out
}

// parallel-dead-worker: in a parallel run another worker's marker is a
// request in flight, not a restriction: while it is younger than the
// pending wait (30 s by default) other shards send, the plan shows its
// file in-flight, and the status is clear. From the pending wait on it is
// abandoned: Admit and every shard's Begin refuse, unresolved, naming
// shard-02/pending-request.json. ReviewPendingMarker without a name finds
// it (the only one that old); the run then waits until the review time +
// 30 s, then is elapsed, the dead worker's file unknown and the others
// eligible.
func TestParallelDeadWorkerMarker(t *testing.T) {
	for _, kind := range []string{"dir", "mem+prefix"} {
		t.Run(kind, func(t *testing.T) {
			run := newShardedRun(t, kind)
			plan := manyFiles(32)
			clk := newFakeClock(t0)
			open := func() *Journal {
				j, err := OpenStore(context.Background(), run.st, WithPlan(plan), WithParallel(4), withClock(clk))
				require.NoError(t, err)
				return j
			}
			dead, live := open(), open()
			fs := filesOfShards(plan, 4)
			deadCtx := WithUpload(context.Background(), fs[2])
			require.NoError(t, dead.Begin(deadCtx, putReq(t))) // and the worker dies

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
			_, err = live.ReviewPendingMarker(context.Background(), "", "too early", 0)
			require.ErrorIs(t, err, ErrReview)
			require.Contains(t, err.Error(), "shard-02/pending-request.json (10 s old)")

			clk.Set(t0.Add(30 * time.Second))
			for _, j := range []*Journal{live, open()} { // a worker that saw it, and a new one
				err := j.Admit(context.Background(), clk.Now())
				var re *RestrictedError
				require.ErrorAs(t, err, &re)
				require.ErrorIs(t, err, ErrPending)
				require.True(t, strings.HasPrefix(re.Status.Reason, "shard-02/pending-request.json: present for 30 s"), re.Status.Reason)
				err = send(j, 3)
				require.ErrorIs(t, err, ErrPending, "every shard's Begin refuses")
			}
			require.Equal(t, []int{2}, run.markers(4))
			require.Equal(t, Unresolved, live.Status(clk.Now()).State)

			op := open()
			rec, err := op.ReviewPendingMarker(context.Background(), "", "worker 2 was killed", 0)
			require.NoError(t, err)
			require.Equal(t, "shard-02/pending-request.json", rec.Marker)
			require.Equal(t, "shard-02/review-0001.json", rec.Name)
			require.Equal(t, FileDigest(fs[2]), rec.MarkerFileDigest)
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

// parallel-dead-worker: with two abandoned markers ReviewPendingMarker
// without a name refuses and lists both; --marker names one; a name that
// is not a shard's marker is refused.
func TestParallelReviewPendingNamesTheMarker(t *testing.T) {
	run := newShardedRun(t, "dir")
	plan := manyFiles(32)
	clk := newFakeClock(t0)
	open := func() *Journal {
		j, err := OpenStore(context.Background(), run.st, WithPlan(plan), WithParallel(4), withClock(clk))
		require.NoError(t, err)
		return j
	}
	fs := filesOfShards(plan, 4)
	for _, k := range []int{1, 3} {
		require.NoError(t, open().Begin(WithUpload(context.Background(), fs[k]), putReq(t)))
	}
	clk.Set(t0.Add(45 * time.Second))
	op := open()
	_, err := op.ReviewPendingMarker(context.Background(), "", "n", 0)
	require.ErrorIs(t, err, ErrReview)
	require.Contains(t, err.Error(), "2 abandoned markers: shard-01/pending-request.json (45 s old), shard-03/pending-request.json (45 s old)")
	for _, bad := range []string{"pending-request.json", "shard-05/pending-request.json", "shard-01/review-0001.json", "../shard-01/pending-request.json"} {
		_, err = op.ReviewPendingMarker(context.Background(), bad, "n", 0)
		require.ErrorIs(t, err, ErrReview, bad)
	}
	_, err = op.ReviewPendingMarker(context.Background(), "shard-02/pending-request.json", "n", 0)
	require.ErrorIs(t, err, ErrReview)
	require.Contains(t, err.Error(), "no pending marker")
	rec, err := op.ReviewPendingMarker(context.Background(), "shard-03/pending-request.json", "killed", 0)
	require.NoError(t, err)
	require.Equal(t, "shard-03/pending-request.json", rec.Marker)
	require.Equal(t, []int{1}, run.markers(4))
	// ReviewPending is the unnamed form: the one abandoned marker left.
	rec, err = op.ReviewPending(context.Background(), "killed too", 0)
	require.NoError(t, err)
	require.Equal(t, "shard-01/pending-request.json", rec.Marker)
	require.Empty(t, run.markers(4))
}

// copyTree copies the directory tree src (a run, or a parallel run's root
// with its shards) into a new dst (directories 0700, files 0600).
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	require.NoError(t, os.Mkdir(dst, 0o700))
	des, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, de := range des {
		if de.IsDir() {
			copyTree(t, filepath.Join(src, de.Name()), filepath.Join(dst, de.Name()))
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, de.Name()), b, 0o600))
	}
}
