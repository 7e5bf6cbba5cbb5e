package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/fakeserver"
	"github.com/readrecovery/readrecovery/journal"
)

// killTrials is how many times TestBlobJournalKill kills a worker.
const killTrials = 50

// leaseBound is how long after its worker's death a marker may still be
// live on Blob Storage (R83): one lease (blobjournal's 15 s, expired by
// Azurite's clock), plus 3 s for the service's whole-second expiry and
// the polling.
const leaseBound = 18 * time.Second

// deadMarker polls the store until the marker's lease is gone (Live
// false), from killed; it returns how long that took, or fails once
// leaseBound is over.
func deadMarker(t *testing.T, trial int, st *blobjournal.Store, killed time.Time) (time.Duration, bool) {
	t.Helper()
	for {
		live, _, err := st.Live(context.Background(), "pending-request.json")
		if err != nil {
			t.Errorf("trial %d: Live: %v", trial, err)
			return 0, false
		}
		if !live {
			return time.Since(killed), true
		}
		if time.Since(killed) > leaseBound {
			t.Errorf("trial %d: the marker is still live %v after its worker's death (R83: within one lease)", trial, time.Since(killed))
			return 0, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shared-runs, crash-never-loses-restriction: a worker is SIGKILLed at a random moment while it uploads
// files that all meet 429 (Retry-After: 0, so each one writes an entry and
// the worker goes on): it is killed while it holds the marker, writes an
// entry, or reads the run. Afterwards every 429 the proxy sent is either
// an entry in the container or the marker remains (the run is
// unresolved): a fresh worker never finds the run clear after a 429.
// A remaining marker is dead within one lease of the kill (R83); the
// pending reviews of the trials run once it is, all trials' leases
// expiring together.
func TestBlobJournalKill(t *testing.T) {
	// Parallel: most of this test is a wait, which the other parallel
	// tests of the package use.
	t.Parallel()
	az := startAzurite(t)
	r := newRig(t, az)
	bin := buildWorker(t)
	r.script.Add(fakeserver.RouteBlobPut, fakeserver.Throttle(fakeserver.RetryAfterSeconds(0)), fakeserver.Always(),
		fakeserver.MatchPath(r.blobPath("kill/")))
	rng := rand.New(rand.NewPCG(42, 12))
	var withMarker, without429, reviewed int
	type pendingTrial struct {
		trial  int
		j      *journal.Journal
		st     *blobjournal.Store
		killed time.Time
		wg     sync.WaitGroup
		took   time.Duration
		dead   bool
	}
	var pendings []*pendingTrial
	for trial := range killTrials {
		prefix := fmt.Sprintf("kill/%02d/", trial)
		st := blobjournal.New(storeClient(t, az.URL, r.container), prefix+"journal/")
		if _, err := journal.OpenStore(context.Background(), st, journal.WithPlan(workerPlan(50))); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-store", az.URL, "-proxy", r.proxyURL, "-container", r.container,
			"-files", "50", "-worker", "1", "-prefix", prefix+"journal/", "-data", prefix+"data/")
		cmd.Stdout, cmd.Stderr = nil, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(60+rng.IntN(340)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		killed := time.Now()

		n429 := 0
		for _, q := range dataPuts(r, prefix+"data/") {
			if q.Status == 429 {
				n429++
			}
		}
		sum, err := journal.InspectStore(context.Background(), st)
		if err != nil {
			t.Fatal(err)
		}
		pending := false
		for _, f := range sum.Findings {
			if f.File == "pending-request.json" {
				pending = true
			} else {
				t.Errorf("trial %d: finding %s", trial, f)
			}
		}
		fresh, err := journal.OpenStore(context.Background(), st, journal.Existing())
		if err != nil {
			t.Fatal(err)
		}
		state := fresh.Status(time.Now()).State
		if pending {
			withMarker++
		}
		if n429 == 0 {
			without429++
		}
		switch {
		case n429 > 0 && state == journal.Clear:
			t.Errorf("trial %d: %d 429s sent, the run is clear", trial, n429)
		case sum.Entries == n429:
		case sum.Entries == n429-1 && pending:
		default:
			t.Errorf("trial %d: %d 429s sent, %d entries, marker %v", trial, n429, sum.Entries, pending)
		}
		if pending != (state == journal.Unresolved) {
			t.Errorf("trial %d: marker %v, state %s", trial, pending, state)
		}
		sent := map[string]int{}
		for _, q := range dataPuts(r, prefix+"data/") {
			if sent[q.Path]++; sent[q.Path] > 1 {
				t.Errorf("trial %d: %s sent twice", trial, q.Path)
			}
		}
		if pending {
			// Watched from the kill on, while the next trials run.
			p := &pendingTrial{trial: trial, j: fresh, st: st, killed: killed}
			p.wg.Go(func() { p.took, p.dead = deadMarker(t, trial, st, killed) })
			pendings = append(pendings, p)
		}
	}
	var slowest time.Duration
	for _, p := range pendings {
		p.wg.Wait()
		if !p.dead {
			continue
		}
		slowest = max(slowest, p.took)
		reviewed += checkPendingReview(t, p.trial, p.j, p.st)
	}
	t.Logf("%d dead markers, each dead within %v of its worker's kill", len(pendings), slowest.Round(100*time.Millisecond))
	t.Logf("%d trials: %d pending reviews brought the run back to waiting, then elapsed, with the dead worker's file unknown", killTrials, reviewed)
	if withMarker == 0 || withMarker == killTrials {
		t.Errorf("%d of %d kills left the marker: the moments do not cover both sides", withMarker, killTrials)
	}
	t.Logf("%d trials: %d killed while the marker was held, %d before the first 429", killTrials, withMarker, without429)
}

// checkPendingReview is the way out of a killed worker's marker on a
// Blob-backed run (pending-review): the review is written, the marker
// removed, the run waiting until the review time + 30 s and elapsed then,
// the marker's file unknown, and the run verifies clean. It returns 1 when
// all of that held.
func checkPendingReview(t *testing.T, trial int, j *journal.Journal, st *blobjournal.Store) int {
	t.Helper()
	rec, err := j.ReviewPending(context.Background(), fmt.Sprintf("trial %d: worker killed", trial), 0)
	if err != nil || !rec.Removed {
		t.Errorf("trial %d: ReviewPending = %+v, %v", trial, rec, err)
		return 0
	}
	nb := time.Unix(rec.NotBeforeUTC, 0)
	if s := j.Status(time.Now()); s.State != journal.Waiting || s.NotBeforeUTC != rec.NotBeforeUTC || rec.NotBeforeUTC < rec.ReviewedAtUTC+30 {
		t.Errorf("trial %d: after the review: %+v (review %+v)", trial, s, rec)
		return 0
	}
	if s := j.Status(nb); s.State != journal.Elapsed {
		t.Errorf("trial %d: at not_before_utc: %+v", trial, s)
		return 0
	}
	if rec.MarkerFileDigest != "" {
		c, err := j.PlanContinuation(workerPlan(50), journal.NewApproval, nb)
		if err != nil {
			t.Errorf("trial %d: %v", trial, err)
			return 0
		}
		for _, f := range c.Files {
			if f.Digest == rec.MarkerFileDigest && f.State != journal.FileUnknown {
				t.Errorf("trial %d: the dead worker's file is %s, want unknown", trial, f.State)
				return 0
			}
		}
	}
	sum, err := journal.InspectStore(context.Background(), st)
	if err != nil || len(sum.Findings) != 0 {
		t.Errorf("trial %d: after the review: %+v, %v", trial, sum, err)
		return 0
	}
	return 1
}
