package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

// dead-claim-heals (R110) on Blob Storage: a blobworker process of a
// WithParallel(4) run is SIGKILLed right after Next handed it a file,
// before any upload. Until its lease expires the claim is a live CLAIM
// (the run clear, the file in flight, never handed out twice); then, with
// no operator command, the killed worker's file is handed out again by
// the Next that waited on its shard, within one lease of the kill; every
// file is then uploaded once, and the run holds one receipt per file, no
// review, no finding.
func TestBlobJournalKilledClaimHeals(t *testing.T) {
	t.Parallel()
	az := startAzurite(t)
	r := newRig(t, az)
	bin := buildWorker(t)
	const files = 8
	plan := workerPlan(files)
	st := blobjournal.New(storeClient(t, az.URL, r.container), "claim/journal/")
	if _, err := journal.OpenStore(context.Background(), st, journal.WithPlan(plan), journal.WithParallel(4)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "-store", az.URL, "-proxy", r.proxyURL, "-container", r.container, "-files", "8",
		"-worker", "1", "-parallel", "4", "-prefix", "claim/journal/", "-data", "claim/data/", "-next-kill")
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	err := cmd.Run()
	killed := time.Now()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		t.Fatalf("the worker was not killed: %v\n%s", err, out.String())
	}
	var claimed string
	dec := json.NewDecoder(&out)
	for dec.More() {
		var l struct{ File, Outcome string }
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		if l.Outcome == "claimed" {
			claimed = l.File
		}
	}
	if claimed == "" {
		t.Fatalf("no file claimed: %s", out.String())
	}

	j, err := journal.OpenStore(context.Background(), st, journal.WithPlan(plan), journal.WithParallel(4))
	if err != nil {
		t.Fatal(err)
	}
	k := j.Shard(claimed)
	if s := j.Status(time.Now()); s.State != journal.Clear || s.Shards[k-1].Method != "CLAIM" || s.Shards[k-1].Marker != "live" {
		t.Errorf("within the lease: %s %q, shard %+v; want clear, a live CLAIM", s.State, s.Reason, s.Shards[k-1])
	}
	// Each Next holds its claim: the other shards' first files come at
	// once, the killed worker's shard's once its lease has expired.
	ctx, cancel := context.WithTimeout(context.Background(), leaseBound)
	defer cancel()
	var handed []journal.PlannedFile
	took := time.Duration(0)
	for took == 0 {
		f, err := j.Next(ctx, journal.NewApproval)
		if err != nil {
			t.Fatalf("the killed worker's file %s was not handed out again %v after the kill: %v (handed: %v)", claimed, time.Since(killed), err, handed)
		}
		handed = append(handed, f)
		if f.ID == claimed {
			took = time.Since(killed)
		}
	}
	t.Logf("the killed worker's claim of %s handed out again %v after the kill (one lease: 15 s)", claimed, took.Round(100*time.Millisecond))
	for _, f := range handed {
		if err := j.Release(f); err != nil {
			t.Fatal(err)
		}
	}

	run := exec.Command(bin, "-store", az.URL, "-proxy", r.proxyURL, "-container", r.container, "-files", "8",
		"-worker", "2", "-parallel", "4", "-prefix", "claim/journal/", "-data", "claim/data/")
	run.Stderr = os.Stderr
	if b, err := run.Output(); err != nil {
		t.Fatalf("the next worker: %v\n%s", err, b)
	}
	sent := map[string]int{}
	for _, q := range dataPuts(r, "claim/data/") {
		sent[q.Path]++
	}
	if len(sent) != files {
		t.Errorf("%d files uploaded, want %d: %v", len(sent), files, sent)
	}
	for p, n := range sent {
		if n != 1 {
			t.Errorf("%s uploaded %d times", p, n)
		}
	}
	sum, err := journal.InspectStore(context.Background(), st)
	if err != nil || len(sum.Findings) != 0 || sum.Receipts != files || sum.Reviews != 0 {
		t.Errorf("the run: %+v, %v; want %d receipts, no review, no finding", sum, err, files)
	}
}
