package journal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// no-nesting: a directory inside a run, or holding one, is
// refused at open with errNested, and nothing is written; Verify and
// Inspect refuse it too.
func TestRunsNeverNest(t *testing.T) {
	outer, _ := newRun(t)
	inner := filepath.Join(outer.Dir(), "inner")
	_, err := Open(inner, WithPlan(plan3))
	require.ErrorIs(t, err, store.ErrNested)
	assert.Equal(t, "journal: runs never nest: "+inner+" lies inside the run "+outer.Dir(), err.Error())
	assert.NoDirExists(t, inner, "nothing is written")

	// A run copied into another by hand: both are refused.
	sub := filepath.Join(outer.Dir(), "sub")
	writeRun(t, sub, plan3, t0, nil, nil)
	_, err = Open(outer.Dir(), Existing())
	require.ErrorIs(t, err, store.ErrNested)
	_, err = Open(sub, Existing())
	require.ErrorIs(t, err, store.ErrNested)
	deeper := filepath.Join(sub, "a", "b")
	require.NoError(t, os.MkdirAll(filepath.Dir(deeper), 0o700))
	_, err = Open(deeper)
	require.ErrorIs(t, err, store.ErrNested, "any ancestor counts")

	holder := filepath.Join(t.TempDir(), "holder")
	require.NoError(t, os.Mkdir(holder, 0o700))
	writeRun(t, filepath.Join(holder, "a"), plan3, t0, nil, nil)
	_, err = Open(holder)
	require.ErrorIs(t, err, store.ErrNested)
	assert.Equal(t, "journal: runs never nest: "+holder+" holds the run "+filepath.Join(holder, "a"), err.Error())
	_, err = verify(holder)
	require.ErrorIs(t, err, store.ErrNested)
	_, err = inspectDir(filepath.Join(holder, "a"))
	require.NoError(t, err, "a run beside others (not inside one) is fine")
}

// enclosingStore is a memStore whose run lies inside another.
type enclosingStore struct {
	*memStore
	outer string
}

func (e enclosingStore) EnclosingRun(context.Context) (string, error) { return e.outer, nil }

// no-nesting: a store's flat listing that holds another run's manifest
// (prefix x/ lists x/y/run.json), or a store inside another run, is
// refused at open.
func TestStoreRunsNeverNest(t *testing.T) {
	st := newMemStore()
	openMem(t, st, t0)
	_, err := st.Create(context.Background(), "y/run.json", []byte("{}\n"))
	require.NoError(t, err)
	_, err = OpenStore(context.Background(), st, Existing())
	require.ErrorIs(t, err, store.ErrNested)
	assert.Equal(t, "journal: runs never nest: store holds the run y/", err.Error())
	_, err = InspectStore(context.Background(), st)
	require.ErrorIs(t, err, store.ErrNested)

	_, err = OpenStore(context.Background(), enclosingStore{newMemStore(), "c/x/"}, WithPlan(plan3))
	require.ErrorIs(t, err, store.ErrNested)
	assert.Equal(t, "journal: runs never nest: store lies inside the run c/x/", err.Error())
}

// no-nesting, parallel-shards: the shards are part of their root's run.
// Opening, verifying or inspecting run/shard-01 directly is refused as
// nested; a root that holds anything but its own shards — a run in
// another subdirectory, a shard beyond its count, a run inside a shard —
// is refused; a stray subdirectory without a run is a finding (the run is
// unresolved). The same holds for a root kept in a Store.
func TestParallelShardsNest(t *testing.T) {
	newRoot := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "run")
		_, err := Open(dir, WithPlan(plan3), WithParallel(4), withClock(newFakeClock(t0)))
		require.NoError(t, err)
		return dir
	}
	root := newRoot(t)
	shard := filepath.Join(root, "shard-01")
	_, err := Open(shard, Existing())
	require.ErrorIs(t, err, store.ErrNested)
	assert.Equal(t, "journal: runs never nest: "+shard+" lies inside the run "+root, err.Error())
	_, err = Open(shard, WithParallel(2))
	require.ErrorIs(t, err, store.ErrNested)
	_, err = verify(shard)
	require.ErrorIs(t, err, store.ErrNested)
	_, err = inspectDir(shard)
	require.ErrorIs(t, err, store.ErrNested)
	sum, err := inspectDir(root)
	require.NoError(t, err)
	require.Empty(t, sum.Findings)

	for _, sub := range []string{"other", "shard-05", filepath.Join("shard-02", "x")} {
		t.Run(sub, func(t *testing.T) {
			root := newRoot(t)
			writeRun(t, filepath.Join(root, sub), plan3, t0, nil, nil)
			_, err := Open(root, Existing())
			require.ErrorIs(t, err, store.ErrNested)
			_, err = inspectDir(root)
			require.ErrorIs(t, err, store.ErrNested)
		})
	}
	// A record or a marker in the root itself is not the run's.
	for _, name := range []string{record.MarkerName, "backoff-0001.json"} {
		root := newRoot(t)
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte("{}\n"), 0o600))
		j, err := Open(root, Existing())
		require.NoError(t, err)
		require.Equal(t, Unresolved, j.Status(t0).State, name)
		sum, err := inspectDir(root)
		require.NoError(t, err)
		require.Contains(t, sum.Findings, Finding{File: name, Problem: "in a parallel run's root: its records live in its shards (not a record of this run)"})
	}
	root = newRoot(t)
	require.NoError(t, os.Mkdir(filepath.Join(root, "stray"), 0o700))
	j, err := Open(root, Existing())
	require.NoError(t, err)
	st := j.Status(t0)
	require.Equal(t, Unresolved, st.State)
	assert.Equal(t, "stray: unexpected file in the run directory", st.Reason)

	// In a Store: another run's manifest under the root, or a shard
	// beyond the count, is refused.
	for _, name := range []string{"other/run.json", "shard-05/run.json", "shard-01/x/run.json"} {
		st := newMemStore()
		_, err := OpenStore(context.Background(), st, WithPlan(plan3), WithParallel(4), withClock(newFakeClock(t0)))
		require.NoError(t, err)
		_, err = st.Create(context.Background(), name, []byte("{}\n"))
		require.NoError(t, err)
		_, err = OpenStore(context.Background(), st, Existing())
		require.ErrorIs(t, err, store.ErrNested, name)
		_, err = InspectStore(context.Background(), st)
		require.ErrorIs(t, err, store.ErrNested, name)
	}
}
