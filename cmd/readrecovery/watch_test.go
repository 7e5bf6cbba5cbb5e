package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
		now := time.Now().Unix()
		// a.bin met 429 (unknown), b.bin is left: not done while waiting.
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
