//go:build unix

package journal

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTempNames: only the durable write's own pattern (a record name,
// ".tmp-", 16 lower-case hex digits) is a temporary file.
func TestTempNames(t *testing.T) {
	rec := receiptName(record.FileDigest("a.bin"))
	for _, tc := range []struct {
		name, final string
	}{
		{record.TempName(rec), rec},
		{record.TempName("backoff-0001.json"), "backoff-0001.json"},
		{"review-0002.json.tmp-0123456789abcdef", "review-0002.json"},
		{"run.json.tmp-0123456789abcdef", "run.json"},
		{"backoff-0001.json.tmp", ""},                                         // the old pattern
		{"backoff-0001.json.tmp-0123456789ABCDEF", ""},                        // upper-case hex
		{"backoff-0001.json.tmp-0123456789abcde", ""},                         // 15 digits
		{"pending-request.json.tmp-0123456789abcdef", "pending-request.json"}, // the marker, written locked (R83)
		{"notes.txt.tmp-0123456789abcdef", ""},                                // not a record
		{".tmp-0123456789abcdef", ""},
	} {
		final, ok := record.ParseTempName(tc.name)
		assert.Equal(t, tc.final, final, tc.name)
		assert.Equal(t, tc.final != "", ok, tc.name)
	}
	assert.NotEqual(t, record.TempName(rec), record.TempName(rec), "each write has its own temporary name")
}

// TestTempFilesAreNotFindings (issue 23): another writer's temporary file
// is never a finding, whatever its age; one older than staleTemp is a
// leftover that Verify and Inspect report apart. Any other temporary-like
// name, or a temporary name that is not a regular file, stays a finding.
func TestTempFilesAreNotFindings(t *testing.T) {
	j, _ := newRun(t)
	dir := j.Dir()
	tmp := filepath.Join(dir, record.TempName(receiptName(record.FileDigest("a.bin"))))
	require.NoError(t, os.WriteFile(tmp, []byte(`{"half":`), 0o600))

	require.NoError(t, j.Admit(context.Background(), time.Now()), "a write in progress blocks nobody")
	require.Equal(t, Clear, reopen(t, dir, time.Now()).Status(time.Now()).State)
	sum, err := inspectDir(dir)
	require.NoError(t, err)
	assert.Empty(t, sum.Findings)
	assert.Empty(t, sum.Leftovers, "a young temporary file is a write in progress")

	old := time.Now().Add(-2 * runread.StaleTemp)
	require.NoError(t, os.Chtimes(tmp, old, old))
	sum, err = inspectDir(dir)
	require.NoError(t, err)
	assert.Empty(t, sum.Findings, "a leftover is not a finding: the marker it left is")
	require.Len(t, sum.Leftovers, 1)
	assert.Equal(t, filepath.Base(tmp), sum.Leftovers[0].File)
	assert.Contains(t, sum.Leftovers[0].Problem, "temporary file of an interrupted write, 120 s old")
	require.Equal(t, Clear, reopen(t, dir, time.Now()).Status(time.Now()).State)

	for _, tc := range []struct{ name, problem string }{
		{"receipt-x.json.tmp-0123456789abcdef", "unexpected file in the run directory"},
		{"backoff-0001.json.tmp", "unexpected file in the run directory"},
	} {
		p := filepath.Join(dir, tc.name)
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
		fs, err := verify(dir)
		require.NoError(t, err)
		assert.Equal(t, []Finding{{File: tc.name, Problem: tc.problem}}, fs)
		require.NoError(t, os.Remove(p))
	}
	link := filepath.Join(dir, record.TempName("backoff-0001.json"))
	require.NoError(t, os.Symlink("/dev/zero", link))
	fs, err := verify(dir)
	require.NoError(t, err)
	assert.Equal(t, []Finding{{File: filepath.Base(link), Problem: "not a regular file"}}, fs)
}

// killFS is the real file system that kills its own process (SIGKILL)
// just before the link of a record (the marker's and the begun head's
// links go through):
// the temporary file is written, fsynced and closed, the record not yet
// there.
type killFS struct{ fsys.OS }

func (k killFS) Link(oldname, newname string) error {
	if _, head := record.ParseHeadName(filepath.Base(newname)); head || filepath.Base(newname) == record.MarkerName {
		return k.OS.Link(oldname, newname)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
	return errors.New("not killed")
}

// TestKilledWriterProcess is not a test of its own: run by
// TestKilledWritersLeftoverIsReported, it uploads a.bin and is killed
// before its receipt's link.
func TestKilledWriterProcess(t *testing.T) {
	dir := os.Getenv("RR_JOURNAL_KILLED_WRITER_DIR")
	if dir == "" {
		t.Skip("a helper process")
	}
	j, err := Open(dir, Existing(), withFS(killFS{}), WithPlan(plan3))
	require.NoError(t, err)
	ctx := WithUpload(context.Background(), "a.bin")
	require.NoError(t, j.Begin(ctx, putReq(t)))
	_ = j.Complete(ctx, putReq(t), readrecovery.JournalOutcome{StatusCode: 201, RequestID: "r1"})
	t.Fatal("the process was not killed")
}

// TestKilledWritersLeftoverIsReported (issue 23): a writer process killed
// between its temporary file and the link leaves the marker (the run is
// unresolved, the file unknown) and its temporary file, which Verify
// reports once it is older than staleTemp.
func TestKilledWritersLeftoverIsReported(t *testing.T) {
	j, _ := newRun(t)
	dir := j.Dir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriterProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RR_JOURNAL_KILLED_WRITER_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "%s", out)

	var tmp string
	for _, n := range names(t, dir) {
		if _, ok := record.ParseTempName(n); ok {
			tmp = n
		}
	}
	require.True(t, strings.HasPrefix(tmp, receiptName(record.FileDigest("a.bin"))+".tmp-"), "names %v", names(t, dir))
	assert.Equal(t, []string{"head-0001.json", "pending-request.json", "plan.json", tmp, "run.json"}, allNames(t, dir))
	st := reopen(t, dir, time.Now()).Status(time.Now())
	assert.Equal(t, Unresolved, st.State)
	assert.Equal(t, "pending-request.json: "+runread.PendingProblem, st.Reason)

	old := time.Now().Add(-runread.StaleTemp - time.Second)
	require.NoError(t, os.Chtimes(filepath.Join(dir, tmp), old, old))
	sum, err := inspectDir(dir)
	require.NoError(t, err)
	assert.Equal(t, []Finding{{File: record.MarkerName, Problem: runread.PendingProblem}}, sum.Findings)
	require.Len(t, sum.Leftovers, 1)
	assert.Equal(t, tmp, sum.Leftovers[0].File)
}
