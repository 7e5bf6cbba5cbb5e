package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/azure/blobjournal"
	"github.com/readrecovery/readrecovery/journal"
)

// An operator sees a Blob-backed run from the shell: rrjournal status,
// verify, plan and review with the exit codes of `readrecovery journal`,
// credentials from AZURE_STORAGE_CONNECTION_STRING, never printed.
func TestRRJournalCommand(t *testing.T) {
	az := startAzurite(t)
	r := newRig(t, az)
	bin := filepath.Join(t.TempDir(), "rrjournal")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/readrecovery/readrecovery/azure/cmd/rrjournal").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cs := "DefaultEndpointsProtocol=http;AccountName=" + azuriteAccount + ";AccountKey=" + azuriteKey + ";BlobEndpoint=" + az.URL + "/" + azuriteAccount + ";"
	rrj := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "AZURE_STORAGE_CONNECTION_STRING="+cs)
		code, out, errb := runProcess(t, cmd)
		if strings.Contains(out.String()+errb.String(), azuriteKey) {
			t.Fatal("the account key was printed")
		}
		return code, out.String(), errb.String()
	}

	// A run holding one 60 s restriction and an upload without ACK.
	st := blobjournal.New(storeClient(t, az.URL, r.container), "run/")
	j, err := journal.OpenStore(context.Background(), st, journal.WithPlan(workerPlan(3)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := journal.WithUpload(context.Background(), "f-001")
	put := readrecovery.JournalRequest{Method: "PUT", URLDigest: "sha256:" + strings.Repeat("ab", 32), Attempt: 1}
	if err := j.Begin(ctx, put); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := j.Backoff(ctx, put, readrecovery.JournalOutcome{StatusCode: 429, RequestID: "rid"},
		readrecovery.RetryAfter{Kind: readrecovery.RetryAfterSeconds, Value: 60},
		&readrecovery.RetryAfterTiming{ReceivedAtUTC: now.Unix(), NotBeforeUTC: now.Unix() + 60, ServerDelaySeconds: 60}); err != nil {
		t.Fatal(err)
	}
	runArg := r.container + "/run"

	code, out, _ := rrj("status", runArg)
	if code != 3 || !strings.Contains(out, `{"file_batch":{"backoff":{"state":"waiting"`) || !strings.Contains(out, `"server_delay_seconds":60`) {
		t.Fatalf("status: exit %d, %s", code, out)
	}
	code, out, _ = rrj("verify", runArg)
	if code != 0 || out != "ok: 3 planned files, 1 backoff entries, 0 receipts, 0 part receipts, 0 reviews\n" {
		t.Fatalf("verify: exit %d, %q", code, out)
	}
	code, out, _ = rrj("plan", "--json", runArg)
	if code != 3 || !strings.Contains(out, `"counts":{"acked":0,"never-attempted":2,"reviewed":0,"unknown":1}`) {
		// plan exits with the run's state, as status does: 3 waiting.
		t.Fatalf("plan: exit %d, %s", code, out)
	}
	code, out, errs := rrj("review", runArg, "--file", "f-001", "--decision", "skip", "--note", "checked by hand")
	if code != 0 || !strings.HasPrefix(out, "reviewed sha256:") {
		t.Fatalf("review: exit %d, %q %q", code, out, errs)
	}
	code, _, _ = rrj("review", runArg, "--file", "f-002", "--decision", "skip")
	if code != 1 {
		t.Fatalf("review of a never-attempted file: exit %d, want 1", code)
	}
	code, out, _ = rrj("verify", runArg)
	if code != 0 || !strings.HasSuffix(out, "1 reviews\n") {
		t.Fatalf("verify after review: exit %d, %q", code, out)
	}

	// pending-review on Blob Storage: a worker killed while f-002's
	// upload was in flight leaves its marker; `rrjournal review --pending`
	// is the way out: the run waits (exit 3), f-002 is unknown, and
	// verify is clean.
	// (The marker is written as a worker writes it: the run is waiting,
	// so no Begin of this process would be allowed to make one.)
	marker := `{"backoff_version":"1.0","method":"PUT","url_digest":"sha256:` + strings.Repeat("ab", 32) +
		`","attempt":1,"resend_of":"","file_digest":"` + journal.PlannedFile{ID: "f-002"}.Digest() + `","begun_at_utc":` +
		strconv.FormatInt(now.Unix(), 10) + "}\n"
	if _, err := st.Create(context.Background(), "pending-request.json", []byte(marker)); err != nil {
		t.Fatal(err)
	}
	// R83: a marker without a lease is live only while it is younger than
	// blobjournal's creation grace (5 s by the service's clock: its worker
	// takes the lease right after the create); then it is dead. Until
	// then a review of it is refused and writes nothing.
	code, _, errs = rrj("review", runArg, "--pending", "--note", "too early")
	if code != 1 || !strings.Contains(errs, "held by its worker") {
		t.Fatalf("review --pending of a marker in its creation grace: exit %d, %q", code, errs)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		live, _, err := st.Live(context.Background(), "pending-request.json")
		if err != nil {
			t.Fatal(err)
		}
		if !live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a marker without a lease is still live after 10 s")
		}
	}
	code, _, _ = rrj("status", runArg)
	if code != 4 {
		t.Fatalf("status with the dead worker's marker: exit %d, want 4", code)
	}
	code, out, errs = rrj("review", runArg, "--pending", "--note", "worker 3 killed")
	if code != 3 || !strings.Contains(out, "(review-0002.json); file "+journal.PlannedFile{ID: "f-002"}.Digest()+" (now unknown") {
		t.Fatalf("review --pending: exit %d, %q %q", code, out, errs)
	}
	code, out, _ = rrj("plan", "--json", runArg)
	if code != 3 || !strings.Contains(out, `"counts":{"acked":0,"never-attempted":1,"reviewed":1,"unknown":1}`) {
		t.Fatalf("plan after review --pending: exit %d, %s", code, out)
	}
	code, out, _ = rrj("verify", runArg)
	if code != 0 || !strings.HasSuffix(out, "2 reviews\n") {
		t.Fatalf("verify after review --pending: exit %d, %q", code, out)
	}

	code, _, errs = rrj("status", r.container+"/nothing-here")
	if code != 2 || !strings.Contains(errs, "no journal run") {
		t.Fatalf("status of an empty prefix: exit %d, %q", code, errs)
	}
	code, out, _ = rrj("--help")
	if code != 0 || !strings.HasPrefix(out, "usage") {
		t.Fatalf("--help: exit %d", code)
	}
}
