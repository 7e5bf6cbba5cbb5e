package journal

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/readrecovery/readrecovery/journal/internal/record"
)

// headRacer is a Store whose reads of a run head first let another
// worker finish a whole journaled upload (hook), as a faster worker does
// between a slower one's listing and its read of the head it listed: the
// head read is gone, replaced by a newer one.
type headRacer struct {
	*memStore
	mu    sync.Mutex
	fires int
	hook  func()
	busy  bool
}

func (h *headRacer) Read(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	h.mu.Lock()
	// Only while no request is in flight: under a claim no other worker
	// writes.
	fire := h.hook != nil && h.fires > 0 && !h.busy && strings.HasPrefix(name, "head-") && !h.has(record.MarkerName)
	if fire {
		h.fires--
		h.busy = true
	}
	h.mu.Unlock()
	if fire {
		h.hook()
		h.mu.Lock()
		h.busy = false
		h.mu.Unlock()
	}
	return h.memStore.Read(ctx, name, limit)
}

// shared-runs, deletion-detected: a head replaced by another worker's
// write between this worker's listing and its read of that head is no
// finding, however often it happens: the newer head is there. Worker B
// uploads a file every time worker A, with no request in flight, reads a
// head it listed (up to five times: more than the scan's re-listings,
// which is what the old code relied on, so that it refused A's Begin as
// unresolved); A's Begin is admitted, and the run verifies clean with
// every receipt. A head gone with no newer one is still a deletion
// (TestDeletionTable).
func TestReplacedHeadIsNoFinding(t *testing.T) {
	plan := manyFiles(10)
	st := &headRacer{memStore: newMemStore()}
	ctx := context.Background()
	a, err := OpenStore(ctx, st, WithPlan(plan))
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenStore(ctx, st, WithPlan(plan))
	if err != nil {
		t.Fatal(err)
	}
	upload := func(j *Journal, id string) error {
		uctx := WithUpload(ctx, id)
		if err := j.Begin(uctx, putReq(t)); err != nil {
			return err
		}
		return j.Complete(uctx, putReq(t), ok201("r"))
	}
	if err := upload(b, plan[0].ID); err != nil {
		t.Fatal(err)
	}
	next := 1
	var hookErr error
	st.mu.Lock()
	st.fires = 5
	st.hook = func() {
		if err := upload(b, plan[next].ID); err != nil && hookErr == nil {
			hookErr = err
		}
		next++
	}
	st.mu.Unlock()
	if err := upload(a, plan[9].ID); err != nil {
		t.Fatalf("worker A's upload: %v (B uploaded %d files meanwhile)", err, next-1)
	}
	if hookErr != nil {
		t.Fatalf("worker B: %v", hookErr)
	}
	if next < 2 {
		t.Fatalf("worker B uploaded %d files while A read heads, want at least 1", next-1)
	}
	st.mu.Lock()
	st.hook = nil
	st.mu.Unlock()
	sum, err := InspectStore(ctx, st)
	if err != nil || sum.Receipts != next+1 || len(sum.Findings) != 0 {
		t.Errorf("InspectStore = %+v, %v; want %d receipts and no finding", sum, err, next+1)
	}
}
