package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
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
		// A worker that began a GET and died (R83: its marker is dead).
		startWorker(t, dir, "").kill()
	}
	return dir
}

func statusJSON(state, timing, remaining, reason, glance string) string {
	if timing == "" {
		timing = `"received_at_utc":null,"not_before_utc":null,"server_delay_seconds":null`
	}
	return fmt.Sprintf(`{"file_batch":{"backoff":{"state":%q,%s,"remaining_seconds":%s,"reason":%q},%s}}`+"\n", state, timing, remaining, reason, glance)
}

// glanceJSON is the run at a glance of a fixture (one planned file, of
// class class; its one line in state state), with marker the marker's
// fields ("" for none).
func glanceJSON(class journal.FileState, state journal.State, marker string) string {
	files := map[journal.FileState]int{journal.FileAcked: 0, journal.FileInFlight: 0, journal.FileNeverAttempted: 0, journal.FileUnknown: 0, journal.FileReviewed: 0}
	files[class] = 1
	b, _ := json.Marshal(files)
	if marker == "" {
		marker = `"marker":""`
	}
	return fmt.Sprintf(`"files":%s,"shards":[{"shard":".","state":%q,%s,"files":%s}]`, b, state, marker, b)
}

// fixtureMarker is the glance's fields of the marker of a fixture made
// with pending, at now: dead (its worker was killed: no lock holds it), a
// GET of that worker process.
func fixtureMarker(t *testing.T, dir string, now time.Time) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "pending-request.json"))
	require.NoError(t, err)
	var m struct {
		Begun int64 `json:"begun_at_utc"`
		PID   int   `json:"pid"`
	}
	require.NoError(t, json.Unmarshal(data, &m))
	require.NotZero(t, m.PID)
	require.NotEqual(t, os.Getpid(), m.PID, "the marker is the killed worker's")
	host, _ := os.Hostname()
	return fmt.Sprintf(`"marker":"dead","method":"GET","host":%q,"pid":%d,"age_seconds":%d`, host, m.PID, now.Unix()-m.Begun)
}

// TestJournalStatusCommand asserts the exact output and exit code of
// `readrecovery journal status DIR` for every state.
func TestJournalStatusCommand(t *testing.T) {
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

	pending := fixture(t, secs(1), tm(1), true)
	cases := []struct {
		name     string
		dir      string
		now      time.Time
		code     int
		stdout   string
		inStderr string
	}{
		{"clear", fixture(t, readrecovery.RetryAfter{}, nil, false), rcv, 0,
			statusJSON("clear", "", "0", "no backoff entries", glanceJSON(journal.FileNeverAttempted, journal.Clear, "")), ""},
		{"waiting 60 s overlong", fixture(t, overlong, tm(60), false), rcv.Add(15 * time.Second), 3,
			statusJSON("waiting", timingOf(60), "45", "backoff-0001.json: server restriction (retry_after overlong, server delay 60 s) until not_before_utc",
				glanceJSON(journal.FileUnknown, journal.Waiting, "")), ""},
		{"elapsed", fixture(t, secs(5), tm(5), false), rcv.Add(5 * time.Second), 0,
			statusJSON("elapsed", timingOf(5), "0", "backoff-0001.json: restriction elapsed; only otherwise eligible uploads may proceed",
				glanceJSON(journal.FileUnknown, journal.Elapsed, "")), ""},
		{"unresolved: pending request", pending, rcv.Add(time.Hour), 4,
			statusJSON("unresolved", timingOf(1), "null", "pending-request.json: unfinished request: its worker died in flight (no lock or lease holds the marker), so its outcome is unknown: unresolved until `journal review --pending`",
				glanceJSON(journal.FileUnknown, journal.Unresolved, fixtureMarker(t, pending, rcv.Add(time.Hour)))), ""},
		{"unresolved: no timing", fixture(t, overlong, nil, false), rcv.Add(time.Hour), 4,
			statusJSON("unresolved", "", "null", "backoff-0001.json: retry_after overlong without timing: unrepresentable or unknown delay (unresolved)",
				glanceJSON(journal.FileUnknown, journal.Unresolved, "")), ""},
		{"unresolved: clock regression", fixture(t, secs(5), tm(5), false), rcv.Add(-time.Second), 4,
			statusJSON("unresolved", timingOf(5), "null", fmt.Sprintf("clock regression: now (%d) is before received_at_utc %d recorded in backoff-0001.json", r-1, r),
				glanceJSON(journal.FileUnknown, journal.Unresolved, "")), ""},
		{"missing dir", filepath.Join(t.TempDir(), "nope"), rcv, 2, "", "readrecovery: no journal run: journal: stat "},
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

// TestJournalStatusRealClock runs the command on the real clock with
// fixtures whose restriction lies in the future and in the past.
func TestJournalStatusRealClock(t *testing.T) {
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
		"backoff-0001.json: restriction elapsed; only otherwise eligible uploads may proceed", glanceJSON(journal.FileUnknown, journal.Elapsed, "")), stdout)
}

// TestJournalVerifyCommand: a clean run exits 0 and says ok with its
// counts; an
// edited entry exits 1 with a line naming the file; a tampered run's status
// is unresolved (4).
func TestJournalVerifyCommand(t *testing.T) {
	now := time.Now().Unix()
	dir := fixture(t, readrecovery.RetryAfter{Kind: readrecovery.RetryAfterSeconds, Value: 5},
		&readrecovery.RetryAfterTiming{ReceivedAtUTC: now - 100, NotBeforeUTC: now - 95, ServerDelaySeconds: 5}, false)
	code, stdout, stderr := runJ("verify", dir)
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, "ok: 1 planned files, 1 backoff entries, 0 receipts, 0 part receipts, 0 reviews\n", stdout)

	p := filepath.Join(dir, "backoff-0001.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Contains(b, []byte(`"req-1"`)))
	require.NoError(t, os.WriteFile(p, bytes.Replace(b, []byte(`"req-1"`), []byte(`"req-2"`), 1), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o600))

	code, stdout, _ = runJ("verify", dir)
	assert.Equal(t, 1, code)
	assert.Equal(t, "backoff-0001.json: digest does not match the content (edited)\nnotes.txt: unexpected file in the run directory\n", stdout,
		"findings in check order: directory, manifest, entries, receipts, then other names")

	code, stdout, _ = runJ("status", dir)
	assert.Equal(t, 4, code)
	assert.True(t, strings.Contains(stdout, `"state":"unresolved"`) && strings.Contains(stdout, `"reason":"backoff-0001.json: digest does not match the content (edited)"`), stdout)

	code, _, stderr = runJ("verify", filepath.Join(t.TempDir(), "nope"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "no journal run")
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
	assert.Contains(t, stdout, "readrecovery journal status [--text] [--watch [--interval 2s]] DIR")

	var out, errb bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"journal"}, &out, &errb), "main dispatches to runJournal")
}

// partsRun is a run of plan {a.bin, b.bin, c.bin}: a.bin got two parts
// (unknown), b.bin is acked, c.bin was never attempted.
func partsRun(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	j, err := journal.Open(dir, journal.WithPlan([]journal.PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}, {ID: "c.bin"}}))
	require.NoError(t, err)
	u, _ := url.Parse("https://acct.blob.core.windows.net/c/a.bin?comp=block&sig=SECRET")
	req := readrecovery.JournalRequest{Method: "PUT", URLDigest: redact.URLDigest(u), Attempt: 1}
	for _, ctx := range []context.Context{
		journal.WithUploadPart(context.Background(), "a.bin"), journal.WithUploadPart(context.Background(), "a.bin"),
		journal.WithUpload(context.Background(), "b.bin"),
	} {
		require.NoError(t, j.Begin(ctx, req))
		require.NoError(t, j.Complete(ctx, req, readrecovery.JournalOutcome{StatusCode: 201, RequestID: "r"}))
	}
	return dir
}

// TestJournalPlanAndReviewCommands: plan prints every planned file's
// class (table and JSON); review records a decision about an unknown file
// and refuses any other; plan then shows it reviewed.
func TestJournalPlanAndReviewCommands(t *testing.T) {
	dir := partsRun(t)
	a, b, c := journal.PlannedFile{ID: "a.bin"}.Digest(), journal.PlannedFile{ID: "b.bin"}.Digest(), journal.PlannedFile{ID: "c.bin"}.Digest()
	// (the real time: reviews record when they were made)
	code, stdout, stderr := runJ("plan", dir)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 7, stdout)
	assert.Equal(t, "run: clear: no backoff entries", lines[0])
	assert.Equal(t, "the run stores file digests, never IDs: give --ids FILE (one planned ID per line) to print each ID beside its digest; a digest is sha256: and the hex SHA-256 of the ID's bytes (printf '%s' ID | sha256sum)", lines[6])
	assert.Regexp(t, `^CLASS +DECISION +FILE +REASON$`, lines[1])
	rows := map[string]string{}
	for _, l := range lines[2:5] {
		f := strings.Fields(l)
		rows[f[2]] = f[0] + " " + f[1]
	}
	assert.Equal(t, map[string]string{a: "unknown -", b: "acked -", c: "never-attempted -"}, rows)
	assert.Equal(t, "3 files: 1 acked, 1 unknown, 1 never-attempted, 0 reviewed", lines[5])

	code, stdout, _ = runJ("plan", "--json", dir)
	require.Equal(t, 0, code)
	var pj planJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &pj))
	assert.True(t, pj.FileBatch.Plan.Complete)
	assert.Equal(t, map[string]int{"acked": 1, "unknown": 1, "never-attempted": 1, "reviewed": 0}, pj.FileBatch.Plan.Counts)
	require.Len(t, pj.FileBatch.Plan.Files, 3)
	assert.Equal(t, journal.Clear, pj.FileBatch.Backoff.State)

	for _, args := range [][]string{
		{"review", dir, "--file", "b.bin", "--decision", "skip"},       // acked
		{"review", dir, "--file", "c.bin", "--decision", "reupload"},   // never attempted
		{"review", dir, "--file", "zzz.bin", "--decision", "reupload"}, // outside the plan
	} {
		code, stdout, stderr = runJ(args...)
		assert.Equal(t, 1, code, "%q: %s", args, stderr)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "readrecovery: journal: review refused: ")
	}
	for _, args := range [][]string{
		{"review", dir, "--file", "a.bin"},
		{"review", dir, "--decision", "skip"},
		{"review", dir, "--file", "a.bin", "--decision", "ship"},
		{"review", "--file", "a.bin", "--decision", "skip"},
		{"review", dir, "--file", "a.bin", "--decision", "skip", "--bogus"},
	} {
		code, _, stderr = runJ(args...)
		assert.Equal(t, 2, code, "%q", args)
		assert.Contains(t, stderr, "usage:")
	}
	code, stdout, stderr = runJ("review", "--decision", "reupload", dir, "--file", "a.bin", "--note", "blocks staged, never committed\n\x1b[0m")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^reviewed `+a+`: reupload by \S+ at \d+ \(review-0001\.json\)\n$`, stdout)
	raw, err := os.ReadFile(filepath.Join(dir, "review-0001.json"))
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"note":"blocks staged, never committed [0m"`, "control characters, ESC included, become spaces")

	code, stdout, _ = runJ("plan", "--json", dir)
	require.Equal(t, 0, code)
	pj = planJSON{}
	require.NoError(t, json.Unmarshal([]byte(stdout), &pj))
	assert.Equal(t, map[string]int{"acked": 1, "unknown": 0, "never-attempted": 1, "reviewed": 1}, pj.FileBatch.Plan.Counts)
	code, stdout, _ = runJ("verify", dir)
	assert.Equal(t, 0, code)
	assert.Equal(t, "ok: 3 planned files, 0 backoff entries, 1 receipts, 2 part receipts, 1 reviews\n", stdout)
}

// TestHelpEverywhere: --help and -h on every command and subcommand
// print the usage on stdout and exit 0.
func TestHelpEverywhere(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"journal", "--help"}, {"journal", "status", "--help"}, {"journal", "verify", "-h"},
		{"journal", "plan", "--help"}, {"journal", "review", "--help"}, {"journal", "review", "DIR", "--file", "x", "-h"},
		{"demo", "--help"}, {"demo", "-h"}, {"fakeserver", "--help"}, {"version", "--help"},
	} {
		var out, errb bytes.Buffer
		code := run(t.Context(), args, &out, &errb)
		assert.Equal(t, 0, code, "%q: %s", args, errb.String())
		assert.Contains(t, out.String(), "usage", "%q", args)
		assert.Empty(t, errb.String(), "%q", args)
	}
}

// TestVersion prints the binary's version and exits 0.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"version"}, &out, &errb))
	assert.Regexp(t, `^readrecovery \S+( [0-9a-f]{12})? \(go[^)]+\)\n$`, out.String())
	require.Equal(t, 2, run(t.Context(), []string{"version", "x"}, &out, &errb))
}

// TestNotAJournalRun: every journal command on a directory that is not
// a run exits 2 with "not a journal run" (and `status /etc` is not
// "unresolved"), without stuttering.
func TestNotAJournalRun(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hosts"), []byte("127.0.0.1 localhost\n"), 0o644))
	for _, args := range [][]string{{"status", dir}, {"verify", dir}, {"plan", dir}, {"review", dir, "--file", "a", "--decision", "skip"}} {
		code, stdout, stderr := runJ(args...)
		assert.Equal(t, 2, code, "%q", args)
		assert.Empty(t, stdout)
		assert.Equal(t, "readrecovery: journal: not a journal run (no run manifest): "+dir+"\n", stderr)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing written")
}

// TestMissingRunNameEscaped: a run directory that does not exist, named
// with an escape sequence and a newline: every command exits 2 and names
// it escaped; no control byte reaches the terminal.
func TestMissingRunNameEscaped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no\x1b[31mrun\n")
	for _, args := range [][]string{{"status", dir}, {"verify", dir}, {"plan", dir}, {"review", dir, "--pending", "--note", "x"}} {
		code, stdout, stderr := runJ(args...)
		assert.Equal(t, 2, code, "%q", args)
		assert.Empty(t, stdout)
		assert.NotContains(t, stderr, "\x1b", "%q", args)
		assert.Contains(t, stderr, `no\x1b[31mrun\n`, "%q", args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
}

// TestHostileRunDirectory: a FIFO as the pending marker and a name
// with a newline and an escape sequence: status answers unresolved at
// once, verify prints every name escaped, one line per finding.
func TestHostileRunDirectory(t *testing.T) {
	dir := partsRun(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pending-request.json"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x\nok: forged\x1b[2J"), nil, 0o600))
	done := make(chan struct{})
	var code, vcode int
	var stdout, vout string
	go func() {
		defer close(done)
		code, stdout, _ = runJ("status", dir)
		vcode, vout, _ = runJ("verify", dir)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the journal command hangs on a FIFO")
	}
	assert.Equal(t, 4, code)
	assert.Contains(t, stdout, `"state":"unresolved"`)
	assert.Equal(t, 1, vcode)
	assert.Equal(t, "pending-request.json: not a regular file\n"+
		`"x\nok: forged\x1b[2J": unexpected file in the run directory`+"\n"+
		"pending-request.json: unfinished request: its worker died in flight (no lock or lease holds the marker), so its outcome is unknown: unresolved until `journal review --pending`\n", vout)
}

// TestSignalsEndPromptly: a signal cancels the command's context; a
// command that returns is waited for (its exit code), one that does not is
// abandoned after the grace with 128+signal.
func TestSignalsEndPromptly(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	var errb bytes.Buffer
	start := time.Now()
	code := runWithSignals(sigs, 100*time.Millisecond, &errb, func(ctx context.Context) int {
		select {} // a command that ignores its context
	})
	assert.Equal(t, 143, code)
	assert.Less(t, time.Since(start), time.Second)
	assert.Equal(t, "readrecovery: terminated: stopped without waiting for the command\n", errb.String())

	sigs <- os.Interrupt
	code = runWithSignals(sigs, time.Minute, io.Discard, func(ctx context.Context) int {
		<-ctx.Done()
		return 0 // the fake server shuts down and exits 0
	})
	assert.Equal(t, 0, code)

	code = runWithSignals(make(chan os.Signal), time.Minute, io.Discard, func(context.Context) int { return 3 })
	assert.Equal(t, 3, code)
}

// plan-ids: `journal plan DIR --ids FILE` prints each planned
// file's ID (escaped) beside its digest and class; a digest no line names
// shows "?"; the JSON carries the ID. The exit code is the run's state.
func TestJournalPlanIDs(t *testing.T) {
	dir := partsRun(t)
	a, b, c := journal.PlannedFile{ID: "a.bin"}.Digest(), journal.PlannedFile{ID: "b.bin"}.Digest(), journal.PlannedFile{ID: "c.bin"}.Digest()
	ids := filepath.Join(t.TempDir(), "ids.txt")
	require.NoError(t, os.WriteFile(ids, []byte("a.bin\r\nc.bin\nnot-planned\x1b[2J\n\n"), 0o600))
	at(t, time.Now())
	code, stdout, stderr := runJ("plan", dir, "--ids", ids)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 7, stdout)
	assert.Regexp(t, `^CLASS +DECISION +ID +FILE +REASON$`, lines[1])
	rows := map[string]string{}
	for _, l := range lines[2:5] {
		f := strings.Fields(l)
		rows[f[3]] = f[0] + " " + f[2]
	}
	assert.Equal(t, map[string]string{a: "unknown a.bin", b: "acked ?", c: "never-attempted c.bin"}, rows)
	assert.Equal(t, "--ids named 2 of 3 files (? marks a digest no line of "+ids+" names)", lines[6])

	code, stdout, _ = runJ("plan", "--json", "--ids", ids, dir)
	require.Equal(t, 0, code)
	var pj planJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &pj))
	got := map[string]string{}
	for _, f := range pj.FileBatch.Plan.Files {
		got[f.FileDigest] = f.ID
	}
	assert.Equal(t, map[string]string{a: "a.bin", b: "", c: "c.bin"}, got)

	// An ID with a control character is escaped.
	dir2 := filepath.Join(t.TempDir(), "run")
	_, err := journal.Open(dir2, journal.WithPlan([]journal.PlannedFile{{ID: "x\x1b[2J"}}))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(ids, []byte("x\x1b[2J\n"), 0o600))
	code, stdout, _ = runJ("plan", dir2, "--ids", ids)
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, `"x\x1b[2J"`)
	assert.NotContains(t, stdout, "\x1b")

	code, _, stderr = runJ("plan", dir, "--ids", filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "plan --ids")
}

// pending-review: `journal review DIR --pending --note TEXT
// [--not-before UNIX]` resolves a killed worker's marker: before it,
// status and a --file review are refused (exit 4); after it, the run is
// waiting (exit 3) for 30 s or until --not-before, the file is unknown and
// a --file review decides it. verify is clean and lists a killed writer's
// leftover temporary file apart.
func TestJournalReviewPendingCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	plan := []journal.PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}}
	_, err := journal.Open(dir, journal.WithPlan(plan))
	require.NoError(t, err)
	w := startWorker(t, dir, "a.bin") // a worker in flight, killed below
	leftover := filepath.Join(dir, "receipt-"+strings.TrimPrefix(journal.PlannedFile{ID: "a.bin"}.Digest(), "sha256:")[:32]+".json.tmp-0123456789abcdef")
	require.NoError(t, os.WriteFile(leftover, []byte("{"), 0o600))
	old := time.Now().Add(-2 * time.Minute)
	require.NoError(t, os.Chtimes(leftover, old, old))

	// (the real time: reviews record when they were made)
	code, _, _ := runJ("status", dir)
	require.Equal(t, 4, code)
	code, _, stderr := runJ("review", dir, "--file", "a.bin", "--decision", "reupload")
	require.Equal(t, 4, code, stderr)
	for _, args := range [][]string{
		{"review", dir, "--pending"},
		{"review", dir, "--pending", "--note", "x", "--file", "a.bin"},
		{"review", dir, "--pending", "--note", "x", "--not-before", "-1"},
		{"review", dir, "--file", "a.bin", "--decision", "skip", "--not-before", "5"},
	} {
		code, _, stderr = runJ(args...)
		assert.Equal(t, 2, code, "%q", args)
		assert.Contains(t, stderr, "usage:", "%q", args)
	}
	before := dirFiles(t, dir)
	code, _, stderr = runJ("review", dir, "--pending", "--note", "too early")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "pending-request.json is held by its worker (a request in flight): nothing written")
	assert.Equal(t, before, dirFiles(t, dir))
	w.kill()

	notBefore := time.Now().Unix() + 120
	code, stdout, stderr := runJ("review", dir, "--pending", "--note", "worker 2 killed", "--not-before", strconv.FormatInt(notBefore, 10))
	require.Equal(t, 3, code, stderr)
	assert.Regexp(t, `^reviewed pending-request\.json sha256:[0-9a-f]{64}: pending by \S+ at \d+ \(review-0001\.json\); file `+
		journal.PlannedFile{ID: "a.bin"}.Digest()+` \(now unknown: review it with --file and --decision\); the run waits until not_before_utc `+
		strconv.FormatInt(notBefore, 10)+"\n$", stdout)
	code, stdout, _ = runJ("status", dir)
	assert.Equal(t, 3, code, stdout)
	code, stdout, _ = runJ("verify", dir)
	assert.Equal(t, 0, code, stdout)
	assert.Regexp(t, `^leftover `+regexp.QuoteMeta(filepath.Base(leftover))+`: temporary file of an interrupted write, 1\d\d s old: `+
		`not a record \(the marker or the missing manifest it left shows the interruption\)\n`+
		`ok: 2 planned files, 0 backoff entries, 0 receipts, 0 part receipts, 1 reviews\n$`, stdout)

	code, stdout, stderr = runJ("review", dir, "--file", "a.bin", "--decision", "skip", "--note", "committed by hand")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "(review-0002.json)")
	code, _, _ = runJ("review", dir, "--pending", "--note", "again")
	assert.Equal(t, 1, code, "no marker: nothing to resolve")
}

// restriction-review: `journal review DIR --restriction ENTRY --not-before
// UNIX --note TEXT` bounds an entry without timing: exit 3, then status
// waits until the given time; flags that do not fit are usage errors.
func TestJournalReviewRestrictionCommand(t *testing.T) {
	dir := fixture(t, readrecovery.RetryAfter{Kind: readrecovery.RetryAfterOverlong}, nil, false)
	// The commands ask about the real time here: the review records the
	// time it was made, and a status pinned before it (even by a second)
	// is a clock regression (unresolved), as it should be.
	code, _, _ := runJ("status", dir)
	require.Equal(t, 4, code)
	for _, args := range [][]string{
		{"review", dir, "--restriction", "backoff-0001.json", "--note", "x"},
		{"review", dir, "--restriction", "backoff-0001.json", "--not-before", "99", "--note", "x", "--file", "a"},
		{"review", dir, "--restriction", "backoff-0001.json", "--not-before", "99"},
	} {
		code, _, stderr := runJ(args...)
		assert.Equal(t, 2, code, "%q", args)
		assert.Contains(t, stderr, "usage:")
	}
	nb := time.Now().Unix() + 300
	code, stdout, stderr := runJ("review", dir, "--restriction", "backoff-0001.json", "--not-before", strconv.FormatInt(nb, 10), "--note", "support: 5 min")
	require.Equal(t, 3, code, stderr)
	assert.Regexp(t, `^reviewed backoff-0001\.json: restriction by \S+ at \d+ \(review-0001\.json\); the run waits until not_before_utc `+strconv.FormatInt(nb, 10)+"\n$", stdout)
	code, stdout, _ = runJ("status", dir)
	assert.Equal(t, 3, code, stdout)
	assert.Contains(t, stdout, `"not_before_utc":`+strconv.FormatInt(nb, 10))
	code, _, stderr = runJ("review", dir, "--restriction", "backoff-0001.json", "--not-before", strconv.FormatInt(nb, 10), "--note", "again")
	assert.Equal(t, 1, code, stderr)
}

// parallel-dead-worker (R83): the journal commands on a parallel run's
// root. A live worker's marker in one shard (a process that holds it) is
// a request in flight however old (status clear, exit 0, a minute later
// too; plan shows its file in-flight; verify names it with its shard as in
// flight); `review --pending`, with or without --marker, refuses it (exit
// 1, naming it, writing nothing). Once the worker is SIGKILLed the very
// next status is unresolved (exit 4, naming the shard's dead marker);
// `--pending --marker shard-KK/pending-request.json` records the review in
// that shard (exit 3: the run waits), after which verify is clean and the
// file is reviewed as usual, in its shard.
func TestJournalParallelRunCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	plan := []journal.PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}, {ID: "c.bin"}, {ID: "d.bin"}}
	j, err := journal.Open(dir, journal.WithPlan(plan), journal.WithParallel(2))
	require.NoError(t, err)
	var done, dead string
	for _, f := range plan {
		switch {
		case done == "" && j.Shard(f.ID) == 1:
			done = f.ID
		case dead == "" && j.Shard(f.ID) == 2:
			dead = f.ID
		}
	}
	require.True(t, done != "" && dead != "", "a file of each shard")
	req := func(id string) readrecovery.JournalRequest {
		u, _ := url.Parse("https://acct.blob.core.windows.net/c/" + id)
		return readrecovery.JournalRequest{Method: "PUT", URLDigest: redact.URLDigest(u), Attempt: 1}
	}
	ctx := journal.WithUpload(context.Background(), done)
	require.NoError(t, j.Begin(ctx, req(done)))
	require.NoError(t, j.Complete(ctx, req(done), readrecovery.JournalOutcome{StatusCode: 201}))
	w := startWorker(t, dir, dead) // its request in flight, in another process

	now := time.Now()
	at(t, now)
	code, stdout, _ := runJ("status", dir)
	assert.Equal(t, 0, code, stdout)
	assert.Contains(t, stdout, `"state":"clear"`)
	assert.Contains(t, stdout, "1 request(s) in flight")
	code, stdout, _ = runJ("plan", "--json", dir)
	assert.Equal(t, 0, code, stdout)
	var pj planJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &pj))
	classes := map[string]string{}
	for _, f := range pj.FileBatch.Plan.Files {
		classes[f.FileDigest] = string(f.Class)
	}
	assert.Equal(t, "in-flight", classes[journal.PlannedFile{ID: dead}.Digest()], stdout)
	assert.Equal(t, "acked", classes[journal.PlannedFile{ID: done}.Digest()], stdout)
	code, stdout, _ = runJ("verify", dir)
	assert.Equal(t, 1, code)
	assert.Equal(t, "shard-02/pending-request.json: a request in flight: its worker holds the marker live (unresolved until it ends; never reviewed while live)\n", stdout)

	at(t, now.Add(time.Minute)) // a minute, or a clock a minute fast: still in flight
	code, stdout, _ = runJ("status", dir)
	assert.Equal(t, 0, code, stdout)
	assert.Contains(t, stdout, "1 request(s) in flight")
	before := dirFiles(t, dir)
	code, _, stderr := runJ("review", dir, "--pending", "--note", "killed")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "every marker is held by its live worker: shard-02/pending-request.json")
	code, _, stderr = runJ("review", dir, "--pending", "--marker", "shard-02/pending-request.json", "--note", "killed")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "held by its worker (a request in flight): nothing written")
	assert.Equal(t, before, dirFiles(t, dir), "a refused review writes nothing")

	w.kill()
	code, stdout, _ = runJ("status", dir)
	assert.Equal(t, 4, code, stdout)
	assert.Contains(t, stdout, `"reason":"shard-02/pending-request.json: unfinished request: its worker died in flight (no lock or lease holds the marker)`)
	code, _, stderr = runJ("review", dir, "--marker", "shard-02/pending-request.json", "--note", "killed")
	assert.Equal(t, 2, code, stderr)
	code, _, stderr = runJ("review", dir, "--pending", "--marker", "shard-03/pending-request.json", "--note", "killed")
	assert.Equal(t, 1, code, stderr)
	code, stdout, stderr = runJ("review", dir, "--pending", "--marker", "shard-02/pending-request.json", "--note", "worker 2 killed")
	require.Equal(t, 3, code, stderr)
	assert.Regexp(t, `^reviewed shard-02/pending-request\.json sha256:[0-9a-f]{64}: pending by \S+ at \d+ \(shard-02/review-0001\.json\); file `+
		journal.PlannedFile{ID: dead}.Digest()+` \(now unknown: review it with --file and --decision\); the run waits until not_before_utc \d+\n$`, stdout)
	at(t, time.Now())
	code, stdout, _ = runJ("status", dir)
	assert.Equal(t, 3, code, stdout)
	assert.Contains(t, stdout, `"reason":"shard-02/review-0001.json: pending review`)
	code, stdout, _ = runJ("verify", dir)
	assert.Equal(t, 0, code, stdout)
	assert.Equal(t, "ok: 4 planned files, 0 backoff entries, 1 receipts, 0 part receipts, 1 reviews\n", stdout)
	code, stdout, stderr = runJ("review", dir, "--file", dead, "--decision", "skip", "--note", "sent by hand")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "(shard-02/review-0002.json)")
}

// planJSON is the JSON that `journal plan --json` prints.
type planJSON struct {
	FileBatch struct {
		Backoff journal.Status `json:"backoff"`
		Plan    struct {
			Complete bool           `json:"complete"`
			Counts   map[string]int `json:"counts"`
			Files    []struct {
				ID         string `json:"id,omitempty"`
				FileDigest string `json:"file_digest"`
				Class      string `json:"class"`
				Decision   string `json:"decision,omitempty"`
				Reason     string `json:"reason"`
			} `json:"files"`
		} `json:"plan"`
	} `json:"file_batch"`
}
