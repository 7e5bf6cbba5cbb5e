package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
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

// runJ runs `readrecovery journal args...` and returns exit code, stdout
// and stderr.
func runJ(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runJournal(args, &out, &errb)
	return code, out.String(), errb.String()
}

// at fixes the status command's time for one test.
func at(t *testing.T, now time.Time) {
	old := journalNow
	journalNow = func() time.Time { return now }
	t.Cleanup(func() { journalNow = old })
}

// fixture creates a run and records one 429 per timing (nil: none); a
// trailing pending marker when pending.
func fixture(t *testing.T, ra readrecovery.RetryAfter, tm *readrecovery.RetryAfterTiming, pending bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	j, err := journal.Open(dir, journal.WithPlan([]journal.PlannedFile{{ID: "a.bin"}}))
	require.NoError(t, err)
	u, _ := url.Parse("https://acct.file.core.windows.net/share/a.bin?sig=SECRET")
	req := readrecovery.JournalRequest{Method: "PUT", URLDigest: redact.URLDigest(u), Attempt: 1}
	ctx := journal.WithUpload(context.Background(), "a.bin")
	if ra.Kind != "" {
		require.NoError(t, j.Begin(ctx, req))
		_, err := j.Backoff(ctx, req, readrecovery.JournalOutcome{StatusCode: 429, RequestID: "req-1"}, ra, tm)
		require.NoError(t, err)
	}
	if pending {
		require.NoError(t, j.Begin(context.Background(), readrecovery.JournalRequest{Method: "GET", URLDigest: redact.URLDigest(u), Attempt: 1}))
	}
	return dir
}

func statusJSON(state, timing, remaining, reason string) string {
	if timing == "" {
		timing = `"received_at_utc":null,"not_before_utc":null,"server_delay_seconds":null`
	}
	return fmt.Sprintf(`{"file_batch":{"backoff":{"state":%q,%s,"remaining_seconds":%s,"reason":%q}}}`+"\n", state, timing, remaining, reason)
}

// TestR35_JournalStatusCommand asserts the exact output and exit code of
// `readrecovery journal status DIR` for every state.
func TestR35_JournalStatusCommand(t *testing.T) {
	rcv := time.Now().Add(-10 * time.Second).Truncate(time.Second)
	r := rcv.Unix()
	tm := func(d int64) *readrecovery.RetryAfterTiming {
		return &readrecovery.RetryAfterTiming{ReceivedAtUTC: r, NotBeforeUTC: r + d, ServerDelaySeconds: d}
	}
	timingOf := func(d int64) string {
		return fmt.Sprintf(`"received_at_utc":%d,"not_before_utc":%d,"server_delay_seconds":%d`, r, r+d, d)
	}
	overlong := readrecovery.RetryAfter{Kind: readrecovery.RetryAfterOverlong}
	secs := func(n int64) readrecovery.RetryAfter {
		return readrecovery.RetryAfter{Kind: readrecovery.RetryAfterSeconds, Value: n}
	}

	cases := []struct {
		name     string
		dir      string
		now      time.Time
		code     int
		stdout   string
		inStderr string
	}{
		{"clear", fixture(t, readrecovery.RetryAfter{}, nil, false), rcv, 0,
			statusJSON("clear", "", "0", "no backoff entries"), ""},
		{"waiting 60 s overlong", fixture(t, overlong, tm(60), false), rcv.Add(15 * time.Second), 3,
			statusJSON("waiting", timingOf(60), "45", "backoff-0001.json: server restriction (retry_after overlong, server delay 60 s) until not_before_utc"), ""},
		{"elapsed", fixture(t, secs(5), tm(5), false), rcv.Add(5 * time.Second), 0,
			statusJSON("elapsed", timingOf(5), "0", "backoff-0001.json: restriction elapsed; only otherwise eligible uploads may proceed"), ""},
		{"unresolved: pending request", fixture(t, secs(1), tm(1), true), rcv.Add(time.Hour), 4,
			statusJSON("unresolved", timingOf(1), "null", "pending-request.json: unfinished request: its outcome is unknown (unresolved)"), ""},
		{"unresolved: no timing", fixture(t, overlong, nil, false), rcv.Add(time.Hour), 4,
			statusJSON("unresolved", "", "null", "backoff-0001.json: retry_after overlong without timing: unrepresentable or unknown delay (unresolved)"), ""},
		{"unresolved: clock regression", fixture(t, secs(5), tm(5), false), rcv.Add(-time.Second), 4,
			statusJSON("unresolved", timingOf(5), "null", fmt.Sprintf("clock regression: now (%d) is before received_at_utc %d recorded in backoff-0001.json", r-1, r)), ""},
		{"missing dir", filepath.Join(t.TempDir(), "nope"), rcv, 2, "", "no run in"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			at(t, tc.now)
			code, stdout, stderr := runJ("status", tc.dir)
			assert.Equal(t, tc.code, code, stderr)
			assert.Equal(t, tc.stdout, stdout)
			assert.Contains(t, stderr, tc.inStderr)
		})
	}
	_, err := os.Stat(cases[len(cases)-1].dir)
	assert.True(t, os.IsNotExist(err), "the status command never creates a run")
}

// TestR35_JournalStatusRealClock runs the command on the real clock with
// fixtures whose restriction lies in the future and in the past.
func TestR35_JournalStatusRealClock(t *testing.T) {
	now := time.Now().Unix()
	future := fixture(t, readrecovery.RetryAfter{Kind: readrecovery.RetryAfterOverlong},
		&readrecovery.RetryAfterTiming{ReceivedAtUTC: now - 10, NotBeforeUTC: now + 3590, ServerDelaySeconds: 3600}, false)
	code, stdout, _ := runJ("status", future)
	require.Equal(t, 3, code)
	var got struct {
		FileBatch struct{ Backoff journal.Status } `json:"file_batch"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	st := got.FileBatch.Backoff
	assert.Equal(t, journal.Waiting, st.State)
	assert.Equal(t, now+3590, st.NotBeforeUTC)
	assert.InDelta(t, 3590, st.RemainingSeconds, 5)

	past := fixture(t, readrecovery.RetryAfter{Kind: readrecovery.RetryAfterSeconds, Value: 5},
		&readrecovery.RetryAfterTiming{ReceivedAtUTC: now - 100, NotBeforeUTC: now - 95, ServerDelaySeconds: 5}, false)
	code, stdout, _ = runJ("status", past)
	require.Equal(t, 0, code)
	assert.Equal(t, statusJSON("elapsed", fmt.Sprintf(`"received_at_utc":%d,"not_before_utc":%d,"server_delay_seconds":5`, now-100, now-95), "0",
		"backoff-0001.json: restriction elapsed; only otherwise eligible uploads may proceed"), stdout)
}

// TestR40_JournalVerifyCommand: a clean run exits 0 with no output; an
// edited entry exits 1 with a line naming the file; a tampered run's status
// is unresolved (4).
func TestR40_JournalVerifyCommand(t *testing.T) {
	now := time.Now().Unix()
	dir := fixture(t, readrecovery.RetryAfter{Kind: readrecovery.RetryAfterSeconds, Value: 5},
		&readrecovery.RetryAfterTiming{ReceivedAtUTC: now - 100, NotBeforeUTC: now - 95, ServerDelaySeconds: 5}, false)
	code, stdout, stderr := runJ("verify", dir)
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, "", stdout)

	p := filepath.Join(dir, "backoff-0001.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Contains(b, []byte(`"req-1"`)))
	require.NoError(t, os.WriteFile(p, bytes.Replace(b, []byte(`"req-1"`), []byte(`"req-2"`), 1), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o600))

	code, stdout, _ = runJ("verify", dir)
	assert.Equal(t, 1, code)
	assert.Equal(t, "backoff-0001.json: event_digest does not match the content (edited)\nnotes.txt: unexpected file in the run directory\n", stdout,
		"findings in check order: directory, manifest, entries, receipts, then other names")

	code, stdout, _ = runJ("status", dir)
	assert.Equal(t, 4, code)
	assert.True(t, strings.Contains(stdout, `"state":"unresolved"`) && strings.Contains(stdout, `"reason":"backoff-0001.json: event_digest does not match the content (edited)"`), stdout)

	code, _, stderr = runJ("verify", filepath.Join(t.TempDir(), "nope"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "no run in")
	code, _, _ = runJ("verify", t.TempDir())
	assert.Equal(t, 2, code, "an empty directory holds no run")
}

// TestJournalCommandUsage: wrong arguments exit 2 with the usage on stderr.
func TestJournalCommandUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"status"}, {"verify"}, {"status", "a", "b"}, {"repair", "dir"}, {"status", ""}} {
		code, stdout, stderr := runJ(args...)
		assert.Equal(t, 2, code, "%q", args)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "usage:")
	}
	code, stdout, _ := runJ("--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "readrecovery journal status DIR")

	var out, errb bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"journal"}, &out, &errb), "main dispatches to runJournal")
}
