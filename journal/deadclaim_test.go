package journal

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newSendLog is a sendLog of the four-shard run r that answers 201 at once.
func newSendLog(r *shardedRun, shard func(string) int) *sendLog {
	return &sendLog{run: r, n: 4, shard: shard, throttle: map[string]bool{}, puts: map[string]int{}, perShard: map[int]int{}}
}

// Status tells a claimed file from an upload in flight (R111): on a
// parallel run, directory and in-memory store with leases, a worker's
// marker as a freshly opened Journal (`journal status`) shows it, for a
// claim from Next (live, then its worker dead) and for the upload that
// adopted it (begun, then its worker dead): the marker, its method (CLAIM
// until the upload's begun head, then the upload's PUT), the shard's state
// and the class of the file. A dead claim that never sent blocks nothing
// (dead-claim-heals); a dead upload leaves the run unresolved.
func TestStatusTellsClaimFromUpload(t *testing.T) {
	cases := []struct {
		name          string
		begin, killed bool
		marker        string
		method        string
		state         State // the shard's and the run's
		class         FileState
	}{
		{"claim live", false, false, markerLive, record.ClaimMethod, Clear, FileInFlight},
		{"upload live", true, false, markerLive, "PUT", Clear, FileInFlight},
		{"claim dead", false, true, markerDead, record.ClaimMethod, Clear, FileNeverAttempted},
		{"upload dead", true, true, markerDead, "PUT", Unresolved, FileUnknown},
	}
	plan := manyFiles(16)
	for _, kind := range []string{"dir", "mem+prefix"} {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				r := newShardedRun(t, kind)
				clk := newFakeClock(t0)
				open := opener4(t, r.st, plan, clk)
				a := open()
				f, err := a.Next(context.Background(), NewApproval)
				require.NoError(t, err)
				k := a.Shard(f.ID)
				if tc.begin {
					require.NoError(t, a.Begin(WithUpload(context.Background(), f.ID), putReq(t)))
				}
				if tc.killed {
					kill(a)
				}
				st := open().Status(t0)
				assert.Equal(t, tc.state, st.State, st.Reason)
				v := st.Shards[k-1]
				assert.Equal(t, tc.marker, v.Marker)
				assert.Equal(t, tc.method, v.Method)
				assert.Equal(t, tc.state, v.State)
				assert.Equal(t, record.FileDigest(f.ID), v.FileDigest)
				assert.Equal(t, os.Getpid(), v.PID)
				if tc.class == FileNeverAttempted {
					assert.Equal(t, len(plan), st.Files[FileNeverAttempted], "%v", st.Files)
				} else {
					assert.Equal(t, 1, st.Files[tc.class], "%v", st.Files)
					assert.Equal(t, 1, v.Files[tc.class], "%v", v.Files)
				}
			})
		}
	}
}

// treeNames lists every file under dir, by its path inside it, sorted.
func treeNames(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return err
	}))
	slices.Sort(out)
	return out
}

// dead-claim-heals (R110), in one process on a parallel run (directory;
// in-memory store with leases): worker A is handed a file by Next and
// dies (its hold ends) before its upload begins. Nothing is unresolved:
// the status is clear, verify finds nothing, another shard's upload goes
// at once (the check across shards reads the dead claim's shard whole and
// finds no upload begun), and worker B's Next loop hands out every file,
// A's included, each sent once, with no review: the run ends with one
// receipt per file, no review and no marker.
func TestDeadClaimHealsItself(t *testing.T) {
	plan := manyFiles(16)
	for _, kind := range []string{"dir", "mem+prefix"} {
		t.Run(kind, func(t *testing.T) {
			r := newShardedRun(t, kind)
			clk := newFakeClock(time.Now())
			open := opener4(t, r.st, plan, clk)
			a := open()
			f, err := a.Next(context.Background(), NewApproval)
			require.NoError(t, err)
			k := a.Shard(f.ID)
			kill(a)
			require.Equal(t, []int{k}, r.markers(4), "a dead claim stays until a worker's next read")

			b := open()
			st := b.Status(clk.Now())
			require.Equal(t, Clear, st.State, st.Reason)
			assert.Equal(t, len(plan), st.Files[FileNeverAttempted])
			sum, err := InspectStore(context.Background(), r.st)
			require.NoError(t, err)
			assert.Empty(t, sum.Findings)

			g := filesOfShards(plan, 4)[k%4+1]
			ctx := WithUpload(context.Background(), g)
			require.NoError(t, b.Admit(ctx, clk.Now()))
			require.NoError(t, b.Begin(ctx, putReq(t)), "another shard's upload goes: the dead claim never sent")
			require.NoError(t, b.Complete(ctx, putReq(t), ok201("g")))

			srv := newSendLog(r, b.Shard)
			got, outcomes, end := nextLoop(readrecovery.New(srv), b)
			require.ErrorIs(t, end, ErrNoMoreFiles)
			assert.Contains(t, got, f.ID, "the dead claim's file is handed out again")
			assert.Len(t, got, len(plan)-1)
			for _, id := range got {
				assert.Equal(t, "acked", outcomes[id], id)
				assert.Equal(t, 1, srv.puts[id], id)
			}
			assert.Empty(t, srv.problems)
			assert.Empty(t, r.markers(4))
			sum, err = InspectStore(context.Background(), r.st)
			require.NoError(t, err)
			assert.Empty(t, sum.Findings)
			assert.Equal(t, len(plan), sum.Receipts)
			assert.Zero(t, sum.Reviews, "no review")
		})
	}
}

// shard1Plan is the files of manyFiles(n) in shard 1 of 4: a worker's Next
// hands them out in plan order, so which file comes next is known.
func shard1Plan(n int) []PlannedFile {
	return slices.DeleteFunc(manyFiles(n), func(f PlannedFile) bool { return record.ShardIndex(record.FileDigest(f.ID), 4) != 1 })
}

// lockedBuffer is a bytes.Buffer for writers in several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// killedWorker runs a Next worker process on dir that is SIGKILLed as kill
// says ("claim", "begun") and returns the file it was handed.
func killedWorker(t *testing.T, dir, url string, plan []PlannedFile, kill string) string {
	t.Helper()
	lines, err := nextProcess(t, dir, url, plan, kill)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
	require.Len(t, lines, 1)
	id, ok := strings.CutPrefix(lines[0], "got ")
	require.True(t, ok, lines[0])
	return id
}

// dead-claim-heals (R110) across processes, as a user saw it: a worker
// process of a WithParallel(4) directory run is SIGKILLed between Next and
// its upload. With no operator command: `journal status` (a Journal
// opened after the death) is clear, showing the shard's marker dead with
// method CLAIM; the first Next hands the same file out again, at once; a
// restarted worker process is handed every file, the killed one's
// included, each sent once, and ends with ErrNoMoreFiles; the run then
// holds exactly its files: a receipt per file, no review, no marker.
func TestNextKilledBeforeUploadHealsItself(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	plan := shard1Plan(24)
	require.GreaterOrEqual(t, len(plan), 3)
	srv := &putCounter{puts: map[string]int{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	dir := filepath.Join(t.TempDir(), "run")
	_, err := Open(dir, WithPlan(plan), WithParallel(4))
	require.NoError(t, err)
	killed := killedWorker(t, dir, ts.URL, plan, "claim")
	died := time.Now()
	require.Equal(t, plan[0].ID, killed)

	j, err := Open(dir, WithPlan(plan), WithParallel(4))
	require.NoError(t, err)
	st := j.Status(time.Now())
	require.Equal(t, Clear, st.State, st.Reason)
	v := st.Shards[0]
	assert.Equal(t, []string{markerDead, record.ClaimMethod, string(Clear)}, []string{v.Marker, v.Method, string(v.State)})
	assert.Equal(t, len(plan), st.Files[FileNeverAttempted])

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // were the claim unresolved, Next would wait
	defer cancel()
	f, err := j.Next(ctx, NewApproval)
	took := time.Since(died)
	require.NoError(t, err)
	assert.Equal(t, killed, f.ID, "the killed worker's file is handed out again")
	t.Logf("the killed worker's file handed out again %v after its death", took)
	require.NoError(t, j.Release(f))

	lines, err := nextProcess(t, dir, ts.URL, plan, "")
	require.NoError(t, err)
	want := []string{}
	for _, p := range plan {
		want = append(want, "got "+p.ID)
	}
	assert.Equal(t, append(want, "end true"), lines, "the restarted worker is handed every file, in plan order")
	assert.Len(t, srv.puts, len(plan))
	for _, p := range plan {
		assert.Equal(t, 1, srv.puts[p.ID], p.ID)
	}
	wantFiles := []string{record.ManifestName, record.PlanName, record.ShardName(1) + "/" + record.ManifestName, record.ShardName(1) + "/" + record.PlanName,
		record.ShardName(1) + "/" + record.HeadName(len(plan))}
	for k := 2; k <= 4; k++ {
		wantFiles = append(wantFiles, record.ShardName(k)+"/"+record.ManifestName, record.ShardName(k)+"/"+record.PlanName)
	}
	for _, p := range plan {
		wantFiles = append(wantFiles, record.ShardName(1)+"/"+receiptName(record.FileDigest(p.ID)))
	}
	slices.Sort(wantFiles)
	assert.Equal(t, wantFiles, treeNames(t, dir), "a receipt per file, no review, no marker")
}

// dead-upload-waits (R111) across processes: a worker process of a
// WithParallel(4) directory run is SIGKILLed after its upload began (its
// begun head written). `journal status` is unresolved, the shard's marker
// dead with method PUT, the file unknown. A restarted worker process and a
// worker in this process loop on Next: they wait, sending nothing and
// not ending, and the in-process one says why once (one log line naming
// the dead marker). The one pending review brings both back without a
// restart: after its 30 s wait (the reviewer's clock is 29 s behind, so 1 s
// here) they are handed every other file, each sent once, and end with
// ErrNoMoreFiles; the killed file stays unknown until its reupload review,
// after which Next hands it out.
func TestNextKilledAfterUploadBeganWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	plan := manyFiles(12)
	srv := &putCounter{puts: map[string]int{}, delay: 150 * time.Millisecond} // both workers are handed files
	ts := httptest.NewServer(srv)
	defer ts.Close()
	dir := filepath.Join(t.TempDir(), "run")
	_, err := Open(dir, WithPlan(plan), WithParallel(4))
	require.NoError(t, err)
	killed := killedWorker(t, dir, ts.URL, plan, "begun")

	j, err := Open(dir, WithPlan(plan), WithParallel(4))
	require.NoError(t, err)
	k := j.Shard(killed)
	st := j.Status(time.Now())
	require.Equal(t, Unresolved, st.State)
	v := st.Shards[k-1]
	assert.Equal(t, []string{markerDead, "PUT", string(Unresolved)}, []string{v.Marker, v.Method, string(v.State)})
	assert.Equal(t, 1, v.Files[FileUnknown])

	logs := &lockedBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	type result struct {
		lines []string
		err   error
	}
	restarted := make(chan result, 1)
	go func() {
		lines, err := nextProcess(t, dir, ts.URL, plan, "")
		restarted <- result{lines, err}
	}()
	w, err := Open(dir, WithPlan(plan), WithParallel(4))
	require.NoError(t, err)
	r := &shardedRun{dir: dir}
	local := newSendLog(r, w.Shard)
	local.delay = srv.delay
	type loop struct {
		got []string
		end error
	}
	inproc := make(chan loop, 1)
	go func() {
		var l loop
		for {
			f, err := w.Next(context.Background(), NewApproval)
			if err != nil {
				l.end = err
				break
			}
			l.got = append(l.got, f.ID)
			if out := uploadOne(readrecovery.New(local), w, f.ID); out != "acked" {
				l.end = errors.New(f.ID + ": " + out)
				break
			}
		}
		inproc <- l
	}()

	select {
	case res := <-restarted:
		t.Fatalf("the restarted worker ended while the run was unresolved: %v %v", res.lines, res.err)
	case l := <-inproc:
		t.Fatalf("the worker ended while the run was unresolved: %v %v", l.got, l.end)
	case <-time.After(1500 * time.Millisecond):
	}
	srv.mu.Lock()
	assert.Empty(t, srv.puts, "nothing sent while the run is unresolved")
	srv.mu.Unlock()
	waits := strings.Count(logs.String(), "Next waits")
	assert.Equal(t, 1, waits, "said once: %s", logs.String())
	assert.Contains(t, logs.String(), record.ShardName(k)+"/"+record.MarkerName)

	start := time.Now() // before the deadline is set: the context ends 300 ms after it at the earliest
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = j.Next(ctx, NewApproval)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "Next waited until its context ended")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrPending, "the context's end says what Next waited for")

	reviewer, err := Open(dir, WithPlan(plan), WithParallel(4), withClock(newFakeClock(time.Now().Add(-29*time.Second))))
	require.NoError(t, err)
	rec, err := reviewer.ReviewPendingMarker(context.Background(), "", "worker killed mid-upload", 0)
	require.NoError(t, err)
	reviewed := time.Now()
	assert.Equal(t, record.MarkerRef(k), rec.Marker)

	var res result
	select {
	case res = <-restarted:
	case <-time.After(20 * time.Second):
		t.Fatal("the restarted worker did not come back after the review")
	}
	require.NoError(t, res.err)
	l := <-inproc
	require.ErrorIs(t, l.end, ErrNoMoreFiles)
	t.Logf("after the review (its not-before %d s on): both workers done %v later; files: restarted %d, in-process %d",
		rec.NotBeforeUTC-reviewed.Unix(), time.Since(reviewed), len(res.lines)-1, len(l.got))
	require.Equal(t, "end true", res.lines[len(res.lines)-1])
	handed := slices.Clone(l.got)
	for _, line := range res.lines[:len(res.lines)-1] {
		id, ok := strings.CutPrefix(line, "got ")
		require.True(t, ok, line)
		handed = append(handed, id)
	}
	assert.NotEmpty(t, l.got, "the waiting worker came back")
	assert.Greater(t, len(res.lines), 1, "the restarted worker came back")
	slices.Sort(handed)
	want := slices.DeleteFunc(ids(plan), func(id string) bool { return id == killed })
	assert.Equal(t, want, handed, "every file but the killed one, each handed out once")
	for _, id := range want {
		srv.mu.Lock()
		n := srv.puts[id]
		srv.mu.Unlock()
		assert.Equal(t, 1, n+local.puts[id], id)
	}
	assert.Zero(t, srv.puts[killed]+local.puts[killed], "the killed file is never sent again")

	_, err = j.Review(context.Background(), killed, DecisionReupload, "not on the server")
	require.NoError(t, err)
	f, err := j.Next(context.Background(), NewApproval)
	require.NoError(t, err)
	assert.Equal(t, killed, f.ID, "the file's reupload decision makes it eligible again")
	require.NoError(t, j.Release(f))
}

// The removal of a dead worker's marker on a directory (which has no
// versions) never removes a live one: the marker a worker holds (its
// claim, locked) is refused, and stays; once its worker is dead it goes;
// a marker of other bytes than those read is refused, and stays.
func TestRemoveDeadSparesALiveMarker(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	a, err := Open(dir, WithPlan(plan3))
	require.NoError(t, err)
	_, err = a.Next(context.Background(), NewApproval)
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(dir, record.MarkerName))
	require.NoError(t, err)
	l := store.LocOf(DirStore(dir))
	assert.Error(t, l.RemoveDead(record.DigestOf(data)), "live: its worker holds the lock")
	assert.FileExists(t, filepath.Join(dir, record.MarkerName))
	kill(a)
	assert.Error(t, l.RemoveDead(record.DigestOf([]byte("other bytes"))), "not the marker read")
	assert.FileExists(t, filepath.Join(dir, record.MarkerName))
	require.NoError(t, l.RemoveDead(record.DigestOf(data)))
	assert.NoFileExists(t, filepath.Join(dir, record.MarkerName))
}
