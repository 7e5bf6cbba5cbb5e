package journal

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// R85: a marker removed by hand is a finding, never a way to make its file
// eligible. An upload's begin is durable in the run's chain (its begun
// head) before it is sent, so a run whose last head is an upload begun,
// with neither its record nor its marker, is unresolved with a finding
// naming the marker; nothing is admitted, Next hands out nothing, and the
// file is never planned for upload. `journal review --pending` is the way
// out: the file is then unknown and the run waits 30 s.
func TestMarkerRemovedByHandIsAFinding(t *testing.T) {
	for _, tc := range []struct {
		name     string
		parallel int
		named    bool // the review names the marker (--marker)
	}{{"run", 0, false}, {"run/named", 0, true}, {"parallel", 2, false}, {"parallel/named", 2, true}} {
		parallel := tc.parallel
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			marker, dir := record.MarkerName, ""
			if parallel > 0 {
				opts = append(opts, WithParallel(parallel))
			}
			j, _ := newRun(t, opts...)
			dir = j.Dir()
			if parallel > 0 {
				marker = record.MarkerRef(record.ShardIndex(record.FileDigest("a.bin"), parallel))
			}
			a := WithUpload(context.Background(), "a.bin")
			require.NoError(t, j.Begin(a, putReq(t)))
			require.NoError(t, os.Remove(filepath.Join(dir, marker)), "the operator removes the marker by hand")

			now := t0.Add(time.Minute)
			k, err := Open(dir, Existing(), withClock(newFakeClock(now)), WithPlan(plan3))
			require.NoError(t, err)
			st := k.Status(now)
			require.Equal(t, Unresolved, st.State)
			require.True(t, strings.HasPrefix(st.Reason, marker+": missing: the upload begun in "), st.Reason)
			fs, err := verify(dir)
			require.NoError(t, err)
			require.Len(t, fs, 1, "%v", fs)
			assert.Equal(t, marker, fs[0].File)
			assert.Contains(t, fs[0].Problem, "the marker was removed by hand")

			require.ErrorIs(t, k.Admit(a, now), ErrRestricted, "not admitted")
			require.ErrorIs(t, k.Begin(a, putReq(t)), ErrRestricted, "not begun")
			f, err := k.Next(context.Background(), NewApproval)
			var re *RestrictedError
			require.ErrorAs(t, err, &re, "Next hands out nothing: %+v", f)
			assert.Equal(t, Unresolved, re.Status.State)
			c, err := k.PlanContinuation(plan3, NewApproval, now)
			require.NoError(t, err)
			assert.Empty(t, c.Uploads(), "a.bin is never eligible again by the marker's removal")
			assert.NotEqual(t, FileAcked, c.Files[0].State)
			require.NotContains(t, allNames(t, dir), marker, "nothing was written")

			// The way out: the pending review, bound to the begun head.
			kill(j)
			var rec ReviewRecord
			if tc.named {
				rec, err = k.ReviewPendingMarker(context.Background(), marker, "marker removed by hand", 0)
			} else {
				rec, err = k.ReviewPending(context.Background(), "marker removed by hand", 0)
			}
			require.NoError(t, err)
			assert.Equal(t, marker, rec.Marker)
			assert.True(t, rec.Removed)
			assert.Equal(t, record.FileDigest("a.bin"), rec.MarkerFileDigest)
			assert.Equal(t, now.Unix()+30, rec.NotBeforeUTC)
			fs, err = verify(dir)
			require.NoError(t, err)
			require.Empty(t, fs)
			r := reopen(t, dir, now)
			assert.Equal(t, Waiting, r.Status(now).State)
			later := now.Add(30 * time.Second)
			c, err = reopen(t, dir, later).PlanContinuation(plan3, NewApproval, later)
			require.NoError(t, err)
			assert.Equal(t, FileUnknown, c.Files[0].State, c.Files[0].Reason)
			assert.Equal(t, []string{"b.bin", "c.bin"}, c.Uploads())
		})
	}
}

// R85: the worker whose marker was removed by hand still completes its
// upload: its receipt takes the place its begun head holds, and the run is
// whole again (the marker's removal fails for that worker, whose Journal
// is unresolved from then on).
func TestMarkerRemovedByHandThenCompleted(t *testing.T) {
	j, _ := newRun(t)
	a := WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(a, putReq(t)))
	require.NoError(t, os.Remove(filepath.Join(j.Dir(), record.MarkerName)))
	require.Error(t, j.Complete(a, putReq(t), ok201("done")), "the marker is gone: its removal fails")
	assert.Equal(t, Unresolved, j.Status(t0).State)
	fs, err := verify(j.Dir())
	require.NoError(t, err)
	require.Empty(t, fs)
	assert.Equal(t, FileAcked, stateOf(t, reopen(t, j.Dir(), t0), "a.bin").State)
}

// R85 for a file Next handed out: its upload begins under Next's claim,
// durably too, so the claim's marker removed by hand is the same finding.
func TestMarkerRemovedByHandAfterNext(t *testing.T) {
	j, _ := newRun(t)
	f, err := j.Next(context.Background(), NewApproval)
	require.NoError(t, err)
	a := WithUpload(context.Background(), f.ID)
	require.NoError(t, j.Begin(a, putReq(t)))
	require.NoError(t, os.Remove(filepath.Join(j.Dir(), record.MarkerName)))
	k, err := Open(j.Dir(), Existing(), withClock(newFakeClock(t0)), WithPlan(plan3))
	require.NoError(t, err)
	st := k.Status(t0)
	require.Equal(t, Unresolved, st.State)
	require.True(t, strings.HasPrefix(st.Reason, record.MarkerName+": missing: the upload begun in "), st.Reason)
	_, err = k.Next(context.Background(), NewApproval)
	require.ErrorIs(t, err, ErrRestricted, "Next hands out nothing")
}
