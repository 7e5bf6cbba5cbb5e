package main

import (
	"bufio"
	"context"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal"
	"github.com/stretchr/testify/require"
)

// worker is a worker process of a run, started by startWorker: it has
// begun one journaled request and holds its marker live (R83) until kill.
type worker struct {
	cmd *exec.Cmd
}

// startWorker starts a process that opens the run in dir, begins a PUT of
// file (a GET when file is ""), and then only waits: its request is in
// flight for as long as it lives.
func startWorker(t *testing.T, dir, file string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RR_WORKER_DIR="+dir, "RR_WORKER_FILE="+file)
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
	j, err := journal.Open(dir, journal.Existing())
	require.NoError(t, err)
	file := os.Getenv("RR_WORKER_FILE")
	u, _ := url.Parse("https://acct.blob.core.windows.net/c/" + file)
	req := readrecovery.JournalRequest{Method: "GET", URLDigest: redact.URLDigest(u), Attempt: 1}
	ctx := context.Background()
	if file != "" {
		req.Method, ctx = "PUT", journal.WithUpload(ctx, file)
	}
	require.NoError(t, j.Begin(ctx, req))
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
