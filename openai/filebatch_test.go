package rropenai_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// TestFileBatchJournaled: a vector-store file batch create is a mutation
// of the journaled run. Meeting retry-after-ms 60000 it is sent once, its
// 429 is a backoff entry (no receipt), and the run is waiting for the
// next invocation. After the 60 s the create goes through, and a poll's
// 429 (retry-after-ms 1500, Retry-After 2) is the sequence's one wait:
// the poll is re-sent by readrecovery exactly 2 s later, then openai-go
// polls again after the server's openai-poll-after-ms (1 s).
func TestFileBatchJournaled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		var fileIDs []string
		for i := range 3 {
			fileIDs = append(fileIDs, e.srv.AddOpenAIFile(fmt.Sprintf("f%d", i), "assistants", []byte{byte(i)}).ID)
		}
		e.srv.Script().Add(fakeserver.RouteOpenAIBatchCreate,
			fakeserver.Throttle(fakeserver.RetryAfterSeconds(60)).WithRetryAfterMs(60000, false), fakeserver.Nth(1))
		e.srv.Script().Add(fakeserver.RouteOpenAIBatchGet,
			fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)).WithRetryAfterMs(1500, false), fakeserver.Nth(1))
		dir := filepath.Join(t.TempDir(), "run")
		params := openai.VectorStoreFileBatchNewParams{FileIDs: fileIDs}

		j1, err := journal.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		b1 := readrecovery.NewBudget("file batch")
		_, err = e.client.VectorStores.FileBatches.NewAndPoll(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b1), j1), "vs_1", params, 0)
		if statusOf(err) != 429 || len(e.ledger("")) != 1 || b1.Report().Stop != readrecovery.StopOverlong {
			t.Fatalf("invocation 1: %v, %d requests, stop %q", err, len(e.ledger("")), b1.Report().Stop)
		}
		if names := runFiles(t, dir); names != "backoff-0001.json head-0001.json plan.json run.json" {
			t.Fatalf("the run holds %s", names)
		}
		if st := j1.Status(time.Now()); st.State != journal.Waiting || st.RemainingSeconds != 60 {
			t.Fatalf("status %+v", st)
		}

		time.Sleep(61 * time.Second)
		j2, err := journal.Open(dir, journal.Existing())
		if err != nil {
			t.Fatal(err)
		}
		b2 := readrecovery.NewBudget("file batch, continued")
		start := time.Now()
		batch, err := e.client.VectorStores.FileBatches.NewAndPoll(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b2), j2), "vs_1", params, 0)
		if err != nil || batch.Status != openai.VectorStoreFileBatchStatusCompleted {
			t.Fatalf("invocation 2: %+v, %v", batch, err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("invocation 2 took %v, want 2 s (the poll's 429) + 1 s (poll interval)", d)
		}
		got := ""
		for _, r := range e.srv.Requests() {
			got += fmt.Sprintf("%s:%d ", strings.TrimPrefix(r.Route, "openai.file_batch."), r.Status)
		}
		if got != "create:429 create:200 get:429 get:200 get:200 " {
			t.Fatalf("the fake saw %s", got)
		}
		if g := gaps(e.ledger(fakeserver.RouteOpenAIBatchGet)); g[0] != 2*time.Second || g[1] != time.Second {
			t.Fatalf("poll gaps %v", g)
		}
		if r := b2.Report(); r.Requests != 4 || r.Waits != 1 || r.Window == nil || r.Window.Trigger != "read-429" || r.Stop != "" {
			t.Fatalf("invocation 2 report %v", r)
		}
		if names := runFiles(t, dir); names != "backoff-0001.json backoff-0002.json head-0002.json plan.json run.json" {
			t.Fatalf("the run holds %s", names)
		}
		// The create was sent once per invocation: the 429'd one created
		// nothing, and the continuation's is the caller's new call after the
		// restriction (the journal keeps files' outcomes, not batches').
		if !e.srv.AssertNoMutationSentTwice(t, fakeserver.AllowResend(fakeserver.RouteOpenAIBatchCreate, 1)) {
			t.Fatal("a mutation was sent more than once per invocation")
		}
	})
}

// runFiles lists a run directory's file names, sorted, space-separated.
func runFiles(t *testing.T, dir string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return strings.Join(names, " ")
}
