package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// buildWorker builds the blobworker helper once per test binary.
var (
	workerOnce sync.Once
	workerBin  string
	workerErr  error
)

func buildWorker(t *testing.T) string {
	t.Helper()
	workerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "blobworker")
		if err != nil {
			workerErr = err
			return
		}
		workerBin = filepath.Join(dir, "blobworker")
		out, err := exec.Command("go", "build", "-o", workerBin, "./internal/blobworker").CombinedOutput()
		if err != nil {
			workerErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if workerErr != nil {
		t.Fatal(workerErr)
	}
	return workerBin
}

// workerLine is one JSON line of the helper.
type workerLine struct {
	Worker  int    `json:"worker"`
	File    string `json:"file"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail"`
}

// storeClient is a container client for the journal store: straight to
// url with the store's own plain options (never readrecovery, shared-runs).
func storeClient(t testing.TB, url, cont string) *container.Client {
	t.Helper()
	cred, err := azblobSharedKey(azuriteKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(url+"/"+azuriteAccount+"/"+cont, cred, blobjournal.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func workerPlan(n int) []journal.PlannedFile {
	p := make([]journal.PlannedFile, n)
	for i := range p {
		p[i] = journal.PlannedFile{ID: fmt.Sprintf("f-%03d", i)}
	}
	return p
}

// dataPuts returns the ledger's PUTs of uploaded blobs under dataPrefix.
func dataPuts(r *rig, dataPrefix string) []fakeserver.Request {
	var out []fakeserver.Request
	for _, q := range r.ledger() {
		if q.Method == "PUT" && strings.HasPrefix(q.Path, r.blobPath(dataPrefix)) {
			out = append(out, q)
		}
	}
	return out
}

// shared-runs: four worker processes share one Blob-backed run of 200 files
// through the proxy; the proxy answers a short 429 (2 s) on the 20th upload
// and a 60 s one on the 70th. No file is sent twice, nothing after the
// short one before its not-before, nothing after the 60 s one at all, and
// every worker ends stopped by the waiting run; a fresh worker after
// not_before_utc sends only never-attempted files, and only with a new
// approval.
func TestBlobJournalFourWorkers(t *testing.T) {
	// Parallel: most of this test is a wait, which the other parallel
	// tests of the package use.
	t.Parallel()
	if testing.Short() {
		t.Skip("waits out a 60 s restriction")
	}
	az := startAzurite(t)
	r := newRig(t, az)
	bin := buildWorker(t)
	const files = 200
	data := "data/"
	r.script.Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(2)), fakeserver.Nth(20), fakeserver.MatchPath(r.blobPath(data)))
	r.script.Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(60)), fakeserver.Nth(70), fakeserver.MatchPath(r.blobPath(data)))

	// The run is created once, before the workers.
	st := blobjournal.New(storeClient(t, az.URL, r.container), "journal/")
	if _, err := journal.OpenStore(context.Background(), st, journal.WithPlan(workerPlan(files))); err != nil {
		t.Fatal(err)
	}

	run := func(id int, extra ...string) (int, []workerLine) {
		args := append([]string{"-store", az.URL, "-proxy", r.proxyURL, "-container", r.container,
			"-files", fmt.Sprint(files), "-worker", fmt.Sprint(id), "-seed", "7"}, extra...)
		code, out, errb := runProcess(t, exec.Command(bin, args...))
		var lines []workerLine
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l workerLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("worker %d printed %q", id, sc.Text())
			}
			lines = append(lines, l)
		}
		if errb.Len() > 0 {
			t.Logf("worker %d stderr: %s", id, errb.String())
		}
		return code, lines
	}

	codes := make([]int, 4)
	outs := make([][]workerLine, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { codes[i], outs[i] = run(i + 1) })
	}
	wg.Wait()

	puts := dataPuts(r, data)
	seen := map[string]int{}
	var short429, long429 *fakeserver.Request
	for i := range puts {
		seen[puts[i].Path]++
		if puts[i].Status == 429 {
			if short429 == nil {
				short429 = &puts[i]
			} else {
				long429 = &puts[i]
			}
		}
	}
	for p, n := range seen {
		if n != 1 {
			t.Errorf("%s sent %d times, want once", p, n)
		}
	}
	if short429 == nil || long429 == nil {
		t.Fatalf("the proxy answered 429 to %v and %v; want the 20th and the 70th upload (%d uploads)", short429, long429, len(puts))
	}
	if len(puts) != 70 {
		t.Errorf("%d uploads reached the proxy, want 70 (the 70th met the 60 s 429, none after it)", len(puts))
	}
	for _, q := range puts {
		if q.Seq > short429.Seq && q.Arrived.Before(short429.Arrived.Add(2*time.Second-time.Second)) {
			// not_before_utc is in whole seconds from the receipt: allow
			// the rounding of the received second.
			t.Errorf("upload %s arrived %v after the short 429, before its not-before", q.Path, q.Arrived.Sub(short429.Arrived))
		}
		if q.Seq > long429.Seq {
			t.Errorf("upload %s arrived after the 60 s 429", q.Path)
		}
	}
	for i, code := range codes {
		hist := map[string]int{}
		for _, l := range outs[i] {
			hist[l.Outcome+" "+l.Detail]++
		}
		t.Logf("worker %d: exit %d %v", i+1, code, hist)
		last := outs[i][len(outs[i])-1]
		if code != 3 || last.Outcome != "stopped" || !strings.HasPrefix(last.Detail, "waiting") {
			t.Errorf("worker %d ended with exit %d and %+v, want 3 and stopped waiting", i+1, code, last)
		}
	}

	// The run at the end, as any worker sees it.
	j, err := journal.OpenStore(context.Background(), st, journal.Existing())
	if err != nil {
		t.Fatal(err)
	}
	stt := j.Status(time.Now())
	if stt.State != journal.Waiting || stt.ServerDelaySeconds != 60 {
		t.Fatalf("status %+v, want waiting for 60 s", stt)
	}
	sum, err := journal.InspectStore(context.Background(), st)
	if err != nil || sum.Entries != 2 || sum.Receipts != 68 || len(sum.Findings) != 0 {
		t.Fatalf("InspectStore = %+v, %v; want 2 entries, 68 receipts, no finding", sum, err)
	}

	// After not_before_utc: without a new approval nothing is sent; with
	// one, only the 130 never-attempted files, each once.
	time.Sleep(time.Until(time.Unix(stt.NotBeforeUTC, 0)) + 100*time.Millisecond)
	code, lines := run(5, "-approve=false")
	if code != 0 || lines[0].Detail != fmt.Sprintf("0 eligible of %d (elapsed)", files) || len(dataPuts(r, data)) != 70 {
		t.Fatalf("worker without approval: exit %d, %+v, %d uploads", code, lines[0], len(dataPuts(r, data)))
	}
	code, lines = run(6)
	if code != 0 || lines[0].Detail != fmt.Sprintf("130 eligible of %d (elapsed)", files) {
		t.Fatalf("worker with approval: exit %d, %+v", code, lines[0])
	}
	after := dataPuts(r, data)
	if len(after) != files {
		t.Errorf("%d uploads in all, want %d (each file once)", len(after), files)
	}
	for _, q := range after[len(puts):] {
		if seen[q.Path] != 0 {
			t.Errorf("the continuation sent %s again", q.Path)
		}
		seen[q.Path]++
	}
	t.Logf("ledger: %d uploads, each path once; short 429 at #%d, 60 s 429 at #%d; continuation sent %d", len(after), short429.Ordinal, long429.Ordinal, len(after)-len(puts))
}
