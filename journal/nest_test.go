package journal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// no-nesting: a directory inside a run, or holding one, is
// refused at open with ErrNested, and nothing is written; Verify and
// Inspect refuse it too.
func TestRunsNeverNest(t *testing.T) {
	outer, _ := newRun(t)
	inner := filepath.Join(outer.Dir(), "inner")
	_, err := Open(inner, WithPlan(plan3))
	require.ErrorIs(t, err, ErrNested)
	assert.Equal(t, "journal: runs never nest: "+inner+" lies inside the run "+outer.Dir(), err.Error())
	assert.NoDirExists(t, inner, "nothing is written")

	// A run copied into another by hand: both are refused.
	sub := filepath.Join(outer.Dir(), "sub")
	writeRun(t, sub, plan3, t0, nil, nil)
	_, err = OpenExisting(outer.Dir())
	require.ErrorIs(t, err, ErrNested)
	_, err = OpenExisting(sub)
	require.ErrorIs(t, err, ErrNested)
	deeper := filepath.Join(sub, "a", "b")
	require.NoError(t, os.MkdirAll(filepath.Dir(deeper), 0o700))
	_, err = Open(deeper)
	require.ErrorIs(t, err, ErrNested, "any ancestor counts")

	holder := filepath.Join(t.TempDir(), "holder")
	require.NoError(t, os.Mkdir(holder, 0o700))
	writeRun(t, filepath.Join(holder, "a"), plan3, t0, nil, nil)
	_, err = Open(holder)
	require.ErrorIs(t, err, ErrNested)
	assert.Equal(t, "journal: runs never nest: "+holder+" holds the run "+filepath.Join(holder, "a"), err.Error())
	_, err = Verify(holder)
	require.ErrorIs(t, err, ErrNested)
	_, err = Inspect(filepath.Join(holder, "a"))
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
	_, err = OpenExistingStore(context.Background(), st)
	require.ErrorIs(t, err, ErrNested)
	assert.Equal(t, "journal: runs never nest: store holds the run y/", err.Error())
	_, err = InspectStore(context.Background(), st)
	require.ErrorIs(t, err, ErrNested)

	_, err = OpenStore(context.Background(), enclosingStore{newMemStore(), "c/x/"}, WithPlan(plan3))
	require.ErrorIs(t, err, ErrNested)
	assert.Equal(t, "journal: runs never nest: store lies inside the run c/x/", err.Error())
}
