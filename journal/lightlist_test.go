//go:build unix

package journal

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
	"github.com/stretchr/testify/require"
)

// listCountFS is the real file system that counts the listings of each directory.
type listCountFS struct {
	fsys.OS
	mu    sync.Mutex
	lists map[string]int
	tick  atomic.Bool
}

func (c *listCountFS) ReadDir(name string, n int) ([]fs.DirEntry, error) {
	c.mu.Lock()
	c.lists[filepath.Base(name)]++
	c.mu.Unlock()
	return c.OS.ReadDir(name, n)
}

// Stat, with tick set, gives every directory that change time: each change
// within one tick of a coarse file system clock.
func (c *listCountFS) Stat(name string) (fs.FileInfo, error) {
	info, err := c.OS.Stat(name)
	if err != nil || !c.tick.Load() || !info.IsDir() {
		return info, err
	}
	st := *info.Sys().(*syscall.Stat_t)
	st.Ctim = syscall.Timespec{Sec: 1_700_000_000}
	return tickInfo{info, &st}, nil
}

type tickInfo struct {
	fs.FileInfo
	st *syscall.Stat_t
}

func (t tickInfo) Sys() any { return t.st }

// take returns the listings counted since the last take, and starts again.
func (c *listCountFS) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.lists
	c.lists = map[string]int{}
	return out
}

// "Shards in detail": the check across shards under a claim keeps each
// other shard's listing while the shard's directory is unchanged (its
// change time the one listed, older than the claim's), so Next's cost does
// not grow with the run's records; a shard that changed is listed again.
// Worker A uploads a file of shard 1; its second Begin lists no other
// shard; then worker B records a 429 in shard 3, and A's third Begin lists
// shard 3 (only) and is refused, waiting on B's entry.
//
// On a file system whose clock did not tick between a shard's change and
// the claim (every change time the same), nothing is kept: a change after
// the listing could bear the same time. Every check lists every shard.
func TestCheckAcrossShardsListsOnlyChangedShards(t *testing.T) {
	t.Run("ticks", func(t *testing.T) { testListsOnlyChanged(t, false) })
	t.Run("one tick", func(t *testing.T) { testListsOnlyChanged(t, true) })
}

func testListsOnlyChanged(t *testing.T, oneTick bool) {
	dir := filepath.Join(t.TempDir(), "run")
	plan := manyFiles(40)
	clk := newFakeClock(t0)
	cfs := &listCountFS{lists: map[string]int{}}
	cfs.tick.Store(oneTick)
	a, err := Open(dir, WithPlan(plan), WithParallel(4), withClock(clk), withFS(cfs))
	require.NoError(t, err)
	b, err := Open(dir, WithPlan(plan), withClock(clk))
	require.NoError(t, err)
	time.Sleep(30 * time.Millisecond) // the shards' change times, a clock tick (≤ 10 ms) before A's claim
	var byShard [5][]string
	for _, f := range plan {
		k := a.Shard(f.ID)
		byShard[k] = append(byShard[k], f.ID)
	}
	upload := func(id string) error {
		ctx, req := WithUpload(context.Background(), id), putReq(t)
		if err := a.Begin(ctx, req); err != nil {
			return err
		}
		return a.Complete(ctx, req, readrecovery.JournalOutcome{StatusCode: 201})
	}
	cfs.take() // Open's
	require.NoError(t, upload(byShard[1][0]))
	first := cfs.take()
	require.Equal(t, 1, first["shard-02"], "the first check lists every other shard: %v", first)
	require.NoError(t, upload(byShard[1][1]))
	second, listed := cfs.take(), 0
	if oneTick {
		listed = 1
	}
	for _, s := range []string{"shard-02", "shard-03", "shard-04"} {
		require.Equal(t, listed, second[s], "%s unchanged: its listing kept unless the clock did not tick (%v)", s, second)
	}
	record429(t, b, WithUpload(context.Background(), byShard[3][0]), putReq(t), secs(60), timing(t0, 60))
	err = upload(byShard[1][2])
	var re *RestrictedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, Waiting, re.Status.State, re.Status.Reason)
	require.True(t, strings.HasPrefix(re.Status.Reason, "shard-03/backoff-0001.json"), re.Status.Reason)
	lists := cfs.take()
	require.Equal(t, 1, lists["shard-03"], "shard 3 changed: listed again (%v)", lists)
	require.Equal(t, 2*listed, lists["shard-02"]+lists["shard-04"], "%v", lists)
}
