package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

// uploadLatency is the upload latency the proxy adds to every data PUT
// before forwarding it to Azurite: a realistic round trip to a remote
// store, where loopback Azurite answers in about a millisecond. 25 ms;
// RR_UPLOAD_LATENCY (a Go duration, e.g. 100ms: a small blob's upload
// over a WAN) sets another for a run by hand, whose figures say so;
// RR_STORE_LATENCY adds a delay to every request of the workers' journal
// store (a remote Blob endpoint, where loopback Azurite answers at once).
var uploadLatency = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("RR_UPLOAD_LATENCY")); err == nil && d >= 0 {
		return d
	}
	return 25 * time.Millisecond
}()

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestBlobJournalThroughput runs 1, 2 and 4 blobworker processes over one
// Blob-backed run of 200 files (a fresh run per worker count), with a
// 25 ms upload latency, on a run created without journal.WithParallel
// and on a parallel run, and asserts what must hold whatever the speed:
// every file uploaded exactly once (one 2xx PUT per blob, no other PUT),
// every worker done (exit 0). Each worker takes its own share of the plan
// first, then what is left (-share). The files per second of each worker
// count are logged, never asserted (a timed assertion on a shared 2-core
// machine proves nothing): they are the throughput table of the journal's
// documentation, with the store traffic per file that explains them. A
// run without the option keeps one journaled request in flight across its
// workers, so more workers add nothing there.
func TestBlobJournalThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 1200 files through Azurite")
	}
	az := startAzurite(t)
	bin := buildWorker(t)
	const files = 200
	data := "data/"
	for _, kind := range throughputRuns {
		rates := map[int]float64{}
		for _, workers := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/workers-%d", kind.name, workers), func(t *testing.T) {
				r := newRigDelayed(t, az, data)
				st := blobjournal.New(storeClient(t, az.URL, r.container), "journal/")
				if _, err := journal.OpenStore(context.Background(), st, append(kind.opts(), journal.WithPlan(workerPlan(files)))...); err != nil {
					t.Fatal(err)
				}
				start, azStart := time.Now(), cpuTime(az.pgid)
				runs := runWorkers(t, bin, t.TempDir(), workers, func(i int) []string {
					a := append([]string{"-store", az.URL, "-proxy", r.proxyURL, "-container", r.container,
						"-files", fmt.Sprint(files), "-seed", "11", "-pending-wait", "30s", "-share", fmt.Sprint(workers)}, kind.args...)
					if d := os.Getenv("RR_STORE_LATENCY"); d != "" {
						// A run by hand: a remote store's round trip on every journal request.
						a = append(a, "-store-latency", d)
					}
					if dir := os.Getenv("RR_WORKER_PROFILES"); dir != "" {
						// A run by hand: each worker's CPU profile, for where the time goes.
						a = append(a, "-cpuprofile", filepath.Join(dir, fmt.Sprintf("%s-workers-%d-w%d.pprof", kind.name, workers, i)))
					}
					return a
				})
				wall, azCPU := time.Since(start), cpuTime(az.pgid)-azStart

				puts := dataPuts(r, data)
				seen := map[string]int{}
				for _, q := range puts {
					seen[q.Path]++
					if q.Status != 201 {
						t.Errorf("PUT %s answered %d, want 201", q.Path, q.Status)
					}
				}
				if len(seen) != files {
					t.Errorf("%d distinct blobs uploaded, want %d", len(seen), files)
				}
				for p, n := range seen {
					if n != 1 {
						t.Errorf("%s sent %d times, want once", p, n)
					}
				}
				acked := 0
				for i, w := range runs {
					acked += w.hist()["acked"]
					if !w.done() {
						t.Errorf("worker %d: exit %d, %v; want exit 0 and done", i+1, w.code, w.hist())
					}
					t.Logf("worker %d: %v", i+1, w.hist())
				}
				if acked != files {
					t.Errorf("the workers acked %d files, want %d", acked, files)
				}
				if len(puts) < 2 {
					t.Fatalf("%d uploads", len(puts))
				}
				span := puts[len(puts)-1].Arrived.Sub(puts[0].Arrived)
				rate := float64(len(puts)-1) / span.Seconds()
				rates[workers] = rate
				t.Logf("%s, %d worker(s) x %d files, %v upload latency, store latency %q: %.1f files/s between the first and last upload (%.2f s), %.1f files/s wall (%.2f s with process start)",
					kind.name, workers, files, uploadLatency, os.Getenv("RR_STORE_LATENCY"), rate, span.Seconds(), float64(files)/wall.Seconds(), wall.Seconds())
				count, spent := storeTraffic(runs)
				var ops []string
				for op, n := range count {
					ops = append(ops, fmt.Sprintf("%s %.2f/file %.1f ms each", op, float64(n)/files, float64(spent[op].Microseconds())/1000/float64(n)))
				}
				sort.Strings(ops)
				var workerCPU time.Duration
				for _, w := range runs {
					workerCPU += w.cpu
				}
				t.Logf("store requests: %s; CPU over the %.2f s: Azurite %.2f s, workers %.2f s (2 cores shared with other sessions)",
					strings.Join(ops, "; "), wall.Seconds(), azCPU.Seconds(), workerCPU.Seconds())
			})
		}
		if rates[1] > 0 {
			t.Logf("throughput, %s: 1 worker %.1f files/s; 2 workers %.1f (%.2fx); 4 workers %.1f (%.2fx)",
				kind.name, rates[1], rates[2], rates[2]/rates[1], rates[4], rates[4]/rates[1])
		}
	}
}

// throughputRuns are the two kinds of run TestBlobJournalThroughput
// measures: the options that create the run and the workers' flags.
var throughputRuns = []struct {
	name string
	opts func() []journal.Option
	args []string
}{
	{name: "without-option", opts: func() []journal.Option { return nil }},
	{name: "parallel-4", opts: func() []journal.Option { return []journal.Option{journal.WithParallel(4)} }, args: []string{"-parallel", "4"}},
}

// newRigDelayed is newRig with slowPuts under the data prefix of its own
// container (the container's name is only known once the rig exists, so
// the delay matches every data/ path of any container of this rig).
func newRigDelayed(t *testing.T, az *azurite, data string) *rig {
	t.Helper()
	return newRig(t, az, withUpstream(func(base http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/"+data) {
				tm := time.NewTimer(uploadLatency)
				select {
				case <-tm.C:
				case <-req.Context().Done():
					tm.Stop()
					return nil, req.Context().Err()
				}
			}
			return base.RoundTrip(req)
		})
	}))
}
