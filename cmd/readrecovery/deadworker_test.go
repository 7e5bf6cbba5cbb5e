package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// worker is a worker process of a run, started by startWorker: it has
// begun one journaled request and holds its marker live (R83) until kill.
type worker struct {
	cmd *exec.Cmd
}

// startWorker starts a process that opens the run in dir, begins a PUT of
// file (a GET when file is ""), and then only waits: its request is in
// flight for as long as it lives. With env (RR_WORKER_NEXT=claim or begun,
// RR_WORKER_PLAN=the plan's IDs, comma-separated) it takes its file with
// Next instead, and holds the claim, or begins its upload under it.
func startWorker(t *testing.T, dir, file string, env ...string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), "RR_WORKER_DIR="+dir, "RR_WORKER_FILE="+file), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	w := &worker{cmd: cmd}
	t.Cleanup(func() { w.kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the worker began")
	require.Equal(t, "begun\n", line)
	return w
}

// kill SIGKILLs the worker and waits for its death: the kernel has then
// released its marker's lock.
func (w *worker) kill() {
	if w.cmd.ProcessState == nil {
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
	}
}

// TestWorkerProcess is not a test of its own: startWorker runs it.
func TestWorkerProcess(t *testing.T) {
	dir := os.Getenv("RR_WORKER_DIR")
	if dir == "" {
		t.Skip("a helper process")
	}
	var plan []journal.PlannedFile
	for _, id := range strings.Split(os.Getenv("RR_WORKER_PLAN"), ",") {
		plan = append(plan, journal.PlannedFile{ID: id})
	}
	j, err := journal.Open(dir, journal.Existing(), journal.WithPlan(plan))
	if os.Getenv("RR_WORKER_PLAN") == "" {
		j, err = journal.Open(dir, journal.Existing())
	}
	require.NoError(t, err)
	file := os.Getenv("RR_WORKER_FILE")
	next := os.Getenv("RR_WORKER_NEXT")
	if next != "" {
		f, err := j.Next(context.Background(), journal.NewApproval)
		require.NoError(t, err)
		file = f.ID
	}
	u, _ := url.Parse("https://acct.blob.core.windows.net/c/" + file)
	req := readrecovery.JournalRequest{Method: "GET", URLDigest: redact.URLDigest(u), Attempt: 1}
	ctx := context.Background()
	if file != "" {
		req.Method, ctx = "PUT", journal.WithUpload(ctx, file)
	}
	if next != "claim" {
		require.NoError(t, j.Begin(ctx, req))
	}
	os.Stdout.WriteString("begun\n")
	time.Sleep(time.Hour) // the request in flight, until the kill
}

// dirFiles returns every file under dir, by relative path, with its bytes.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	}))
	return out
}

// The two operator paths of a worker killed mid-upload (docs/journal.md,
// "A worker killed mid-upload"), through the command, on a parallel
// directory run. Killed after Next, before its upload began: `journal
// status` exits 0 with the shard's marker dead, method CLAIM, and the file
// never attempted; `verify` is ok; no command is needed, and the next Next
// hands the same file out. Killed after its upload began: status exits 4
// with the marker dead, method PUT, and the file unknown; the two commands
// of the table (the pending review, exit 3: the run waits 30 s; the file's
// reupload decision, exit 0) leave the file reviewed for a reupload, every
// other file never attempted, and the run waiting on the review alone.
func TestKilledWorkerOperatorSteps(t *testing.T) {
	plan := []journal.PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}, {ID: "c.bin"}, {ID: "d.bin"}}
	ids := "a.bin,b.bin,c.bin,d.bin"
	byDigest := map[string]string{}
	for _, f := range plan {
		byDigest[f.Digest()] = f.ID
	}
	// killed returns the file digest the dead marker of the status names.
	killed := func(t *testing.T, dir, mode string) (code int, stdout, digest string) {
		t.Helper()
		startWorker(t, dir, "", "RR_WORKER_NEXT="+mode, "RR_WORKER_PLAN="+ids).kill()
		code, stdout, _ = runJ("status", dir)
		var st struct {
			FileBatch struct{ Shards []journal.ShardView } `json:"file_batch"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
		for _, v := range st.FileBatch.Shards {
			if v.Marker != "" {
				digest = v.FileDigest
			}
		}
		require.NotEmpty(t, byDigest[digest], stdout)
		return code, stdout, digest
	}
	t.Run("before the upload began", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		_, err := journal.Open(dir, journal.WithPlan(plan), journal.WithParallel(2))
		require.NoError(t, err)
		code, stdout, digest := killed(t, dir, "claim")
		assert.Equal(t, 0, code, stdout)
		assert.Contains(t, stdout, `"backoff":{"state":"clear"`)
		assert.Contains(t, stdout, `"state":"clear","marker":"dead","method":"CLAIM","file_digest":"`+digest+`"`)
		assert.Contains(t, stdout, `"files":{"acked":0,"in-flight":0,"never-attempted":4,"reviewed":0,"unknown":0}`)
		code, stdout, _ = runJ("verify", dir)
		assert.Equal(t, 0, code, stdout)
		j, err := journal.Open(dir, journal.WithPlan(plan))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // Next would wait for a dead upload
		defer cancel()
		var got []string // one claim per shard: each shard's first eligible file
		for range 2 {
			f, err := j.Next(ctx, journal.NewApproval)
			require.NoError(t, err)
			got = append(got, f.ID)
		}
		assert.Contains(t, got, byDigest[digest], "handed out again, no command run")
	})
	t.Run("after the upload began", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		_, err := journal.Open(dir, journal.WithPlan(plan), journal.WithParallel(2))
		require.NoError(t, err)
		code, stdout, digest := killed(t, dir, "begun")
		assert.Equal(t, 4, code, stdout)
		assert.Contains(t, stdout, `"state":"unresolved","marker":"dead","method":"PUT","file_digest":"`+digest+`"`)
		assert.Contains(t, stdout, `"unknown":1`)
		code, _, stderr := runJ("review", dir, "--pending", "--note", "worker killed at 10:02")
		assert.Equal(t, 3, code, stderr)
		code, _, stderr = runJ("review", dir, "--file", byDigest[digest], "--decision", "reupload", "--note", "not on the server")
		assert.Equal(t, 0, code, stderr)
		at(t, time.Now())
		code, stdout, _ = runJ("plan", "--json", dir)
		assert.Equal(t, 3, code, stdout)
		var pj planJSON
		require.NoError(t, json.Unmarshal([]byte(stdout), &pj))
		classes := map[string]string{}
		for _, f := range pj.FileBatch.Plan.Files {
			classes[byDigest[f.FileDigest]] = f.Class + "/" + f.Decision
		}
		want := map[string]string{"a.bin": "never-attempted/", "b.bin": "never-attempted/", "c.bin": "never-attempted/", "d.bin": "never-attempted/"}
		want[byDigest[digest]] = "reviewed/reupload"
		assert.Equal(t, want, classes)
	})
}
