package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

// uploadLatency is the upload latency the proxy adds to every data PUT
// before forwarding it to Azurite: a realistic round trip to a remote
// store, where loopback Azurite answers in about a millisecond.
const uploadLatency = 25 * time.Millisecond

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestBlobJournalThroughput runs 1, 2 and 4 blobworker processes over one
// Blob-backed run of 200 files each (a fresh run per worker count), with a
// 25 ms upload latency, and asserts what must hold whatever the speed:
// every file uploaded exactly once (one 2xx PUT per blob, no other PUT),
// every worker done (exit 0). The files per second of each worker count
// are logged, never asserted (a timed assertion on a shared 2-core machine
// proves nothing): they are the throughput table of the journal's
// documentation. A run without journal.WithParallel keeps one journaled
// request in flight across its workers, so more workers add little here.
func TestBlobJournalThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 600 files through Azurite")
	}
	az := startAzurite(t)
	bin := buildWorker(t)
	const files = 200
	data := "data/"
	rates := map[int]float64{}
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("workers-%d", workers), func(t *testing.T) {
			r := newRigDelayed(t, az, data)
			st := blobjournal.New(storeClient(t, az.URL, r.container), "journal/")
			if _, err := journal.OpenStore(context.Background(), st, journal.WithPlan(workerPlan(files))); err != nil {
				t.Fatal(err)
			}
			codes := make([]int, workers)
			outs := make([][]workerLine, workers)
			start := time.Now()
			var wg sync.WaitGroup
			for i := range workers {
				wg.Go(func() {
					args := []string{"-store", az.URL, "-proxy", r.proxyURL, "-container", r.container,
						"-files", fmt.Sprint(files), "-worker", fmt.Sprint(i + 1), "-seed", "11", "-pending-wait", "30s"}
					code, out, errb := runProcess(t, exec.Command(bin, args...))
					codes[i] = code
					sc := bufio.NewScanner(out)
					for sc.Scan() {
						var l workerLine
						if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
							t.Errorf("worker %d printed %q", i+1, sc.Text())
							continue
						}
						outs[i] = append(outs[i], l)
					}
					if errb.Len() > 0 {
						t.Logf("worker %d stderr: %s", i+1, errb.String())
					}
				})
			}
			wg.Wait()
			wall := time.Since(start)

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
			for i, code := range codes {
				hist := map[string]int{}
				for _, l := range outs[i] {
					hist[l.Outcome]++
				}
				acked += hist["acked"]
				if code != 0 || len(outs[i]) == 0 || outs[i][len(outs[i])-1].Outcome != "done" {
					t.Errorf("worker %d: exit %d, %v; want exit 0 and done", i+1, code, hist)
				}
				t.Logf("worker %d: %v", i+1, hist)
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
			t.Logf("%d worker(s) x %d files, %v upload latency: %.1f files/s between the first and last upload (%.2f s), %.1f files/s wall (%.2f s with process start)",
				workers, files, uploadLatency, rate, span.Seconds(), float64(files)/wall.Seconds(), wall.Seconds())
		})
	}
	if rates[1] > 0 {
		t.Logf("throughput: 1 worker %.1f files/s; 2 workers %.1f (%.2fx); 4 workers %.1f (%.2fx)",
			rates[1], rates[2], rates[2]/rates[1], rates[4], rates[4]/rates[1])
	}
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
