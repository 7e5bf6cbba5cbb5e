package journal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery"
)

// plan4 is a plan of four files.
var plan4 = []PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}, {ID: "c.bin"}, {ID: "d.bin"}}

// deletionRun is a run holding three records of each kind (backoff
// entries, commit receipts, part receipts, reviews), interleaved, and its
// head; elapsed at the returned time. It returns the directory and the
// records in the order they were written.
func deletionRun(t testing.TB) (string, []string, time.Time) {
	dir, _, records, now := deletionRunIn(t, 0)
	return dir, records, now
}

// deletionRunIn is deletionRun, in a run of parallel shards when parallel
// is not 0: then its plan is four files of the one shard the run's GETs
// go to, and every record lies in that shard, whose directory it returns.
func deletionRunIn(t testing.TB, parallel int) (root, dir string, records []string, now time.Time) {
	t.Helper()
	clk := newFakeClock(t0)
	root = filepath.Join(t.TempDir(), "run")
	dir = root
	plan := plan4
	opts := []Option{withClock(clk), WithPlan(plan4)}
	if parallel > 0 {
		k := record.ShardIndex(getReq(t).URLDigest, parallel)
		plan = nil
		for i := 0; len(plan) < 4; i++ {
			if id := fmt.Sprintf("%c.bin", 'a'+i); record.ShardIndex(record.FileDigest(id), parallel) == k {
				plan = append(plan, PlannedFile{ID: id})
			}
		}
		opts = []Option{withClock(clk), WithPlan(plan), WithParallel(parallel)}
		dir = filepath.Join(root, record.ShardName(k))
	}
	id := func(i int) string { return plan[i].ID }
	j, err := Open(root, opts...)
	require.NoError(t, err)
	bg := context.Background()
	at := func(s int64) { clk.Set(t0.Add(time.Duration(s) * time.Second)) }
	commit := func(id string, status int) {
		ctx := WithUpload(bg, id)
		require.NoError(t, j.Begin(ctx, putReq(t)))
		require.NoError(t, j.Complete(ctx, putReq(t), readrecovery.JournalOutcome{StatusCode: status, RequestID: "r"}))
	}
	part := func(id string) {
		ctx := WithUploadPart(bg, id)
		require.NoError(t, j.Begin(ctx, putReq(t)))
		require.NoError(t, j.Complete(ctx, putReq(t), ok201("p")))
	}
	throttle := func(s int64) {
		at(s)
		record429(t, j, bg, getReq(t), secs(1), timing(clk.Now(), 1))
		at(s + 1)
	}
	review := func(id string, d Decision) {
		_, err := j.Review(bg, id, d, "")
		require.NoError(t, err)
	}
	throttle(0)                 // backoff-0001
	part(id(1))                 // part b 0001
	commit(id(2), 201)          // receipt c
	commit(id(0), 500)          // receipt a
	review(id(0), DecisionSkip) // review-0001
	part(id(1))                 // part b 0002
	throttle(10)                // backoff-0002
	part(id(3))                 // part d 0001
	review(id(1), DecisionSkip) // review-0002
	commit(id(3), 503)          // receipt d (d's own upload: a part, then its commit)
	review(id(3), DecisionSkip) // review-0003
	throttle(20)                // backoff-0003
	for _, n := range names(t, dir) {
		if record.IsRecordName(n) {
			records = append(records, n)
		}
	}
	require.Len(t, records, 12)
	return root, dir, records, t0.Add(time.Minute)
}

// deletion-detected: deleting any one record — a backoff
// entry, a commit receipt, a part receipt or a review; the first, a middle
// one or the last of its kind, the run's last record included — or the
// run's head makes the run unresolved, and verify names what is missing.
func TestDeletionTable(t *testing.T) {
	for _, parallel := range []int{0, 3} {
		t.Run(fmt.Sprintf("parallel=%d", parallel), func(t *testing.T) { deletionTable(t, parallel) })
	}
}

// deletionTable is the deletion table of a run, or of one shard of a
// parallel run (parallel-shards): verify of the root names the missing
// record with its shard (shard-02/backoff-0003.json).
func deletionTable(t *testing.T, parallel int) {
	root, dir, records, now := deletionRunIn(t, parallel)
	prefix := strings.TrimPrefix(strings.TrimPrefix(dir, root), "/")
	if prefix != "" {
		prefix += "/"
	}
	require.Equal(t, Elapsed, reopen(t, root, now).Status(now).State)
	fs, err := verify(root)
	require.NoError(t, err)
	require.Empty(t, fs)
	heads := 0
	for _, n := range allNames(t, dir) {
		if _, ok := record.ParseHeadName(n); ok {
			heads++
			assert.Equal(t, record.HeadName(len(records)), n, "one head, naming the last record")
		}
	}
	require.Equal(t, 1, heads)

	kinds := map[string][]string{}
	for _, r := range records {
		k := r[:strings.IndexByte(r, '-')]
		kinds[k] = append(kinds[k], r)
	}
	for _, k := range []string{"backoff", "receipt", "part", "review"} {
		require.GreaterOrEqual(t, len(kinds[k]), 3, k)
	}
	type row struct{ kind, which, name string }
	var rows []row
	for _, k := range []string{"backoff", "receipt", "part", "review"} {
		rs := kinds[k]
		rows = append(rows, row{k, "first", rs[0]}, row{k, "middle", rs[len(rs)/2]}, row{k, "last", rs[len(rs)-1]})
	}
	rows = append(rows, row{"head", "only", record.HeadName(len(records))})
	for _, r := range rows {
		t.Run(r.kind+" "+r.which, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "run")
			copyDir(t, root, d)
			require.NoError(t, os.Remove(filepath.Join(d, prefix+r.name)))
			st := reopen(t, d, now).Status(now)
			assert.Equal(t, Unresolved, st.State, "deleting %s", r.name)
			fs, err := verify(d)
			require.NoError(t, err)
			named := false
			for _, f := range fs {
				if f.File == prefix+r.name && strings.HasPrefix(f.Problem, "missing") {
					named = true
				}
			}
			assert.True(t, named, "verify names %s as missing: %v", r.name, fs)
			t.Logf("delete %-48s → %s", r.name, fs[0])
		})
	}
}

// FuzzDeletion deletes one or two files of the deletion run, chosen by
// the input: the run is never clear, waiting or elapsed, unless what was
// deleted is a file the sequence does not need (none here but the
// temporary ones, which this run has none of).
func FuzzDeletion(f *testing.F) {
	for i := range 16 {
		f.Add(uint8(i), uint8(255))
	}
	f.Add(uint8(3), uint8(4))
	dir, _, now := deletionRun(f)
	all := allNames(f, dir)
	f.Fuzz(func(t *testing.T, a, b uint8) {
		d := filepath.Join(t.TempDir(), "run")
		copyDir(t, dir, d)
		var gone []string
		for _, i := range []uint8{a, b} {
			if n := all[int(i)%len(all)]; i != 255 && n != record.PlanName && !contains(gone, n) {
				gone = append(gone, n)
				require.NoError(t, os.Remove(filepath.Join(d, n)))
			}
		}
		if len(gone) == 0 {
			return
		}
		j, err := Open(d, Existing(), withClock(newFakeClock(now)))
		if err != nil {
			return // a directory without run.json and the like: refused
		}
		assert.Equal(t, Unresolved, j.Status(now).State, "deleted %v", gone)
	})
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
