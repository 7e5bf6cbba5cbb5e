//go:build unix

package journal_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal"
	"github.com/readrecovery/readrecovery/journal/journalcmd"
	"github.com/stretchr/testify/require"
)

var fifoPlan = []journal.PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}, {ID: "c.bin"}}

// within runs f and fails the test, instead of hanging, when f has not
// returned after 5 s (R85: nothing blocks on a FIFO).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked on a FIFO (still running after 5 s)", what)
	}
}

// fifoCommand is `journal` over directories, as cmd/readrecovery runs it.
func fifoCommand() *journalcmd.Command {
	return &journalcmd.Command{
		Prog: "readrecovery", Sub: "journal ", Arg: "DIR", Usage: "usage\n",
		Open: func(_ context.Context, dir string) (*journal.Journal, error) {
			return journal.Open(dir, journal.Existing())
		},
		Inspect: func(ctx context.Context, dir string) (journal.Summary, error) {
			return journal.InspectStore(ctx, journal.DirStore(dir))
		},
	}
}

// runCommands runs every read-only journal command on dir and returns
// their exit codes and stderr.
func runCommands(t *testing.T, dir string) (codes []int, stderr string) {
	t.Helper()
	var errb bytes.Buffer
	for _, args := range [][]string{{"status", dir}, {"verify", dir}, {"plan", dir}} {
		within(t, "journal "+args[0], func() {
			codes = append(codes, fifoCommand().Run(context.Background(), args, &bytes.Buffer{}, &errb))
		})
	}
	return codes, errb.String()
}

// TestFIFORunDirectory: a FIFO where the run directory should be is a
// clear error of journal.Open (with and without Existing), journal.OpenStore and journal.InspectStore, never a
// hang and never a new run (R85).
func TestFIFORunDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run\nx")
	require.NoError(t, syscall.Mkfifo(dir, 0o600))
	for name, open := range map[string]func() error{
		"Open": func() error { _, err := journal.Open(dir, journal.WithPlan(fifoPlan)); return err },
		"Open+shards": func() error {
			_, err := journal.Open(dir, journal.WithPlan(fifoPlan), journal.WithParallel(2))
			return err
		},
		"OpenExisting": func() error { _, err := journal.Open(dir, journal.Existing()); return err },
		"OpenStore":    func() error { _, err := journal.OpenStore(context.Background(), journal.DirStore(dir)); return err },
		"InspectStore": func() error { _, err := journal.InspectStore(context.Background(), journal.DirStore(dir)); return err },
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			within(t, name, func() { err = open() })
			require.ErrorIs(t, err, journal.ErrNotRun)
			require.Contains(t, err.Error(), `run\nx`)
			require.Contains(t, err.Error(), "not a directory")
			info, lerr := os.Lstat(dir)
			require.NoError(t, lerr)
			require.Equal(t, os.ModeNamedPipe, info.Mode().Type(), "left as it was")
		})
	}
	codes, stderr := runCommands(t, dir)
	require.Equal(t, []int{2, 2, 2}, codes, stderr)
}

// TestFIFOShardAndRecord: a FIFO as a shard directory or as a record file
// makes the run unresolved with a reason naming it, for every opener and
// command, Admit refuses it (RestrictedError), and nothing blocks (R85).
func TestFIFOShardAndRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shards int
		fifo   string // replaced by a FIFO, relative to the run
		reason string
	}{
		{"shard directory", 2, "shard-02", "shard-02"},
		{"record in a shard", 2, "shard-01/plan.json", "shard-01/plan.json: not a regular file"},
		{"root plan", 2, "plan.json", "plan.json: not a regular file"},
		{"record", 0, "plan.json", "plan.json: not a regular file"},
		{"marker", 0, "pending-request.json", "pending-request.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			opts := []journal.Option{journal.WithPlan(fifoPlan)}
			if tc.shards > 0 {
				opts = append(opts, journal.WithParallel(tc.shards))
			}
			_, err := journal.Open(dir, opts...)
			require.NoError(t, err)
			p := filepath.Join(dir, tc.fifo)
			require.NoError(t, os.RemoveAll(p))
			require.NoError(t, syscall.Mkfifo(p, 0o600))
			for name, open := range map[string]func() (*journal.Journal, error){
				"Open":         func() (*journal.Journal, error) { return journal.Open(dir, opts...) },
				"OpenExisting": func() (*journal.Journal, error) { return journal.Open(dir, journal.Existing()) },
				"OpenStore": func() (*journal.Journal, error) {
					return journal.OpenStore(context.Background(), journal.DirStore(dir), opts...)
				},
			} {
				var j *journal.Journal
				within(t, name, func() { j, err = open() })
				require.NoError(t, err, name)
				st := j.Status(time.Now())
				require.Equal(t, journal.Unresolved, st.State, name)
				require.Contains(t, st.Reason, tc.reason, name)
				var re *journal.RestrictedError
				within(t, name+" Admit", func() { err = j.Admit(context.Background(), time.Now()) })
				require.ErrorAs(t, err, &re, name)
				require.Equal(t, journal.Unresolved, re.Status.State, name)
			}
			var sum journal.Summary
			within(t, "InspectStore", func() { sum, err = journal.InspectStore(context.Background(), journal.DirStore(dir)) })
			require.NoError(t, err)
			var found []string
			for _, f := range sum.Findings {
				found = append(found, f.String())
			}
			require.Contains(t, strings.Join(found, "\n"), tc.reason)
			codes, stderr := runCommands(t, dir)
			require.Equal(t, []int{4, 1, 4}, codes, stderr)
		})
	}
}
