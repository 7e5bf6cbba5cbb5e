package integration

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

// The stop is visible (issue 28): an azblob upload whose journal waits
// for another worker's request in flight (a run on Blob Storage, the
// other worker's marker present) until the sequence's total runs out
// fails with an error that matches readrecovery.ErrSequenceStopped, reason
// total-exhausted — not the bare context.Canceled azcore's retry policy
// puts in place of its transport's error once the context has ended — and
// still matches context.Canceled; the report records the stop and
// nothing reached the service.
func TestJournalWaitStopThroughAzblob(t *testing.T) {
	az := startAzurite(t)
	r := newRig(t, az)
	st := blobjournal.New(storeClient(t, az.URL, r.container), "journal/")
	plan := workerPlan(2)
	other, err := journal.OpenStore(context.Background(), st, journal.WithPlan(plan), journal.WithPendingWait(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// The other worker's request of f-000 in flight: its marker stays.
	held := journal.WithUpload(context.Background(), plan[0].ID)
	if err := other.Begin(held, readrecovery.JournalRequest{Method: http.MethodPut, URLDigest: journal.PlannedFile{ID: "url"}.Digest(), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenStore(context.Background(), st, journal.WithPlan(plan), journal.WithPendingWait(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const total = 700 * time.Millisecond
	c := r.client(rrOptions(nil, nil))
	b := readrecovery.NewBudget("upload f-001", readrecovery.MaxTotal(total))
	ctx := journal.WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), plan[1].ID)
	start := time.Now()
	_, err = c.UploadBuffer(ctx, r.container, "f-001", []byte("content of f-001"), nil)
	took := time.Since(start)

	var se *readrecovery.StopError
	if !errors.Is(err, readrecovery.ErrSequenceStopped) || !errors.As(err, &se) || se.Reason != readrecovery.StopTotalExhausted {
		t.Fatalf("err = %v (%T), want a total-exhausted stop", err, err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v: the context's own error is kept too", err)
	}
	if rep := b.Report(); rep.Stop != readrecovery.StopTotalExhausted || rep.Requests != 0 {
		t.Errorf("report: stop %q, %d requests; want total-exhausted, 0", rep.Stop, rep.Requests)
	}
	if took < total || took > total+5*time.Second {
		t.Errorf("took %v, the total is %v", took, total)
	}
	for _, q := range r.ledger() {
		t.Errorf("the service saw %s %s", q.Method, q.Path)
	}
}
