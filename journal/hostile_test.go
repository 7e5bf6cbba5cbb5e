package journal

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery/internal/unixtime"

	"github.com/readrecovery/readrecovery"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// within runs f and fails the test, instead of hanging, when it has not
// returned after 5 s.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s hangs", what)
	}
}

// mkfifo makes a FIFO (mkfifo_unix_test.go); elsewhere it fails.
var mkfifo = func(string) error { return errors.ErrUnsupported }

// TestOnlyRegularFilesAreOpened: a FIFO, a symbolic link (to a FIFO,
// to /dev/zero, to a valid copy) or a directory under each journal name
// is a finding — the run is unresolved — and Open, Verify, Status, Admit,
// Begin and PlanContinuation all return at once.
func TestOnlyRegularFilesAreOpened(t *testing.T) {
	base := unknownRun(t)
	_, err := base.Review(context.Background(), "a.bin", DecisionSkip, "")
	require.NoError(t, err)
	record429(t, base, context.Background(), getReq(t), secs(1), timing(t0, 1))
	fileNames := names(t, base.Dir())
	kinds := map[string]func(t *testing.T, p string){
		"fifo": func(t *testing.T, p string) { require.NoError(t, mkfifo(p)) },
		"symlink to fifo": func(t *testing.T, p string) {
			f := filepath.Join(t.TempDir(), "fifo")
			require.NoError(t, mkfifo(f))
			require.NoError(t, os.Symlink(f, p))
		},
		"symlink to /dev/zero": func(t *testing.T, p string) { require.NoError(t, os.Symlink("/dev/zero", p)) },
		"symlink to a valid copy": func(t *testing.T, p string) {
			c := filepath.Join(t.TempDir(), "copy")
			b, err := os.ReadFile(filepath.Join(base.Dir(), filepath.Base(p)))
			if err != nil {
				b = []byte("{}")
			}
			require.NoError(t, os.WriteFile(c, b, 0o600))
			require.NoError(t, os.Symlink(c, p))
		},
		"directory": func(t *testing.T, p string) { require.NoError(t, os.Mkdir(p, 0o700)) },
	}
	for _, name := range append(fileNames, record.MarkerName) {
		for kind, make := range kinds {
			t.Run(name+"/"+kind, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "run")
				copyDir(t, base.Dir(), dir)
				p := filepath.Join(dir, name)
				_ = os.Remove(p)
				make(t, p)
				within(t, "the journal", func() {
					findings, err := verify(dir)
					require.NoError(t, err)
					require.Contains(t, findings, Finding{File: name, Problem: "not a regular file"})
					j, err := Open(dir, withClock(newFakeClock(t0.Add(time.Minute))))
					require.NoError(t, err)
					st := j.Status(t0.Add(time.Minute))
					require.Equal(t, Unresolved, st.State)
					require.ErrorIs(t, j.Admit(context.Background(), t0.Add(time.Minute)), ErrRestricted)
					require.ErrorIs(t, j.Begin(context.Background(), getReq(t)), ErrRestricted)
					c, err := j.PlanContinuation(plan3, NewApproval, t0.Add(time.Minute))
					if err == nil {
						require.Empty(t, c.Uploads())
					}
				})
			})
		}
	}
}

// TestNotAJournalRun: a directory holding files but no journal name is
// not a run: Open, OpenExisting and Verify refuse it with ErrNotRun and
// write nothing; a run that lost its manifest is still a (broken) run.
func TestNotAJournalRun(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "passwd"), []byte("root:x:0:0"), 0o644))
	_, err := Open(dir, Existing())
	require.ErrorIs(t, err, ErrNotRun)
	_, err = Open(dir)
	require.ErrorIs(t, err, ErrNotRun, "Open never writes a run into a foreign directory")
	_, err = verify(dir)
	require.ErrorIs(t, err, ErrNotRun)
	require.Equal(t, []string{"passwd"}, names(t, dir))
	require.Equal(t, 1, strings.Count(err.Error(), "journal:"), "no stutter: %s", err)

	j, _ := newRun(t)
	record429(t, j, context.Background(), getReq(t), secs(1), timing(t0, 1))
	require.NoError(t, os.Remove(filepath.Join(j.Dir(), record.ManifestName)))
	findings, err := verify(j.Dir())
	require.NoError(t, err)
	require.Contains(t, findings, Finding{File: record.ManifestName, Problem: "missing run manifest"})
}

// TestNamesAreEscaped: a file name with a newline or an escape
// sequence cannot forge a line of `journal verify` or reach the terminal.
func TestNamesAreEscaped(t *testing.T) {
	j, _ := newRun(t)
	for _, n := range []string{"x\nrun.json: ok", "\x1b[2J\x1b[31mred", "sp ace", `q"uote`} {
		require.NoError(t, os.WriteFile(filepath.Join(j.Dir(), n), nil, 0o600))
	}
	findings, err := verify(j.Dir())
	require.NoError(t, err)
	var lines []string
	for _, f := range findings {
		s := f.String()
		require.NotContains(t, s, "\n")
		require.NotContains(t, s, "\x1b")
		lines = append(lines, s)
	}
	assert.Equal(t, []string{
		`"\x1b[2J\x1b[31mred": unexpected file in the run directory`,
		`"q\"uote": unexpected file in the run directory`,
		`"sp ace": unexpected file in the run directory`,
		`"x\nrun.json: ok": unexpected file in the run directory`,
	}, lines)
	st := reopen(t, j.Dir(), t0).Status(t0)
	assert.Equal(t, lines[0], st.Reason)
}

// TestRemainingSecondsSaturate: a 200000000000 s Retry-After keeps a
// positive, exact remaining_seconds (it overflowed to -9223372035).
func TestRemainingSecondsSaturate(t *testing.T) {
	j, _ := newRun(t)
	const huge = 200_000_000_000
	record429(t, j, context.Background(), getReq(t), secs(huge), timing(t0, huge))
	now := t0.Add(30*time.Second + 500*time.Millisecond)
	st := j.Status(now)
	require.Equal(t, Waiting, st.State)
	require.Equal(t, int64(huge-30), st.RemainingSeconds)
	b, err := st.CommandJSON()
	require.NoError(t, err)
	require.Contains(t, string(b), `"remaining_seconds":199999999970`)
	for _, tc := range []struct {
		nb   int64
		now  time.Time
		want int64
	}{
		{10, time.Unix(9, 500_000_000), 1},
		{10, time.Unix(9, 0), 1},
		{unixtime.Max, time.Unix(-unixtime.Max, 0), 2 * unixtime.Max},
		{1 << 62, time.Unix(-(1 << 62), 0), 1<<63 - 1},
		{10, time.Unix(20, 0), 0},
	} {
		assert.Equal(t, tc.want, remainingSeconds(tc.nb, tc.now), "%d at %v", tc.nb, tc.now.Unix())
	}
}

// TestMessagesDoNotStutter: no error of the journal says "journal:"
// twice.
func TestMessagesDoNotStutter(t *testing.T) {
	j := unknownRun(t)
	missing := filepath.Join(t.TempDir(), "none")
	_, errMissing := Open(missing, Existing())
	_, errPlan := Open(j.Dir(), WithPlan([]PlannedFile{{ID: "x"}}))
	errReplay := j.Begin(WithUpload(context.Background(), "c.bin"), putReq(t))
	errUnknown := j.Begin(WithUpload(context.Background(), "a.bin"), putReq(t))
	_, errReview := j.Review(context.Background(), "c.bin", DecisionSkip, "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errCtx := j.Begin(ctx, getReq(t))
	record429(t, j, context.Background(), getReq(t), secs(5), timing(t0, 5))
	errWaiting := j.Admit(context.Background(), t0)
	for i, err := range []error{errMissing, errPlan, errReplay, errUnknown, errReview, errCtx, errWaiting} {
		require.Error(t, err, "%d", i)
		assert.LessOrEqual(t, strings.Count(err.Error(), "journal:"), 1, "%d: %s", i, err)
		assert.False(t, errors.Is(err, readrecovery.ErrReplayRefused) && errors.Is(err, fs.ErrNotExist))
	}
}
