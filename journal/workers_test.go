package journal_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal"
)

// Environment of a worker process: the test binary runs itself as one
// worker of a run shared by several processes (TestWorkerProcess).
const (
	envWorkerDir   = "RR_JOURNAL_WORKER_DIR"
	envWorkerURL   = "RR_JOURNAL_WORKER_URL"
	envWorkerFiles = "RR_JOURNAL_WORKER_FILES"
	envWorkerID    = "RR_JOURNAL_WORKER_ID"
)

// workerPlan is the plan of n files w-000 … of the multi-process tests.
func workerPlan(n int) []journal.PlannedFile {
	p := make([]journal.PlannedFile, n)
	for i := range p {
		p[i] = journal.PlannedFile{ID: fmt.Sprintf("w-%03d", i)}
	}
	return p
}

// workerResult is one line a worker prints: the outcome of one file.
type workerResult struct {
	File    string `json:"file"`
	Outcome string `json:"outcome"` // acked, replay-refused, restricted, error
	Detail  string `json:"detail,omitempty"`
}

// TestWorkerProcess is not a test of its own: run by the multi-process
// tests with envWorkerDir set, it is one worker process. It opens the
// shared run directory with the plan, then takes every planned file in plan
// order, as a new user's worker would: one sequence per file, uploaded
// through readrecovery to the parent's server, a file another worker holds
// or has sent being refused as replay-refused. It prints one JSON line per
// file.
func TestWorkerProcess(t *testing.T) {
	dir := os.Getenv(envWorkerDir)
	if dir == "" {
		t.Skip("a helper process of the multi-process tests")
	}
	n, err := strconv.Atoi(os.Getenv(envWorkerFiles))
	if err != nil {
		t.Fatal(err)
	}
	plan := workerPlan(n)
	j, err := journal.Open(dir, journal.WithPlan(plan), journal.WithPendingWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rt := readrecovery.New(http.DefaultTransport)
	out := json.NewEncoder(os.Stdout)
	base := os.Getenv(envWorkerURL)
	for _, f := range plan {
		b := readrecovery.NewBudget("w" + os.Getenv(envWorkerID) + "-" + f.ID)
		ctx := journal.WithUpload(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), j), f.ID)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/files/"+f.ID, bytes.NewReader([]byte("content of "+f.ID)))
		if err != nil {
			t.Fatal(err)
		}
		r := workerResult{File: f.ID}
		resp, err := rt.RoundTrip(req)
		var se *readrecovery.StopError
		switch {
		case err == nil:
			resp.Body.Close()
			r.Outcome = "acked"
			if resp.StatusCode != http.StatusCreated {
				r.Outcome, r.Detail = "error", resp.Status
			}
		case errors.As(err, &se) && se.Reason == readrecovery.StopReplayRefused:
			r.Outcome = "replay-refused"
		case errors.As(err, &se) && se.Reason == readrecovery.StopJournalRestricted:
			r.Outcome, r.Detail = "restricted", err.Error()
		default:
			r.Outcome, r.Detail = "error", err.Error()
		}
		if err := out.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
}

// fileServer counts the PUTs of each path and answers 201.
type fileServer struct {
	mu   sync.Mutex
	puts map[string]int
}

func (s *fileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	if r.Method == http.MethodPut {
		s.puts[r.URL.Path]++
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

// runWorkers starts n worker processes on the run in dir and returns each
// one's lines.
func runWorkers(t *testing.T, dir, url string, files, n int) [][]workerResult {
	t.Helper()
	outs := make([][]workerResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1", "-test.v=false")
			cmd.Env = append(os.Environ(), envWorkerDir+"="+dir, envWorkerURL+"="+url,
				envWorkerFiles+"="+strconv.Itoa(files), envWorkerID+"="+strconv.Itoa(i+1))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("worker %d: %v\n%s\n%s", i+1, err, stdout, stderr.String())
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(stdout))
			for sc.Scan() {
				var r workerResult
				if json.Unmarshal(sc.Bytes(), &r) != nil {
					continue // the test binary's own PASS line
				}
				outs[i] = append(outs[i], r)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return outs
}

// shared-runs (issue 23): four worker processes on one local run directory,
// 48 planned files, each worker taking every file in plan order. Another
// worker's temporary file, met by a scan between its creation and its
// removal, is never a finding: every file is sent exactly once, no worker
// stops journal-restricted, and the run verifies clean with 48 receipts.
func TestFourProcessesOneDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	const files, workers = 48, 4
	srv := &fileServer{puts: map[string]int{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := journal.Open(dir, journal.WithPlan(workerPlan(files))); err != nil {
		t.Fatal(err)
	}
	outs := runWorkers(t, dir, ts.URL, files, workers)

	hist := map[string]int{}
	for i, lines := range outs {
		if len(lines) != files {
			t.Errorf("worker %d printed %d lines, want %d", i+1, len(lines), files)
		}
		for _, r := range lines {
			hist[r.Outcome]++
			if r.Outcome == "restricted" || r.Outcome == "error" {
				t.Errorf("worker %d, %s: %s: %s", i+1, r.File, r.Outcome, r.Detail)
			}
		}
	}
	srv.mu.Lock()
	sent, twice := len(srv.puts), 0
	for p, n := range srv.puts {
		if n != 1 {
			twice++
			t.Errorf("%s sent %d times, want once", p, n)
		}
	}
	srv.mu.Unlock()
	t.Logf("files sent: %d of %d (sent more than once: %d); outcomes %v", sent, files, twice, hist)
	if sent != files {
		t.Errorf("%d of %d files sent", sent, files)
	}
	if hist["acked"] != files || hist["replay-refused"] != files*(workers-1) {
		t.Errorf("outcomes %v, want %d acked and %d replay-refused", hist, files, files*(workers-1))
	}
	sum, err := journal.InspectStore(context.Background(), journal.DirStore(dir))
	if err != nil || sum.Receipts != files || len(sum.Findings) != 0 {
		t.Errorf("Inspect = %+v, %v; want %d receipts and no finding", sum, err, files)
	}
}
