package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// watchRun is a parallel run of two files: a.bin acked, b.bin in flight
// under the marker of the returned Journal (complete it with done).
func watchRun(t *testing.T) (dir string, done func()) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "run")
	plan := []journal.PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}}
	j, err := journal.Open(dir, journal.WithPlan(plan), journal.WithParallel(2))
	require.NoError(t, err)
	req := readrecovery.JournalRequest{Method: "PUT", URLDigest: journal.PlannedFile{ID: "u"}.Digest(), Attempt: 1}
	ctx := journal.WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(ctx, req))
	require.NoError(t, j.Complete(ctx, req, readrecovery.JournalOutcome{StatusCode: 201, RequestID: "r1"}))
	ctx = journal.WithUpload(context.Background(), "b.bin")
	require.NoError(t, j.Begin(ctx, req))
	return dir, func() {
		require.NoError(t, j.Complete(ctx, req, readrecovery.JournalOutcome{StatusCode: 201, RequestID: "r2"}))
	}
}

// waitingRun is a run waiting 30 s from now that --watch never calls done:
// a.bin met 429 (unknown), b.bin is never attempted.
func waitingRun(t *testing.T) string {
	t.Helper()
	now := time.Now().Unix()
	dir := filepath.Join(t.TempDir(), "run")
	j, err := journal.Open(dir, journal.WithPlan([]journal.PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}}))
	require.NoError(t, err)
	req := readrecovery.JournalRequest{Method: "PUT", URLDigest: journal.PlannedFile{ID: "u"}.Digest(), Attempt: 1}
	ctx := journal.WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(ctx, req))
	_, err = j.Backoff(ctx, req, readrecovery.JournalOutcome{StatusCode: 429, RequestID: "r"},
		readrecovery.RetryAfter{Kind: readrecovery.RetryAfterSeconds, Value: 30},
		&readrecovery.RetryAfterTiming{ReceivedAtUTC: now, NotBeforeUTC: now + 30, ServerDelaySeconds: 30})
	require.NoError(t, err)
	return dir
}

// `journal status --watch` redraws the run at a glance every --interval,
// reading the run again each time, and ends once the run is done: here a
// frame shows b.bin in flight under a live marker (PUT, this process's
// host and pid), and once its upload completes the last frame shows 2
// acked, nothing in flight, and "done"; exit 0.
func TestJournalStatusWatchUntilDone(t *testing.T) {
	dir, complete := watchRun(t)
	var out, errb syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- runJournalContext(context.Background(), []string{"status", "--watch", "--interval", "10ms", dir}, &out, &errb)
	}()
	require.Eventually(t, func() bool { return strings.Count(out.String(), "run: clear") >= 2 }, 10*time.Second, 5*time.Millisecond)
	complete()
	select {
	case c := <-code:
		assert.Equal(t, 0, c, errb.String())
	case <-time.After(10 * time.Second):
		t.Fatal("--watch did not end once the run was done")
	}
	frames := strings.Split(out.String(), "\n\n")
	require.GreaterOrEqual(t, len(frames), 3)
	host, _ := os.Hostname()
	first := frames[0]
	assert.Contains(t, first, "readrecovery journal status --watch "+dir+": ")
	assert.Contains(t, first, "files: 2 planned: 1 acked, 1 in-flight, 0 never-attempted, 0 unknown, 0 reviewed\n")
	assert.Regexp(t, `(?m)^shard-0\d +clear +live +PUT +`+journal.PlannedFile{ID: "b.bin"}.Digest()+` +`+regexp.QuoteMeta(host)+fmt.Sprintf(` pid %d +\d+ s +0 +1 +0 +0 +0$`, os.Getpid()), first)
	assert.NotContains(t, first, "done")
	last := frames[len(frames)-1]
	assert.Contains(t, last, "files: 2 planned: 2 acked, 0 in-flight, 0 never-attempted, 0 unknown, 0 reviewed\n")
	assert.True(t, strings.HasSuffix(last, "done: no file in flight, none never attempted\n"), last)
	assert.NotContains(t, out.String(), "\x1b[", "no escape codes when stdout is not a terminal")
	assert.Empty(t, errb.String())
}

// --watch stops at once on an unresolved run (exit 4), keeps redrawing a
// waiting one until its context ends (exit 3: the last status), and
// rejects a non-positive --interval (exit 2); --text prints the glance
// once.
func TestJournalStatusWatchEnds(t *testing.T) {
	t.Run("unresolved", func(t *testing.T) {
		dir := fixture(t, readrecovery.RetryAfter{Kind: readrecovery.RetryAfterOverlong}, nil, false)
		code, stdout, _ := runJ("status", "--watch", "--interval", "10ms", dir)
		assert.Equal(t, 4, code)
		assert.Equal(t, 1, strings.Count(stdout, "run: unresolved"), stdout)
		assert.True(t, strings.HasSuffix(stdout, "stopped: the run is unresolved\n"), stdout)
	})
	t.Run("waiting until the context ends", func(t *testing.T) {
		dir := waitingRun(t)
		var out, errb syncBuffer
		wctx, cancel := context.WithCancel(context.Background())
		code := make(chan int, 1)
		go func() {
			code <- runJournalContext(wctx, []string{"status", dir, "--watch", "--interval=10ms"}, &out, &errb)
		}()
		require.Eventually(t, func() bool { return strings.Count(out.String(), "run: waiting") >= 3 }, 10*time.Second, 5*time.Millisecond)
		cancel()
		select {
		case c := <-code:
			assert.Equal(t, 3, c)
		case <-time.After(10 * time.Second):
			t.Fatal("--watch did not end with its context")
		}
		assert.Contains(t, out.String(), "files: 2 planned: 0 acked, 0 in-flight, 1 never-attempted, 1 unknown, 0 reviewed\n")
		assert.NotContains(t, out.String(), "done")
	})
	t.Run("interval", func(t *testing.T) {
		dir := fixture(t, readrecovery.RetryAfter{}, nil, false)
		for _, v := range []string{"0s", "-1s", "soon"} {
			code, _, stderr := runJ("status", "--watch", "--interval", v, dir)
			assert.Equal(t, 2, code, v)
			assert.Contains(t, stderr, "usage", v)
		}
	})
	t.Run("text", func(t *testing.T) {
		dir := fixture(t, readrecovery.RetryAfter{}, nil, false)
		code, stdout, _ := runJ("status", "--text", dir)
		assert.Equal(t, 0, code)
		assert.Equal(t, "run: clear: no backoff entries\n"+
			"files: 1 planned: 0 acked, 0 in-flight, 1 never-attempted, 0 unknown, 0 reviewed\n"+
			"SHARD  STATE  MARKER  METHOD  FILE  WORKER  AGE  ACKED  IN-FLIGHT  NEVER-ATTEMPTED  UNKNOWN  REVIEWED\n"+
			".      clear  -       -       -     -       -    0      0          1                0        0\n", stdout)
	})
}

// errWriter fails every write, as a closed stdout or a full disk does.
type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// A status whose output cannot be written ends at once with exit 2 and says
// so on stderr: --watch of a run that would wait forever never redraws
// silently, and a one-shot status never exits 0, 3 or 4 as if printed.
func TestJournalStatusWriteError(t *testing.T) {
	dir := waitingRun(t)
	for _, args := range [][]string{
		{"status", "--watch", dir}, {"status", "--watch", "--text", dir}, {"status", dir}, {"status", "--text", dir},
	} {
		var errb bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- runJournalContext(t.Context(), args, errWriter{}, &errb) }()
		select {
		case code := <-done:
			assert.Equal(t, 2, code, "%q", args)
			assert.Equal(t, "readrecovery: journal status: cannot write the status: no space left on device\n", errb.String(), "%q", args)
		case <-time.After(10 * time.Second):
			t.Fatalf("%q: still running after its output failed", args)
		}
	}

	// The built command, its stdout on /dev/full: exit 2 at its first frame.
	// (A closed stdout is /dev/null to a Go program, which the runtime opens
	// in its place: a watch into /dev/null runs until the run is done.)
	if _, err := os.Stat("/dev/full"); err != nil || runtime.GOOS == "windows" {
		t.Skip("no /dev/full")
	}
	bin := buildCommand(t, t.TempDir())
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	require.NoError(t, err)
	defer full.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "journal", "status", "--watch", dir)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = full, &errb
	err = cmd.Run()
	require.NoError(t, ctx.Err(), "still running after its output failed")
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Equal(t, "readrecovery: journal status: cannot write the status: write /dev/stdout: no space left on device\n", errb.String())

	// Its stdout a pipe whose reader is gone: SIGPIPE ends it, as any Unix filter.
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd = exec.CommandContext(ctx, bin, "journal", "status", "--watch", "--interval", "100ms", dir)
	cmd.Stdout = w
	require.NoError(t, cmd.Start())
	w.Close()
	_, err = r.Read(make([]byte, 1))
	require.NoError(t, err, "a first frame")
	r.Close()
	err = cmd.Wait()
	require.NoError(t, ctx.Err(), "still running after its reader left")
	require.ErrorAs(t, err, &ee)
	if ws, ok := ee.Sys().(syscall.WaitStatus); assert.True(t, ok) {
		assert.Equal(t, syscall.SIGPIPE, ws.Signal())
	}
}

// --interval has a floor of 100ms: a shorter one (1ns) is raised to it, and
// the frame's header says so. Frames come no faster than one per 100ms.
func TestJournalStatusWatchIntervalFloor(t *testing.T) {
	dir := waitingRun(t)
	var out, errb syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	start := time.Now()
	done := make(chan int, 1)
	go func() {
		done <- runJournalContext(ctx, []string{"status", "--watch", "--interval", "1ns", dir}, &out, &errb)
	}()
	require.Eventually(t, func() bool { return strings.Count(out.String(), "run: waiting") >= 3 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.Equal(t, 3, <-done)
	elapsed := time.Since(start)
	frames := strings.Count(out.String(), "run: waiting")
	assert.LessOrEqual(t, frames, int(elapsed/(100*time.Millisecond))+1, "%d frames in %v", frames, elapsed)
	assert.Equal(t, frames, strings.Count(out.String(), ", every 100ms\n"), out.String())
	assert.Empty(t, errb.String())
}
