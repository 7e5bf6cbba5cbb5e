package journal

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery/journal/internal/fsys"
	"github.com/stretchr/testify/require"
)

// R83: a live marker is never judged dead, whatever the clocks say. On a
// parallel run (directory, and the in-memory store with leases) worker A
// begins an upload at t0 by its clock; worker B's clock is 45 s fast or
// 45 s slow. B sends in the other shard at once and again after A's
// upload has lasted two minutes (B's clock moved with it), the run stays
// clear with one request in flight, A's file stays in-flight, and a
// pending review of A's marker is refused with errLive and writes
// nothing. Then A's upload ends (its receipt, after two minutes) and the
// run verifies clean: nothing took A's place in the sequence. On a run
// without shards, B (WithPendingWait) waits out its wait and is refused as
// in flight, never as dead.
func TestLiveMarkerSurvivesSkewAndLongUpload(t *testing.T) {
	for _, kind := range []string{"dir", "mem+prefix"} {
		for _, skew := range []time.Duration{45 * time.Second, -45 * time.Second} {
			t.Run(kind+"/"+skew.String(), func(t *testing.T) {
				run := newShardedRun(t, kind)
				plan := manyFiles(16)
				clkA, clkB := newFakeClock(t0), newFakeClock(t0.Add(skew))
				a := opener4(t, run.st, plan, clkA)()
				b := opener4(t, run.st, plan, clkB)()
				fs := filesOfShards(plan, 4)
				ctxA := WithUpload(context.Background(), fs[2])
				require.NoError(t, a.Begin(ctxA, putReq(t)))
				send := func(id string) {
					t.Helper()
					ctx := WithUpload(context.Background(), id)
					require.NoError(t, b.Admit(ctx, clkB.Now()))
					require.NoError(t, b.Begin(ctx, putReq(t)))
					require.NoError(t, b.Complete(ctx, putReq(t), ok201("b")))
				}
				check := func() {
					t.Helper()
					st := b.Status(clkB.Now())
					require.Equal(t, Clear, st.State, st.Reason)
					require.Contains(t, st.Reason, "1 request(s) in flight")
					c, err := b.PlanContinuation(plan, NewApproval, clkB.Now())
					require.NoError(t, err)
					for _, fd := range c.Files {
						if fd.ID == fs[2] {
							require.Equal(t, FileInFlight, fd.State, fd.Reason)
						}
					}
					before := run.files(t)
					_, err = b.ReviewPendingMarker(context.Background(), "", "looks old", 0)
					require.ErrorIs(t, err, errLive)
					_, err = b.ReviewPendingMarker(context.Background(), record.MarkerRef(2), "looks old", 0)
					require.ErrorIs(t, err, errLive)
					require.ErrorIs(t, err, errReviewRefused)
					require.Equal(t, before, run.files(t), "a refused review writes nothing")
				}
				send(fs[1])
				check()
				clkA.Set(t0.Add(2 * time.Minute))
				clkB.Set(t0.Add(skew + 2*time.Minute))
				send(fs[3])
				check()
				require.NoError(t, a.Complete(ctxA, putReq(t), ok201("a")))
				sum, err := InspectStore(context.Background(), run.st)
				require.NoError(t, err)
				require.Empty(t, sum.Findings)
				require.Equal(t, 3, sum.Receipts)
			})
		}
	}
	t.Run("without shards", func(t *testing.T) {
		a, clkA := newRun(t)
		clkB := stepClock{newFakeClock(t0.Add(45 * time.Second))}
		b, err := Open(a.Dir(), Existing(), withClock(clkB), WithPlan(plan3), WithPendingWait(2*time.Minute))
		require.NoError(t, err)
		require.NoError(t, a.Begin(WithUpload(context.Background(), "a.bin"), putReq(t)))
		clkA.Set(t0.Add(2 * time.Minute))
		err = b.Begin(WithUpload(context.Background(), "b.bin"), putReq(t)) // waits 2 min by B's clock
		require.ErrorIs(t, err, ErrPending)
		var re *RestrictedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, record.MarkerName+": "+runread.LiveProblem, re.Status.Reason)
		require.GreaterOrEqual(t, clkB.Now().Sub(t0.Add(45*time.Second)), 2*time.Minute, "B waited its whole wait")
		_, err = b.ReviewPending(context.Background(), "", 0)
		require.ErrorIs(t, err, errLive)
		require.NoError(t, a.Complete(WithUpload(context.Background(), "a.bin"), putReq(t), ok201("a")))
		require.NoError(t, b.Begin(WithUpload(context.Background(), "b.bin"), putReq(t)))
	})
}

// stepClock is a fake clock whose Sleep moves it on at once.
type stepClock struct{ *fakeClock }

func (c stepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.Set(c.Now().Add(d))
	return ctx.Err()
}

// R83: a SIGKILLed worker's marker on a directory is dead at once. A
// worker process opens a parallel run and begins an upload; while it
// lives its marker is a request in flight (the run clear); the first
// status read after its death (no wait, no poll) is unresolved by its
// dead marker, and a pending review is accepted.
func TestSIGKILLedWorkerDeadAtOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	plan := manyFiles(8)
	_, err := Open(dir, WithPlan(plan), WithParallel(2))
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLiveWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RR_JOURNAL_LIVE_WORKER_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "begun\n", line)

	j, err := Open(dir, Existing())
	require.NoError(t, err)
	st := j.Status(time.Now())
	require.Equal(t, Clear, st.State, st.Reason)
	require.Contains(t, st.Reason, "1 request(s) in flight")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait() // the kernel has released the lock
	died := time.Now()
	j, err = Open(dir, Existing())
	require.NoError(t, err)
	st = j.Status(time.Now())
	took := time.Since(died)
	require.Equal(t, Unresolved, st.State)
	require.Equal(t, "shard-01/"+record.MarkerName+": "+runread.PendingProblem+" (`journal review --pending --marker shard-01/"+record.MarkerName+"`)", st.Reason)
	t.Logf("dead marker reported %v after the worker's death (the first read)", took)
	rec, err := j.ReviewPendingMarker(context.Background(), "", "killed", 0)
	require.NoError(t, err)
	require.Equal(t, "shard-01/"+record.MarkerName, rec.Marker)
}

// TestLiveWorkerProcess is not a test of its own: TestSIGKILLedWorkerDeadAtOnce
// runs it. It begins an upload of shard 1 and waits to be killed.
func TestLiveWorkerProcess(t *testing.T) {
	dir := os.Getenv("RR_JOURNAL_LIVE_WORKER_DIR")
	if dir == "" {
		t.Skip("a helper process")
	}
	j, err := Open(dir, Existing(), WithPlan(manyFiles(8)))
	require.NoError(t, err)
	id := ""
	for _, f := range manyFiles(8) {
		if j.Shard(f.ID) == 1 {
			id = f.ID
			break
		}
	}
	require.NoError(t, j.Begin(WithUpload(context.Background(), id), putReq(t)))
	os.Stdout.WriteString("begun\n")
	time.Sleep(time.Hour)
}

// noLockFS is a file system that keeps no locks (flock: ENOLCK).
type noLockFS struct{ fsys.OS }

func (n noLockFS) OpenFile(name string, flag int, perm os.FileMode) (fsys.File, error) {
	f, err := n.OS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noLockFile{f}, nil
}

type noLockFile struct{ fsys.File }

func (noLockFile) Lock(bool) error { return fsys.ErrNoLocks }

// R83 on a file system without locks (flock or LockFileEx failing with
// ENOLCK, EOPNOTSUPP; an OS without locks): a worker still sends (its
// marker is written as always), but no other process can tell whether it
// lives, so its marker counts as live, never as dead: nothing is released
// or handed out again on a guess. A run without shards is unresolved by it
// (saying that the store cannot tell), its shard line shows it live;
// another shard's Begin and Next go on as beside a live marker; Next never
// hands out the claimed file; a pending review — the operator's word that
// no worker sends it — is accepted.
func TestNoLocksFilesystem(t *testing.T) {
	t.Run("without shards", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		a, err := Open(dir, withFS(noLockFS{}), withClock(newFakeClock(t0)), WithPlan(plan3))
		require.NoError(t, err)
		require.NoError(t, a.Begin(WithUpload(context.Background(), "a.bin"), putReq(t)), "a worker without locks still sends")
		b, err := Open(dir, Existing(), withFS(noLockFS{}), withClock(newFakeClock(t0)), WithPlan(plan3))
		require.NoError(t, err)
		st := b.Status(t0)
		require.Equal(t, Unresolved, st.State)
		require.Equal(t, record.MarkerName+": "+runread.UnknownProblem, st.Reason)
		require.Len(t, st.Shards, 1)
		require.Equal(t, "live", st.Shards[0].Marker)
		require.Equal(t, 1, st.Files[FileInFlight], "its file is in flight, not unknown")
		rec, err := b.ReviewPending(context.Background(), "no worker runs", 0)
		require.NoError(t, err)
		require.True(t, rec.Removed)
	})
	t.Run("parallel", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		plan := manyFiles(8)
		open := func() *Journal {
			j, err := Open(dir, withFS(noLockFS{}), WithPlan(plan), WithParallel(2))
			require.NoError(t, err)
			return j
		}
		a, b := open(), open()
		fs := filesOfShards(plan, 2)
		claimed, err := a.Next(context.Background(), NewApproval)
		require.NoError(t, err)
		k := a.Shard(claimed.ID)
		other := fs[3-k]
		require.NoError(t, b.Begin(WithUpload(context.Background(), other), putReq(t)), "the other shard goes on")
		require.NoError(t, b.Complete(WithUpload(context.Background(), other), putReq(t), ok201("b")))
		left := -1 // the other shard's files but the one b sent
		for _, f := range plan {
			if a.Shard(f.ID) != k {
				left++
			}
		}
		for range left {
			f, err := b.Next(context.Background(), NewApproval)
			require.NoError(t, err)
			require.NotEqual(t, k, b.Shard(f.ID), "never a file of the claimed shard: its marker counts as live")
			ctx := WithUpload(context.Background(), f.ID)
			require.NoError(t, b.Begin(ctx, putReq(t)))
			require.NoError(t, b.Complete(ctx, putReq(t), ok201("b")))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = b.Next(ctx, NewApproval)
		require.ErrorIs(t, err, context.DeadlineExceeded, "it waits for the claimed shard, never takes its file")
		_, err = os.Stat(filepath.Join(dir, record.ShardName(k), record.MarkerName))
		require.NoError(t, err, "the claim's marker stays")
		rec, err := b.ReviewPendingMarker(context.Background(), "", "no worker runs", 0)
		require.NoError(t, err, "the operator's word resolves it")
		require.Equal(t, record.MarkerRef(k), rec.Marker)
	})
}

// probeFS is the real file system that runs hook once, right after it
// opens a marker to read it: another process acting between a probe's
// open and its lock.
type probeFS struct {
	fsys.OS
	once sync.Once
	hook func()
}

func (p *probeFS) OpenFile(name string, flag int, perm os.FileMode) (fsys.File, error) {
	f, err := p.OS.OpenFile(name, flag, perm)
	if err == nil && filepath.Base(name) == record.MarkerName && flag == fsys.ReadFlags {
		p.once.Do(p.hook)
	}
	return f, err
}

// R83: a probe that opened a marker whose worker then ended its request
// (removed the marker, let its lock go) before the probe's lock is no
// dead marker: the name is gone. Worker B opens the run just as A
// completes (its open probes A's marker): the run is clear, never
// unresolved by a dead marker, and B's Begin in another shard goes.
func TestProbeOfAMarkerRemovedMeanwhile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	plan := manyFiles(8)
	a, err := Open(dir, withClock(newFakeClock(t0)), WithPlan(plan), WithParallel(2))
	require.NoError(t, err)
	fs := filesOfShards(plan, 2)
	ctxA := WithUpload(context.Background(), fs[1])
	require.NoError(t, a.Begin(ctxA, putReq(t)))
	pf := &probeFS{hook: func() { require.NoError(t, a.Complete(ctxA, putReq(t), ok201("a"))) }}
	b, err := Open(dir, Existing(), withFS(pf), withClock(newFakeClock(t0)), WithPlan(plan))
	require.NoError(t, err)
	st := b.Status(t0)
	require.Equal(t, Clear, st.State, st.Reason)
	ctxB := WithUpload(context.Background(), fs[2])
	require.NoError(t, b.Begin(ctxB, putReq(t)), "A's marker, removed during the probe, is no dead one")
	require.NoError(t, b.Complete(ctxB, putReq(t), ok201("b")))
	sum, err := inspectDir(dir)
	require.NoError(t, err)
	require.Empty(t, sum.Findings)
	require.Equal(t, 2, sum.Receipts)
}

// The hold lives as long as its Journal (package doc, Liveness): a
// Journal that is collected with its request in flight closes its
// marker's lock with the lock file, and the marker then reads as dead to
// every other Journal, as a dead worker's would. While the Journal is
// reachable the marker is live.
func TestCollectedJournalsMarkerIsDead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	plan := manyFiles(2)
	begin := func() *Journal {
		j, err := Open(dir, WithPlan(plan))
		require.NoError(t, err)
		require.NoError(t, j.Begin(WithUpload(context.Background(), plan[0].ID), putReq(t)))
		return j
	}
	marker := func() string {
		j, err := Open(dir, WithPlan(plan))
		require.NoError(t, err)
		st := j.Status(time.Now())
		require.Len(t, st.Shards, 1)
		return st.Shards[0].Marker
	}
	held := begin()
	runtime.GC()
	require.Equal(t, "live", marker(), "reachable: its marker is live")
	runtime.KeepAlive(held)
	held = nil

	deadline := time.Now().Add(2 * time.Second)
	got := marker()
	for got != "dead" && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		got = marker()
	}
	require.Equal(t, "dead", got, "collected mid-request: its marker is dead")
}
