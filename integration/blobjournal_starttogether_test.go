package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

// TestBlobWorkersStartTogether: 30 workers, each with its own Blob client,
// open the same new run in Azurite at the same moment, with and without
// shards: all open it, clear, with one plan, and the run verifies clean
// (R84: exactly one creates it; none fails or sees it half-created).
func TestBlobWorkersStartTogether(t *testing.T) {
	az := startAzurite(t)
	const workers = 30
	plan := workerPlan(40)
	for _, shards := range []int{0, 4, 16} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) {
			cont := "together-" + randomHex(4)
			if _, err := storeClient(t, az.URL, cont).Create(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			opts := []journal.Option{journal.WithPlan(plan)}
			if shards > 0 {
				opts = append(opts, journal.WithParallel(shards))
			}
			stores := make([]journal.Store, workers)
			for i := range stores {
				stores[i] = blobjournal.New(storeClient(t, az.URL, cont), "run/")
			}
			start := make(chan struct{})
			errs := make([]error, workers)
			js := make([]*journal.Journal, workers)
			var wg sync.WaitGroup
			for i := range workers {
				wg.Go(func() {
					<-start
					js[i], errs[i] = journal.OpenStore(context.Background(), stores[i], opts...)
				})
			}
			close(start)
			wg.Wait()
			failed := 0
			for i, err := range errs {
				if err != nil {
					failed++
					t.Logf("worker %d: %v", i+1, err)
				}
			}
			unresolved := 0
			for _, j := range js {
				if j == nil {
					continue
				}
				if st := j.Status(time.Now()); st.State != journal.Clear {
					unresolved++
					t.Logf("not clear: %s: %s", st.State, st.Reason)
				}
				if got := j.Parallel(); got != shards {
					t.Errorf("Parallel() = %d, want %d", got, shards)
				}
			}
			t.Logf("%d of %d opens failed, %d opened unresolved", failed, workers, unresolved)
			if failed != 0 || unresolved != 0 {
				t.Fatalf("%d of %d opens failed, %d opened unresolved; want 0 and 0", failed, workers, unresolved)
			}
			sum, err := journal.InspectStore(context.Background(), blobjournal.New(storeClient(t, az.URL, cont), "run/"))
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.Findings) != 0 || sum.PlannedFiles != len(plan) {
				t.Fatalf("after the opens: findings %v, %d planned files; want none and %d", sum.Findings, sum.PlannedFiles, len(plan))
			}
		})
	}
}
