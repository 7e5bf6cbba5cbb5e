package journal

import (
	"context"
	"io/fs"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newSendLog is a sendLog of the four-shard run r that answers 201 at once.
func newSendLog(r *shardedRun, shard func(string) int) *sendLog {
	return &sendLog{run: r, n: 4, shard: shard, throttle: map[string]bool{}, puts: map[string]int{}, perShard: map[int]int{}}
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
	return slices.DeleteFunc(manyFiles(n), func(f PlannedFile) bool { return shardIndex(fileDigest(f.ID), 4) != 1 })
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
	assert.Equal(t, []string{markerDead, claimMethod, string(Clear)}, []string{v.Marker, v.Method, string(v.State)})
	assert.Equal(t, len(plan), st.Files[FileNeverAttempted])

	f, err := j.Next(context.Background(), NewApproval)
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
	wantFiles := []string{manifestName, planName, shardName(1) + "/" + manifestName, shardName(1) + "/" + planName,
		shardName(1) + "/" + headName(len(plan))}
	for k := 2; k <= 4; k++ {
		wantFiles = append(wantFiles, shardName(k)+"/"+manifestName, shardName(k)+"/"+planName)
	}
	for _, p := range plan {
		wantFiles = append(wantFiles, shardName(1)+"/"+receiptName(fileDigest(p.ID)))
	}
	slices.Sort(wantFiles)
	assert.Equal(t, wantFiles, treeNames(t, dir), "a receipt per file, no review, no marker")
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
	data, err := os.ReadFile(filepath.Join(dir, markerName))
	require.NoError(t, err)
	l := locOf(DirStore(dir))
	assert.Error(t, l.removeDead(digestOf(data)), "live: its worker holds the lock")
	assert.FileExists(t, filepath.Join(dir, markerName))
	kill(a)
	assert.Error(t, l.removeDead(digestOf([]byte("other bytes"))), "not the marker read")
	assert.FileExists(t, filepath.Join(dir, markerName))
	require.NoError(t, l.removeDead(digestOf(data)))
	assert.NoFileExists(t, filepath.Join(dir, markerName))
}
