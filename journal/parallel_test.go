package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal"
)

// reqFor is the journaled PUT of file id.
func reqFor(t testing.TB, id string) readrecovery.JournalRequest {
	t.Helper()
	u, err := url.Parse("https://acct.blob.example/c/" + id)
	if err != nil {
		t.Fatal(err)
	}
	return readrecovery.JournalRequest{Method: "PUT", URLDigest: redact.URLDigest(u), Attempt: 1}
}

func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// parallel-shards: a run created WithParallel(4) is a root of run.json
// ("parallel":4), plan.json and shard-01 … shard-04, each an ordinary run
// whose plan.json holds exactly the files Shard maps to it. Each file's
// Begin/Complete lands its marker and receipt in its own shard, and
// Inspect of the root counts every receipt with no finding.
func TestParallelRunLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	plan := workerPlan(24)
	j, err := journal.Open(dir, journal.WithPlan(plan), journal.WithParallel(4))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dirNames(t, dir), []string{"plan.json", "run.json", "shard-01", "shard-02", "shard-03", "shard-04"}; !slices.Equal(got, want) {
		t.Fatalf("root holds %v, want %v", got, want)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m["parallel"] != 4.0 {
		t.Fatalf("root run.json %s: parallel = %v (%v), want 4", raw, m["parallel"], err)
	}
	if j.Parallel() != 4 {
		t.Fatalf("Parallel() = %d, want 4", j.Parallel())
	}
	perShard := map[int][]string{}
	for _, f := range plan {
		perShard[j.Shard(f.ID)] = append(perShard[j.Shard(f.ID)], journal.PlannedFile{ID: f.ID}.Digest())
	}
	for k := 1; k <= 4; k++ {
		sd := filepath.Join(dir, fmt.Sprintf("shard-%02d", k))
		var pl struct{ Files []string }
		raw, err := os.ReadFile(filepath.Join(sd, "plan.json"))
		if err != nil || json.Unmarshal(raw, &pl) != nil {
			t.Fatalf("shard %d plan.json: %s, %v", k, raw, err)
		}
		want := perShard[k]
		slices.Sort(want)
		if want == nil {
			want = []string{}
		}
		if !slices.Equal(pl.Files, want) {
			t.Errorf("shard %d plan holds %d files, want its %d", k, len(pl.Files), len(want))
		}
		var sm map[string]any
		raw, _ = os.ReadFile(filepath.Join(sd, "run.json"))
		if err := json.Unmarshal(raw, &sm); err != nil || sm["parallel"] != nil {
			t.Errorf("shard %d run.json %s: want an ordinary manifest", k, raw)
		}
	}
	for _, f := range plan {
		ctx := journal.WithUpload(context.Background(), f.ID)
		req := reqFor(t, f.ID)
		if err := j.Begin(ctx, req); err != nil {
			t.Fatalf("Begin %s: %v", f.ID, err)
		}
		sd := filepath.Join(dir, fmt.Sprintf("shard-%02d", j.Shard(f.ID)))
		if _, err := os.Stat(filepath.Join(sd, "pending-request.json")); err != nil {
			t.Fatalf("%s: no marker in its shard: %v", f.ID, err)
		}
		if err := j.Complete(ctx, req, readrecovery.JournalOutcome{StatusCode: 201}); err != nil {
			t.Fatalf("Complete %s: %v", f.ID, err)
		}
		rec := "receipt-" + strings.TrimPrefix(journal.PlannedFile{ID: f.ID}.Digest(), "sha256:")[:32] + ".json"
		if _, err := os.Stat(filepath.Join(sd, rec)); err != nil {
			t.Errorf("%s: no receipt in its shard: %v", f.ID, err)
		}
	}
	sum, err := journal.InspectStore(context.Background(), journal.DirStore(dir))
	if err != nil || sum.Receipts != 24 || sum.PlannedFiles != 24 || len(sum.Findings) != 0 {
		t.Fatalf("Inspect = %+v, %v; want 24 receipts of 24 planned files, no finding", sum, err)
	}
	c, err := j.PlanContinuation(plan, journal.NewApproval, time.Now())
	if err != nil || c.Count(journal.FileAcked) != 24 || c.Status.State != journal.Clear {
		t.Fatalf("PlanContinuation: %v acked of 24, status %v, %v", c.Count(journal.FileAcked), c.Status, err)
	}

	// Reopened without the option: the same run; with another n: refused.
	if j2, err := journal.Open(dir, journal.Existing()); err != nil || j2.Parallel() != 4 {
		t.Fatalf("OpenExisting without the option: %v, %v", j2, err)
	}
	if _, err := journal.Open(dir, journal.WithPlan(workerPlan(23))); !errors.Is(err, journal.ErrPlanMismatch) {
		t.Errorf("another plan: %v, want ErrPlanMismatch", err)
	}
	if _, err := journal.Open(dir, journal.WithParallel(3)); err == nil || !strings.Contains(err.Error(), "4 shards") {
		t.Errorf("WithParallel(3) on a run of 4: %v", err)
	}
	for _, n := range []int{-1, 0, 1, 17} {
		if _, err := journal.Open(filepath.Join(t.TempDir(), "x"), journal.WithParallel(n)); err == nil || !strings.Contains(err.Error(), "2 to 16") {
			t.Errorf("WithParallel(%d): %v, want a refusal naming 2 to 16", n, err)
		}
	}
	single := filepath.Join(t.TempDir(), "single")
	if _, err := journal.Open(single, journal.WithPlan(plan)); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.Open(single, journal.WithParallel(4)); err == nil || !strings.Contains(err.Error(), "without WithParallel") {
		t.Errorf("WithParallel on a run created without it: %v", err)
	}
}
