package journal

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The run at a glance (issue 28): Journal.Status counts the planned files
// per class and has a line per shard with its marker (live or dead), the
// worker's host and pid and the marker's file; a file under a live marker
// is in-flight, under a dead one (present for the pending wait) unknown,
// and its shard's marker dead. Status.CommandJSON prints both beside the backoff
// object.
func TestStatusAtAGlance(t *testing.T) {
	plan := manyFiles(8)
	dir := filepath.Join(t.TempDir(), "run")
	open := func(at time.Time) *Journal {
		j, err := Open(dir, WithPlan(plan), WithParallel(4), withClock(newFakeClock(at)))
		require.NoError(t, err)
		return j
	}
	w := open(t0)
	// Three files of three different shards: acked, attempted without ACK,
	// and in flight under a worker's marker.
	var acked, failed, flying string
	used := map[int]bool{}
	for _, f := range plan {
		k := w.Shard(f.ID)
		if used[k] {
			continue
		}
		used[k] = true
		switch {
		case acked == "":
			acked = f.ID
		case failed == "":
			failed = f.ID
		case flying == "":
			flying = f.ID
		}
	}
	send := func(id string, out readrecovery.JournalOutcome) {
		ctx := WithUpload(context.Background(), id)
		require.NoError(t, w.Begin(ctx, putReq(t)))
		require.NoError(t, w.Complete(ctx, putReq(t), out))
	}
	send(acked, ok201("a"))
	send(failed, readrecovery.JournalOutcome{StatusCode: 500, RequestID: "f"})
	require.NoError(t, w.Begin(WithUpload(context.Background(), flying), putReq(t)))

	host, _ := os.Hostname()
	st := open(t0.Add(5 * time.Second)).Status(t0.Add(5 * time.Second))
	assert.Equal(t, Clear, st.State)
	assert.Equal(t, map[FileState]int{FileAcked: 1, FileInFlight: 1, FileNeverAttempted: 5, FileUnknown: 1, FileReviewed: 0}, st.Files)
	require.Len(t, st.Shards, 4)
	k := w.Shard(flying)
	for i, sv := range st.Shards {
		assert.Equal(t, record.ShardName(i+1), sv.Shard)
		total := 0
		for _, n := range sv.Files {
			total += n
		}
		assert.Equal(t, len(record.ShardPlan(sortedDigests(plan), i+1, 4)), total, sv.Shard)
		if i+1 != k {
			assert.Equal(t, "", sv.Marker, sv.Shard)
			continue
		}
		assert.Equal(t, ShardView{Shard: record.ShardName(k), State: Clear, Marker: "live", Method: "PUT", FileDigest: record.FileDigest(flying),
			Host: host, PID: os.Getpid(), AgeSeconds: 5, Files: sv.Files}, sv)
		assert.Equal(t, 1, sv.Files[FileInFlight])
	}
	out, err := st.CommandJSON()
	require.NoError(t, err)
	assert.Contains(t, string(out), `"files":{"acked":1,"in-flight":1,"never-attempted":5,"reviewed":0,"unknown":1},"shards":[{"shard":"shard-01",`)

	// An hour later by the reader's clock the marker is still live: its
	// worker holds its lock (R83), so the file is in flight, not unknown.
	later := t0.Add(time.Hour)
	st = open(later).Status(later)
	assert.Equal(t, Clear, st.State)
	assert.Equal(t, map[FileState]int{FileAcked: 1, FileInFlight: 1, FileNeverAttempted: 5, FileUnknown: 1, FileReviewed: 0}, st.Files)
	assert.Equal(t, "live", st.Shards[k-1].Marker)

	// The Journal whose request is in flight sees its own marker live.
	assert.Equal(t, "live", w.Status(later).Shards[k-1].Marker)

	// Its worker dies (the lock ends with it): the marker is dead at once,
	// its file unknown.
	kill(w)
	st = open(t0.Add(5 * time.Second)).Status(t0.Add(5 * time.Second))
	assert.Equal(t, Unresolved, st.State)
	assert.Equal(t, map[FileState]int{FileAcked: 1, FileInFlight: 0, FileNeverAttempted: 5, FileUnknown: 2, FileReviewed: 0}, st.Files)
	assert.Equal(t, "dead", st.Shards[k-1].Marker)
	assert.Equal(t, Unresolved, st.Shards[k-1].State, "a shard whose marker is dead reads unresolved on its line, as the run does")
	for i, sv := range st.Shards {
		if i != k-1 {
			assert.Equal(t, Clear, sv.State, sv.Shard)
		}
	}
	assert.Equal(t, 1, st.Shards[k-1].Files[FileUnknown])

	// A reviewed file is counted as reviewed.
	r := open(t0.Add(6 * time.Second))
	_, err = r.Review(context.Background(), failed, DecisionReupload, "")
	require.NoError(t, err)
	assert.Equal(t, 1, r.Status(t0.Add(6 * time.Second)).Files[FileReviewed])
}

func sortedDigests(plan []PlannedFile) []string {
	var ds []string
	for _, f := range plan {
		ds = append(ds, record.FileDigest(f.ID))
	}
	sort.Strings(ds)
	return ds
}
