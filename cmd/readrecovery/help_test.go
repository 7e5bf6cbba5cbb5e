package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal"
)

// TestHostileArguments: a help word is taken only where a command or a
// flag is expected. As a flag's value, a DIR or an ID it is that value: the
// command runs (or fails) with its documented exit code and never prints
// the usage as if it had done its work.
func TestHostileArguments(t *testing.T) {
	t.Chdir(t.TempDir()) // no file named help here
	dir := partsRun(t)
	at(t, time.Now())
	a := journal.PlannedFile{ID: "a.bin"}.Digest()
	later := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	tests := []struct {
		args   []string
		code   int
		stdout string // a prefix of stdout; "" for none
		stderr string // a part of stderr
	}{
		// The seven of issue 30.
		{[]string{"journal", "review", dir, "--file", "a.bin", "--decision", "skip", "--note", "help"}, 0, "reviewed " + a + ": skip by ", ""},
		{[]string{"journal", "review", dir, "--pending", "--note", "help"}, 1, "", "readrecovery: journal: review refused: no pending marker: nothing to resolve\n"},
		{[]string{"journal", "plan", dir, "--ids", "help"}, 2, "", "readrecovery: journal plan --ids: open help: no such file or directory\n"},
		{[]string{"journal", "status", "help"}, 2, "", "readrecovery: no journal run: "},
		{[]string{"journal", "verify", "help"}, 2, "", "readrecovery: no journal run: "},
		{[]string{"journal", "plan", "help"}, 2, "", "readrecovery: no journal run: "},
		{[]string{"journal", "review", "help", "--file", "a.bin", "--decision", "skip"}, 2, "", "readrecovery: no journal run: "},
		// More of the same kind.
		{[]string{"journal", "review", dir, "--file", "help", "--decision", "skip"}, 1, "", "readrecovery: "},
		{[]string{"journal", "review", dir, "--file", "--help", "--decision", "skip"}, 1, "", "readrecovery: "},
		{[]string{"journal", "review", dir, "--restriction", "help", "--not-before", later, "--note", "n"}, 1, "", "readrecovery: "},
		{[]string{"journal", "review", dir, "--pending", "--marker", "-h", "--note", "n"}, 1, "", "readrecovery: "},
		{[]string{"journal", "review", dir, "--file", "a.bin", "--decision", "help"}, 2, "", "review needs --decision reupload or --decision skip"},
		{[]string{"fakeserver", "--script", "help"}, 2, "", "readrecovery: fakeserver: --script open help: no such file or directory\n"},
		{[]string{"fakeserver", "--seed", "-h"}, 2, "", "readrecovery: fakeserver: --seed open -h: no such file or directory\n"},
		{[]string{"demo", "--otlp", "help"}, 2, "", `--otlp wants an http(s) URL such as http://localhost:4318, not "help"`},
	}
	for _, tc := range tests {
		var out, errb bytes.Buffer
		code := run(t.Context(), tc.args, &out, &errb)
		assert.Equal(t, tc.code, code, "%q: %s", tc.args, errb.String())
		assert.NotContains(t, out.String(), "usage", "%q", tc.args)
		if tc.stdout == "" {
			assert.Empty(t, out.String(), "%q", tc.args)
		} else {
			assert.True(t, strings.HasPrefix(out.String(), tc.stdout), "%q: %s", tc.args, out.String())
		}
		if tc.stderr == "" {
			assert.Empty(t, errb.String(), "%q", tc.args)
		} else {
			assert.Contains(t, errb.String(), tc.stderr, "%q", tc.args)
		}
	}
	// The first case recorded the note "help".
	j, err := journal.Open(dir, journal.Existing())
	require.NoError(t, err)
	plan, err := j.RecordedPlan(time.Now())
	require.NoError(t, err)
	assert.Equal(t, 1, plan.Count(journal.FileReviewed), "a.bin reviewed once, with the note help")

	// Where a command or a flag is expected, a help word prints the
	// command's usage on stdout and exits 0.
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"-help"}, {"help"},
		{"fakeserver", "--help"}, {"fakeserver", "-h"}, {"fakeserver", "help"}, {"fakeserver", "--addr", "127.0.0.1:0", "--help"},
		{"demo", "--help"}, {"demo", "-h"}, {"demo", "help"}, {"demo", "--json", "--help"},
		{"journal", "--help"}, {"journal", "-h"}, {"journal", "help"},
		{"journal", "status", "--help"}, {"journal", "status", dir, "-h"}, {"journal", "verify", "--help"},
		{"journal", "plan", "--help"}, {"journal", "plan", dir, "--json", "-h"},
		{"journal", "review", "--help"}, {"journal", "review", dir, "--pending", "--help"}, {"journal", "review", dir, "--note", "x", "-h"},
		{"version", "--help"}, {"version", "help"},
	} {
		var out, errb bytes.Buffer
		code := run(t.Context(), args, &out, &errb)
		assert.Equal(t, 0, code, "%q: %s", args, errb.String())
		assert.Contains(t, out.String(), "usage", "%q", args)
		assert.Empty(t, errb.String(), "%q", args)
	}
}

// TestUsageListsEveryFlag: the top-level usage names every command and
// every flag each command defines.
func TestUsageListsEveryFlag(t *testing.T) {
	for _, cmd := range []string{"fakeserver", "demo"} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(t.Context(), []string{cmd, "--help"}, &out, &errb))
		// PrintDefaults lists each flag as "  -name ...".
		flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out.String(), -1)
		require.NotEmpty(t, flags, cmd)
		for _, f := range flags {
			assert.Contains(t, usage, "--"+f[1], "%s --%s", cmd, f[1])
		}
	}
	for _, f := range regexp.MustCompile(`--[a-z-]+`).FindAllString(journalUsage, -1) {
		assert.Contains(t, usage, f, "journal %s", f)
	}
	for _, line := range strings.Split(journalUsage, "\n") {
		if cmd, ok := strings.CutPrefix(line, "  readrecovery journal "); ok {
			assert.Contains(t, usage, "readrecovery journal "+strings.Fields(cmd)[0], line)
		}
	}
	for _, cmd := range []string{"fakeserver", "demo", "journal status", "journal verify", "journal plan", "journal review", "version"} {
		assert.Regexp(t, "readrecovery "+cmd+"[ \n]", usage, cmd)
	}
}

// TestRunNamedHelp: a run directory named help is a run (R96): status,
// --text, --watch, plan and verify read it and exit with its state's code
// (0 clear, 3 waiting, 4 unresolved), never print the usage as help.
func TestRunNamedHelp(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		dir    func(t *testing.T) string
		code   int
		state  string
		verify int
	}{
		{"clear", func(t *testing.T) string { return fixture(t, readrecovery.RetryAfter{}, nil, false) }, 0, "clear", 0},
		{"waiting", waitingRun, 3, "waiting", 0},
		{"unresolved", func(t *testing.T) string {
			return fixture(t, readrecovery.RetryAfter{Kind: readrecovery.RetryAfterOverlong}, nil, false)
		}, 4, "unresolved", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cwd := t.TempDir()
			require.NoError(t, os.Rename(tc.dir(t), filepath.Join(cwd, "help")))
			t.Chdir(cwd)
			at(t, now)
			for _, c := range []struct {
				args   []string
				code   int
				stdout string // a prefix of stdout
			}{
				{[]string{"journal", "status", "help"}, tc.code, `{"file_batch":{"backoff":{"state":"` + tc.state + `"`},
				{[]string{"journal", "status", "--text", "help"}, tc.code, "run: " + tc.state},
				{[]string{"journal", "status", "help", "--json"}, 2, ""}, // status has no --json: a usage error
				{[]string{"journal", "plan", "help"}, tc.code, "run: " + tc.state},
				{[]string{"journal", "plan", "--json", "help"}, tc.code, `{"file_batch":{"backoff":{"state":"` + tc.state + `"`},
				{[]string{"journal", "verify", "help"}, tc.verify, map[int]string{0: "ok: ", 1: "backoff-0001.json: "}[tc.verify]},
			} {
				var out, errb bytes.Buffer
				code := run(t.Context(), c.args, &out, &errb)
				assert.Equal(t, c.code, code, "%q: %s", c.args, errb.String())
				assert.NotContains(t, out.String(), "usage", "%q", c.args)
				assert.True(t, strings.HasPrefix(out.String(), c.stdout), "%q: %s", c.args, out.String())
			}
			if tc.code != 4 {
				return // --watch of a run with files left goes on until stopped (watch_test.go)
			}
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			code := run(ctx, []string{"journal", "status", "--watch", "help"}, &out, &errb)
			assert.Equal(t, tc.code, code, errb.String())
			assert.True(t, strings.HasPrefix(out.String(), "readrecovery journal status --watch help: "), out.String())
		})
	}
}
