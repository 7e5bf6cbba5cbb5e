package journal_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal"
)

// markerCounter is the base transport of the in-flight tests: at each send
// it lists the run directory and records the pending markers present, and
// how many sends are in flight through it at once; then it waits delay (a
// slow upload) and forwards to next.
type markerCounter struct {
	dir   string
	delay time.Duration
	next  http.RoundTripper

	mu          sync.Mutex
	inFlight    int
	maxInFlight int
	markerSets  map[string]int // the sorted marker names seen at a send, joined by ","
	listErrs    int
}

func (c *markerCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	ents, err := os.ReadDir(c.dir)
	var markers []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pending-request") && !strings.Contains(e.Name(), ".tmp-") {
			markers = append(markers, e.Name())
		}
	}
	slices.Sort(markers)
	c.mu.Lock()
	if err != nil {
		c.listErrs++
	}
	c.markerSets[strings.Join(markers, ",")]++
	c.inFlight++
	c.maxInFlight = max(c.maxInFlight, c.inFlight)
	c.mu.Unlock()
	time.Sleep(c.delay)
	resp, rerr := c.next.RoundTrip(req)
	c.mu.Lock()
	c.inFlight--
	c.mu.Unlock()
	return resp, rerr
}

// one-marker-per-run: a run created without journal.WithParallel keeps one
// journaled request in flight across all its workers, each under the one
// pending-request.json. Four goroutine workers (four Journals on one run
// directory, WithPendingWait) upload 48 files, each worker taking every
// file in plan order, through a base transport with a 3 ms upload that
// lists the directory at each send: every send saw exactly the marker
// pending-request.json and no other, never two sends at once, every file
// sent exactly once (acked by one worker, replay-refused by the other
// three), and the run verifies clean with 48 receipts.
func TestWithoutParallelOneRequestInFlight(t *testing.T) {
	const files, workers = 48, 4
	srv := &fileServer{puts: map[string]int{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	dir := filepath.Join(t.TempDir(), "run")
	plan := workerPlan(files)
	if _, err := journal.Open(dir, journal.WithPlan(plan)); err != nil {
		t.Fatal(err)
	}
	counter := &markerCounter{dir: dir, delay: 3 * time.Millisecond, next: http.DefaultTransport, markerSets: map[string]int{}}
	rt := readrecovery.New(counter)

	hist := make([]map[string]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		j, err := journal.Open(dir, journal.WithPlan(plan), journal.WithPendingWait(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		hist[w] = map[string]int{}
		wg.Go(func() {
			for _, f := range plan {
				b := readrecovery.NewBudget("g" + string(rune('1'+w)) + "-" + f.ID)
				ctx := journal.WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), f.ID)
				req, err := http.NewRequestWithContext(ctx, http.MethodPut, ts.URL+"/files/"+f.ID, bytes.NewReader([]byte("content of "+f.ID)))
				if err != nil {
					t.Error(err)
					return
				}
				resp, err := rt.RoundTrip(req)
				var se *readrecovery.StopError
				switch {
				case err == nil && resp.StatusCode == http.StatusCreated:
					resp.Body.Close()
					hist[w]["acked"]++
				case err == nil:
					resp.Body.Close()
					hist[w]["status "+resp.Status]++
				case errors.As(err, &se):
					hist[w][string(se.Reason)]++
				default:
					hist[w]["error"]++
					t.Errorf("worker %d, %s: %v", w+1, f.ID, err)
				}
			}
		})
	}
	wg.Wait()

	total := map[string]int{}
	for _, h := range hist {
		for k, n := range h {
			total[k] += n
		}
	}
	if total["acked"] != files || total[string(readrecovery.StopReplayRefused)] != files*(workers-1) || len(total) != 2 {
		t.Errorf("outcomes %v, want %d acked and %d replay-refused only", total, files, files*(workers-1))
	}
	srv.mu.Lock()
	if len(srv.puts) != files {
		t.Errorf("%d distinct files sent, want %d", len(srv.puts), files)
	}
	for p, n := range srv.puts {
		if n != 1 {
			t.Errorf("%s sent %d times, want once", p, n)
		}
	}
	srv.mu.Unlock()
	counter.mu.Lock()
	if counter.listErrs != 0 {
		t.Errorf("%d listings of the run failed", counter.listErrs)
	}
	if want := map[string]int{"pending-request.json": files}; !maps.Equal(counter.markerSets, want) {
		t.Errorf("markers present at the sends: %v, want %v", counter.markerSets, want)
	}
	if counter.maxInFlight != 1 {
		t.Errorf("%d sends in flight at once, want 1", counter.maxInFlight)
	}
	counter.mu.Unlock()
	sum, err := journal.InspectStore(context.Background(), journal.DirStore(dir))
	if err != nil || sum.Receipts != files || len(sum.Findings) != 0 {
		t.Errorf("Inspect = %+v, %v; want %d receipts and no finding", sum, err, files)
	}
}
