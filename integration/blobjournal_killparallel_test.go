package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// parallelKillTrials is how many times TestBlobJournalParallelKill kills
// a worker; parallelKillConcurrency trials run at once, each on its own
// run.
const (
	parallelKillTrials      = 50
	parallelKillConcurrency = 10
	parallelKillFiles       = 12
)

// shared-runs, parallel, crash-never-loses-restriction, pending-review: two
// worker processes share a parallel run (journal.WithParallel(2)) of 12
// files that all meet 429 (Retry-After: 0: each one writes an entry and
// the worker goes on); worker 1 is SIGKILLed at a random moment of its
// uploads (up to 300 ms after its first attempt began), worker 2
// goes on (with a 1 s pending wait) until it is done or finds the dead
// worker's marker dead (R83: its lease expired by Azurite's clock), never
// stopped by a marker whose worker was alive. Afterwards no file was sent
// twice; every 429 the proxy sent is an entry in the run or the dead
// worker's marker remains; a remaining marker makes the run unresolved
// within one lease (15 s) of the kill, and the run is never clear after a
// 429; and the review of
// that marker (rrjournal review RUN --pending --marker
// shard-NN/pending-request.json, in odd trials Journal.ReviewPendingMarker)
// brings the run back to waiting until the
// review time + 30 s, then elapsed, with the dead worker's file unknown
// and the run verifying clean.
func TestBlobJournalParallelKill(t *testing.T) {
	t.Parallel()
	az := startAzurite(t)
	r := newRig(t, az)
	bin := buildWorker(t)
	rrj := buildRRJournal(t)
	cs := "DefaultEndpointsProtocol=http;AccountName=" + azuriteAccount + ";AccountKey=" + azuriteKey + ";BlobEndpoint=" + az.URL + "/" + azuriteAccount + ";"
	r.script.Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(0)), fakeserver.Always(),
		fakeserver.MatchPath(r.blobPath("kpar/")))

	var mu sync.Mutex
	var withMarker, survivorStopped, stoppedLive, reviewed, lostEntry, sent int
	var deadAfter time.Duration
	trials := make(chan int)
	var wg sync.WaitGroup
	for range parallelKillConcurrency {
		wg.Go(func() {
			for trial := range trials {
				res := parallelKillTrial(t, trial, az, r, bin, rrj, cs)
				mu.Lock()
				if res.marker {
					withMarker++
				}
				if res.survivorStopped {
					survivorStopped++
					if !res.marker {
						// It stopped for a marker that its worker then
						// removed: a live marker judged dead (R83 forbids).
						stoppedLive++
					}
				}
				deadAfter = max(deadAfter, res.deadAfter)
				if res.reviewed {
					reviewed++
				}
				if res.lostEntry {
					lostEntry++
				}
				sent += res.sent
				mu.Unlock()
			}
		})
	}
	for trial := range parallelKillTrials {
		trials <- trial
	}
	close(trials)
	wg.Wait()
	t.Logf("%d trials, %d uploads (each met 429, none sent twice): %d killed while the dead worker's marker was held (%d of them between a 429 and its entry; each reviewed: %d brought back to waiting, then elapsed, with the dead worker's file unknown); worker 2 stopped as unresolved in %d (%d of them by a marker its live worker then removed); a dead marker was seen dead at most %v after the kill",
		parallelKillTrials, sent, withMarker, lostEntry, reviewed, survivorStopped, stoppedLive, deadAfter.Round(100*time.Millisecond))
	if stoppedLive != 0 {
		t.Errorf("worker 2 stopped %d times for a live worker's marker (R83: a live marker is never judged dead)", stoppedLive)
	}
	if withMarker == 0 || withMarker == parallelKillTrials {
		t.Errorf("%d of %d kills left the marker: the moments do not cover both sides", withMarker, parallelKillTrials)
	}
	if reviewed != withMarker {
		t.Errorf("%d of %d markers reviewed as expected", reviewed, withMarker)
	}
}

type killResult struct {
	marker, survivorStopped, reviewed bool
	lostEntry                         bool // killed between a 429 and its entry: the marker stands for it
	sent                              int  // uploads (all 429) of the trial
	// deadAfter is how long after the kill the marker was first seen
	// dead (the run unresolved): within one lease (R83).
	deadAfter time.Duration
}

func parallelKillTrial(t *testing.T, trial int, az *azurite, r *rig, bin, rrj, cs string) killResult {
	var res killResult
	rng := rand.New(rand.NewPCG(43, uint64(trial)))
	prefix := fmt.Sprintf("kpar/%02d/", trial)
	st := blobjournal.New(storeClient(t, az.URL, r.container), prefix+"journal/")
	plan := workerPlan(parallelKillFiles)
	if _, err := journal.OpenStore(context.Background(), st, journal.WithParallel(2), journal.WithPlan(plan)); err != nil {
		t.Errorf("trial %d: %v", trial, err)
		return res
	}
	dir := t.TempDir()
	args := func(id int) []string {
		return []string{"-store", az.URL, "-proxy", r.proxyURL, "-container", r.container,
			"-files", fmt.Sprint(parallelKillFiles), "-worker", fmt.Sprint(id), "-seed", fmt.Sprint(trial),
			"-prefix", prefix + "journal/", "-data", prefix + "data/", "-parallel", "2", "-pending-wait", "1s",
			"-max-run", "60s", "-store-log", filepath.Join(dir, fmt.Sprintf("worker-%d.jsonl", id))}
	}
	victim := exec.Command(bin, args(1)...)
	victim.Stderr = os.Stderr
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	survivor := exec.Command(bin, args(2)...)
	var out bytes.Buffer
	survivor.Stdout = &out
	survivor.Stderr = os.Stderr
	if err := survivor.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed at a random moment of its uploads: up to 300 ms after its
	// first upload attempt began (a process start takes longer than that
	// on a loaded machine, and a kill before the first claim proves little).
	victimLog := filepath.Join(dir, "worker-1.jsonl")
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(victimLog); bytes.Contains(b, []byte(`"event":"attempt"`)) {
			break
		}
	}
	time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	_ = victim.Process.Signal(syscall.SIGKILL)
	_ = victim.Wait()
	killed := time.Now()
	survErr := survivor.Wait()
	code := survivor.ProcessState.ExitCode()
	var last workerLine
	for _, ln := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		last = workerLine{}
		_ = json.Unmarshal([]byte(ln), &last)
	}
	switch {
	case code == 0 && last.Outcome == "done":
	case code == 4 && last.Outcome == "stopped" && strings.HasPrefix(last.Detail, "unresolved"):
		res.survivorStopped = true
	default:
		t.Errorf("trial %d: worker 2 exit %d (%v):\n%s", trial, code, survErr, out.String())
	}

	puts := dataPuts(r, prefix+"data/")
	res.sent = len(puts)
	sent := map[string]int{}
	for _, q := range puts {
		if q.Status != 429 {
			t.Errorf("trial %d: upload %s answered %d", trial, q.Path, q.Status)
		}
		if sent[q.Path]++; sent[q.Path] > 1 {
			t.Errorf("trial %d: %s sent twice", trial, q.Path)
		}
	}
	sum, err := journal.InspectStore(context.Background(), st)
	if err != nil {
		t.Errorf("trial %d: %v", trial, err)
		return res
	}
	var markers []string
	for _, f := range sum.Findings {
		if strings.HasSuffix(f.File, "pending-request.json") {
			markers = append(markers, f.File)
		} else {
			t.Errorf("trial %d: finding %s", trial, f)
		}
	}
	res.marker = len(markers) > 0
	switch {
	case len(markers) > 1:
		t.Errorf("trial %d: markers %v remain, want at most the dead worker's", trial, markers)
	case sum.Entries == len(puts):
	case sum.Entries == len(puts)-1 && res.marker:
		res.lostEntry = true
	default:
		t.Errorf("trial %d: %d 429s sent, %d entries, markers %v", trial, len(puts), sum.Entries, markers)
	}

	// As any worker sees the run, until a remaining marker's lease expires
	// (R83: within one lease of the kill, 15 s, by Azurite's clock): never
	// clear after a 429; unresolved then exactly when the dead worker's
	// marker remains.
	fresh, err := journal.OpenStore(context.Background(), st, journal.Existing(), journal.WithPendingWait(time.Second))
	if err != nil {
		t.Errorf("trial %d: %v", trial, err)
		return res
	}
	var state journal.State
	for deadline := killed.Add(leaseBound); ; time.Sleep(100 * time.Millisecond) {
		_ = fresh.Admit(context.Background(), time.Now()) // reads every shard again
		state = fresh.Status(time.Now()).State
		if len(puts) > 0 && state == journal.Clear {
			t.Errorf("trial %d: %d 429s sent, the run is clear", trial, len(puts))
		}
		if !res.marker || state == journal.Unresolved || time.Now().After(deadline) {
			break
		}
	}
	if res.marker && state == journal.Unresolved {
		res.deadAfter = time.Since(killed)
	}
	if res.marker != (state == journal.Unresolved) {
		t.Errorf("trial %d: markers %v, state %s %v after the kill (a dead marker is known within one lease)", trial, markers, state, time.Since(killed))
	}
	if !res.marker {
		return res
	}

	// The dead worker's file: the file of its last attempt.
	deadFile := ""
	for _, e := range readStoreLog(t, victimLog) {
		if e.Event == "attempt" {
			deadFile = e.File
		}
	}
	if trial%2 == 1 {
		rrj = "" // odd trials through Journal.ReviewPendingMarker, even ones through the command
	}
	unknown := len(sent)
	if sent[r.blobPath(prefix+"data/"+deadFile)] == 0 {
		unknown++ // killed under the marker before its upload was sent
	}
	res.reviewed = reviewDeadMarker(t, trial, rrj, cs, r.container+"/"+prefix+"journal", markers[0], st, plan, deadFile, unknown, sum.Entries)
	return res
}

// reviewDeadMarker runs `rrjournal review RUN --pending --marker NAME`
// (or, with rrj "", Journal.ReviewPendingMarker) and checks what follows (pending-review): the run waits until the review
// time + 30 s and is elapsed then, the dead worker's file is unknown, and
// the run verifies clean. It reports whether all of that held.
func reviewDeadMarker(t *testing.T, trial int, rrj, cs, runArg, marker string, st *blobjournal.Store, plan []journal.PlannedFile, deadFile string, unknown, entries int) bool {
	t.Helper()
	before := time.Now().Unix()
	note := fmt.Sprintf("trial %d: worker 1 killed", trial)
	if rrj != "" {
		cmd := exec.Command(rrj, "review", runArg, "--pending", "--marker", marker, "--note", note)
		cmd.Env = append(os.Environ(), "AZURE_STORAGE_CONNECTION_STRING="+cs)
		code, out, errb := runProcess(t, cmd)
		if code != 3 {
			t.Errorf("trial %d: review --pending --marker %s: exit %d, %q %q; want 3 (the run waits)", trial, marker, code, out, errb)
			return false
		}
		// The operator's view of the parallel root afterwards.
		for _, c := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"status", runArg}, 3, `{"file_batch":{"backoff":{"state":"waiting"`},
			{[]string{"verify", runArg}, 0, fmt.Sprintf("ok: %d planned files, %d backoff entries, 0 receipts, 0 part receipts, 1 reviews\n", len(plan), entries)},
			{[]string{"plan", "--json", runArg}, 3, fmt.Sprintf(`"counts":{"acked":0,"never-attempted":%d,"reviewed":0,"unknown":%d}`, len(plan)-unknown, unknown)},
		} {
			cmd := exec.Command(rrj, c.args...)
			cmd.Env = append(os.Environ(), "AZURE_STORAGE_CONNECTION_STRING="+cs)
			code, out, errb := runProcess(t, cmd)
			if code != c.code || !strings.Contains(out.String(), c.want) {
				t.Errorf("trial %d: rrjournal %s: exit %d, %q %q; want exit %d and %q", trial, c.args[0], code, out, errb, c.code, c.want)
				return false
			}
		}
	}
	j, err := journal.OpenStore(context.Background(), st, journal.Existing())
	if err != nil {
		t.Errorf("trial %d: %v", trial, err)
		return false
	}
	if rrj == "" {
		rec, err := j.ReviewPendingMarker(context.Background(), marker, note, 0)
		if err != nil || !rec.Removed || rec.MarkerFileDigest != (journal.PlannedFile{ID: deadFile}).Digest() {
			t.Errorf("trial %d: ReviewPendingMarker(%s) = %+v, %v; want the marker of %s removed", trial, marker, rec, err, deadFile)
			return false
		}
	}
	s := j.Status(time.Now())
	if s.State != journal.Waiting || s.NotBeforeUTC < before+30 {
		t.Errorf("trial %d: after the review: %+v, want waiting until at least %d", trial, s, before+30)
		return false
	}
	nb := time.Unix(s.NotBeforeUTC, 0)
	if s := j.Status(nb); s.State != journal.Elapsed {
		t.Errorf("trial %d: at not_before_utc: %+v", trial, s)
		return false
	}
	c, err := j.PlanContinuation(plan, journal.NewApproval, nb)
	if err != nil {
		t.Errorf("trial %d: %v", trial, err)
		return false
	}
	found := false
	for _, f := range c.Files {
		if f.Digest == (journal.PlannedFile{ID: deadFile}).Digest() {
			found = true
			if f.State != journal.FileUnknown {
				t.Errorf("trial %d: the dead worker's file %s is %s, want unknown", trial, deadFile, f.State)
				return false
			}
		}
	}
	if !found {
		t.Errorf("trial %d: the dead worker's file %q is not in the plan", trial, deadFile)
		return false
	}
	sum, err := journal.InspectStore(context.Background(), st)
	if err != nil || len(sum.Findings) != 0 {
		t.Errorf("trial %d: after the review: %+v, %v", trial, sum, err)
		return false
	}
	return true
}

// buildRRJournal builds the rrjournal command once per test binary.
var (
	rrjOnce sync.Once
	rrjBin  string
	rrjErr  error
)

func buildRRJournal(t *testing.T) string {
	t.Helper()
	rrjOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rrjournal")
		if err != nil {
			rrjErr = err
			return
		}
		rrjBin = filepath.Join(dir, "rrjournal")
		if out, err := exec.Command("go", "build", "-o", rrjBin, "github.com/readrecovery/readrecovery/azure/cmd/rrjournal").CombinedOutput(); err != nil {
			rrjErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if rrjErr != nil {
		t.Fatal(rrjErr)
	}
	return rrjBin
}
