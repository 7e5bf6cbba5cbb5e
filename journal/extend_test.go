package journal

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal/internal/record"
	"github.com/readrecovery/readrecovery/journal/internal/runread"
	"github.com/stretchr/testify/require"
)

// A refresh that only finds new receipts and part receipts reads only
// those (runread's extend, R112: Next's cost does not grow with the run's
// records), and must see exactly what a scan of the whole run sees. Two
// Journals of one run (as two processes) take turns writing, and after
// every step each refreshes: its snapshot's records, sequence, heads,
// findings, status and every planned file's view must equal a fresh full
// scan's. The steps cover what extend takes (commits, parts, another
// writer's records) and what it leaves to the full scan (a 429's entry, a
// review and the receipts after it, a deleted record, a foreign file).
func TestRefreshExtendsAsAFullScan(t *testing.T) {
	for _, tc := range []string{"review", "deleted receipt", "deleted part", "foreign receipt", "unlinked receipt"} {
		t.Run(tc, func(t *testing.T) { testRefreshExtends(t, tc) })
	}
}

func testRefreshExtends(t *testing.T, last string) {
	dir := filepath.Join(t.TempDir(), "run")
	plan := manyFiles(12)
	clk := newFakeClock(t0)
	a, err := Open(dir, WithPlan(plan), withClock(clk))
	require.NoError(t, err)
	b, err := Open(dir, WithPlan(plan), withClock(clk))
	require.NoError(t, err)
	bg := context.Background()
	commit := func(j *Journal, i, status int) {
		ctx := WithUpload(bg, plan[i].ID)
		require.NoError(t, j.Begin(ctx, putReq(t)))
		require.NoError(t, j.Complete(ctx, putReq(t), readrecovery.JournalOutcome{StatusCode: status, RequestID: "r"}))
	}
	part := func(j *Journal, i int) {
		ctx := WithUploadPart(bg, plan[i].ID)
		require.NoError(t, j.Begin(ctx, putReq(t)))
		require.NoError(t, j.Complete(ctx, putReq(t), ok201("p")))
	}
	same := func(step string) {
		t.Helper()
		for _, j := range []*Journal{a, b} {
			r := j.r.(*run)
			r.mu.Lock()
			r.refreshLocked(bg)
			got := r.snap
			r.mu.Unlock()
			full, err := runread.ScanRun(r.b, nil, clk.Now())
			require.NoError(t, err)
			requireSameSnapshot(t, step, got, full, plan, clk.Now())
		}
	}
	before := runread.Extended.Load()
	same("opened")
	commit(a, 0, 201)
	same("a commits")
	commit(b, 1, 201)
	part(b, 2)
	same("b commits, then a part")
	part(a, 6)
	part(b, 2)
	commit(a, 6, 201)
	commit(b, 2, 201)
	same("parts and commits of both")
	clk.Set(t0.Add(time.Second))
	record429(t, a, WithUpload(bg, plan[3].ID), putReq(t), secs(1), timing(clk.Now(), 1))
	same("a 429's entry")
	clk.Set(t0.Add(3 * time.Second))
	commit(b, 4, 201)
	commit(b, 5, 500)
	same("commits after the entry")
	require.GreaterOrEqual(t, runread.Extended.Load()-before, uint64(8), "the refreshes above are extend's")
	remove := func(prefix string) {
		for _, n := range names(t, dir) {
			if strings.HasPrefix(n, prefix) {
				require.NoError(t, os.Remove(filepath.Join(dir, n)))
				return
			}
		}
		t.Fatalf("no %s", prefix)
	}
	switch last {
	case "review":
		_, err = a.Review(bg, plan[5].ID, DecisionReupload, "")
		require.NoError(t, err)
		reviewed := runread.Extended.Load()
		same("a reupload review")
		commit(b, 5, 201)
		same("round 2's receipt after the review")
		require.Equal(t, reviewed, runread.Extended.Load(), "a run with a review is scanned whole")
		return
	case "deleted receipt":
		remove("receipt-")
	case "deleted part":
		remove("part-")
	case "unlinked receipt": // well formed and next in the sequence, but its prev is not the last record
		fd := plan[7].Digest()
		_, pd, err := digestOfPlan(plan)
		require.NoError(t, err)
		appendRecordAfter(t, dir, record.ReceiptNameRound(fd, 1), record.KindReceipt, &record.ReceiptBody{PlanDigest: pd, FileDigest: fd,
			Method: "PUT", URLDigest: urlDigest(t, secretURL), Attempt: 1, Status: 201, ACK: true, RequestID: "r", ETag: `"0x1"`, RecordedAtUTC: t0.Unix()},
			func(l record.Link) record.Link {
				return record.Link{Name: l.Name, Digest: record.DigestOf([]byte("another record"))}
			})
	case "foreign receipt":
		require.NoError(t, os.WriteFile(filepath.Join(dir, record.ReceiptNameRound(plan[7].Digest(), 1)), []byte("{}"), 0o600))
	}
	same(last)
	require.Equal(t, Unresolved, a.Status(clk.Now()).State, last)
}

// requireSameSnapshot fails unless the snapshots got and want read the run alike.
func requireSameSnapshot(t *testing.T, step string, got, want *runread.Snapshot, plan []PlannedFile, now time.Time) {
	t.Helper()
	recs := func(s *runread.Snapshot) (out []string) {
		for _, r := range s.Recs {
			out = append(out, r.Name)
		}
		return out
	}
	require.Equal(t, recs(want), recs(got), "%s: records", step)
	require.Equal(t, want.Seq, got.Seq, "%s: sequence", step)
	require.Equal(t, want.LastSeq, got.LastSeq, "%s", step)
	require.Equal(t, want.Heads, got.Heads, "%s: heads", step)
	require.Equal(t, want.Begun, got.Begun, "%s: begun", step)
	require.Equal(t, want.Findings, got.Findings, "%s: findings", step)
	require.Equal(t, want.PlanFiles, got.PlanFiles, "%s", step)
	require.Equal(t, statusOf(want, now, false), statusOf(got, now, false), "%s: status", step)
	for _, f := range plan {
		d := f.Digest()
		require.True(t, reflect.DeepEqual(want.View(d, false), got.View(d, false)), "%s: the view of %s", step, f.ID)
	}
}
