package journal

import (
	"context"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/runread"

	"github.com/readrecovery/readrecovery/journal/internal/store"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/internal/clock"
	"github.com/readrecovery/readrecovery/internal/redact"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
	"github.com/stretchr/testify/require"
)

// t0 is the fixed time of the tests: 2023-11-14T22:13:20Z.
var t0 = time.Unix(1_700_000_000, 0).UTC()

// fakeClock is a settable clock.Clock; it never sleeps.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	panic("the journal never sleeps")
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	panic("the journal never schedules")
}

// secretURL is an upload URL with a SAS signature that must never reach a
// journal file (nothing-secret-leaves).
const secretURL = "https://acct.file.core.windows.net/share/dir/file-1.bin?sv=2024&sig=SECRETSIG"

func urlDigest(_ testing.TB, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	return redact.URLDigest(u)
}

func putReq(t testing.TB) readrecovery.JournalRequest {
	return readrecovery.JournalRequest{Method: "PUT", URLDigest: urlDigest(t, secretURL), Attempt: 1}
}

func getReq(t testing.TB) readrecovery.JournalRequest {
	return readrecovery.JournalRequest{Method: "GET", URLDigest: urlDigest(t, "https://acct.file.core.windows.net/share?comp=list"), Attempt: 1}
}

// timing returns the RetryAfterTiming of a delay received at rcv.
func timing(rcv time.Time, delay int64) *readrecovery.RetryAfterTiming {
	return &readrecovery.RetryAfterTiming{ReceivedAtUTC: rcv.Unix(), NotBeforeUTC: rcv.Unix() + delay, ServerDelaySeconds: delay}
}

func secs(n int64) readrecovery.RetryAfter {
	return readrecovery.RetryAfter{Kind: readrecovery.RetryAfterSeconds, Value: n}
}

var overlong = readrecovery.RetryAfter{Kind: readrecovery.RetryAfterOverlong}

func out429(id string) readrecovery.JournalOutcome {
	return readrecovery.JournalOutcome{StatusCode: 429, RequestID: id}
}

// plan3 is a plan of three files.
var plan3 = []PlannedFile{{ID: "a.bin"}, {ID: "b.bin"}, {ID: "c.bin"}}

// newRun creates a fresh run in a new temporary directory with a fake clock
// at t0 and plan3.
func newRun(t testing.TB, opts ...Option) (*Journal, *fakeClock) {
	t.Helper()
	clk := newFakeClock(t0)
	dir := filepath.Join(t.TempDir(), "run")
	j, err := Open(dir, append([]Option{withClock(clk), WithPlan(plan3)}, opts...)...)
	require.NoError(t, err)
	return j, clk
}

// reopen opens dir again with the real file system and a fake clock at now.
func reopen(t testing.TB, dir string, now time.Time) *Journal {
	t.Helper()
	j, err := Open(dir, Existing(), withClock(newFakeClock(now)))
	require.NoError(t, err)
	return j
}

// record429 runs Begin and Backoff for one request that met 429.
func record429(t testing.TB, j *Journal, ctx context.Context, req readrecovery.JournalRequest, ra readrecovery.RetryAfter, tm *readrecovery.RetryAfterTiming) string {
	t.Helper()
	require.NoError(t, j.Begin(ctx, req))
	d, err := j.Backoff(ctx, req, out429("req-429"), ra, tm)
	require.NoError(t, err)
	return d
}

// names lists the directory, without the run's head (head-NNNN.json):
// the tests of the sequence and of durability assert the heads
// (allNames).
func names(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	for _, n := range allNames(t, dir) {
		if _, ok := record.ParseHeadName(n); !ok {
			out = append(out, n)
		}
	}
	return out
}

// allNames lists the directory.
func allNames(t testing.TB, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	sort.Strings(out)
	return out
}

// requirePrivate asserts mode 0700 on dir and 0600 on every file in it.
func requirePrivate(t testing.TB, dir string) {
	t.Helper()
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o700), info.Mode().Perm(), "private-run-directory: run directory mode")
	des, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, de := range des {
		info, err := de.Info()
		require.NoError(t, err)
		require.Equal(t, fs.FileMode(0o600), info.Mode().Perm(), "private-run-directory: mode of %s", de.Name())
	}
}

// copyDir copies the directory tree src (a run, or a parallel run's root
// with its shards) into a new dst (directories 0700, files 0600).
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	require.NoError(t, os.Mkdir(dst, 0o700))
	des, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, de := range des {
		if de.IsDir() {
			copyDir(t, filepath.Join(src, de.Name()), filepath.Join(dst, de.Name()))
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, de.Name()), b, 0o600))
	}
}

// writeRun writes a run directly (no fsync, for speed): a 1.0 manifest for
// plan, then one timed 429 entry per element of delays, received at rcv
// plus one second per entry, then an ACK receipt for each of acked, each
// record linked into the run's chain, and the head naming the last one.
func writeRun(t testing.TB, dir string, plan []PlannedFile, rcv time.Time, delays []int64, acked []string) {
	t.Helper()
	require.NoError(t, os.Mkdir(dir, 0o700))
	_, pd, err := digestOfPlan(plan)
	require.NoError(t, err)
	data, prev, err := record.EncodeManifest(record.ManifestBody{BackoffVersion: record.BackoffVersion, PlanDigest: pd, CreatedAtUTC: rcv.Unix() - 1})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, record.ManifestName), data, 0o600))
	seq, prevName := 0, record.ManifestName
	put := func(name, kind string, body any) {
		seq++
		data, prev, err = record.Seal(kind, seq, record.Link{Name: prevName, Digest: prev}, body)
		require.NoError(t, err)
		prevName = name
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
	ud := urlDigest(t, secretURL)
	for i, d := range delays {
		r := rcv.Unix() + int64(i)
		put(record.EntryName(i+1), record.KindEntry, &record.EntryBody{
			BackoffVersion: record.BackoffVersion, Sequence: i + 1, PlanDigest: pd,
			Method: "PUT", URLDigest: ud, RequestID: "req-" + string(rune('a'+i%26)), Status: 429,
			RetryAfter: record.RetryAfterJSON{Kind: "seconds", Value: d},
			Timing:     &record.TimingJSON{ReceivedAtUTC: r, NotBeforeUTC: r + d, ServerDelaySeconds: d},
			Provenance: record.Provenance{Attempt: 1},
		})
	}
	for _, id := range acked {
		fd := record.FileDigest(id)
		put(receiptName(fd), record.KindReceipt, &record.ReceiptBody{PlanDigest: pd, FileDigest: fd, Method: "PUT", URLDigest: ud,
			Attempt: 1, Status: 201, ACK: true, RequestID: "req-ok", ETag: `"0x1"`, RecordedAtUTC: rcv.Unix()})
	}
	if seq > 0 {
		data, _, err := record.Seal(record.KindHead, seq, record.Link{Name: prevName, Digest: prev}, &record.HeadBody{})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, record.HeadName(seq)), data, 0o600))
	}
}

// appendRecord writes the record name (of kind, with body) into the run
// dir as another worker would (no fsync, for speed): with the run's next
// seq and prev, then the head naming it, then the old heads removed.
func appendRecord(t testing.TB, dir, name, kind string, body any) {
	t.Helper()
	appendRecordAfter(t, dir, name, kind, body, func(l record.Link) record.Link { return l })
}

// appendRecordAfter is appendRecord whose record names prev(the run's last) as its prev.
func appendRecordAfter(t testing.TB, dir, name, kind string, body any, prev func(record.Link) record.Link) {
	t.Helper()
	s, err := scan(osFS, dir, nil)
	require.NoError(t, err)
	seq, last := s.NextLink()
	data, digest, err := record.Seal(kind, seq, prev(last), body)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	hd, _, err := record.Seal(record.KindHead, seq, record.Link{Name: name, Digest: digest}, &record.HeadBody{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, record.HeadName(seq)), hd, 0o600))
	for _, h := range s.Heads {
		require.NoError(t, os.Remove(filepath.Join(dir, h)))
	}
}

// verify is inspectDir(dir)'s findings.
func verify(dir string) ([]Finding, error) {
	sum, err := inspectDir(dir)
	if err != nil {
		return nil, err
	}
	return sum.Findings, nil
}

// manyFiles is a plan of n files named f0000.bin...
func manyFiles(n int) []PlannedFile {
	out := make([]PlannedFile, n)
	for i := range out {
		out[i] = PlannedFile{ID: "f" + itoa4(i) + ".bin"}
	}
	return out
}

func itoa4(i int) string {
	b := []byte{'0', '0', '0', '0'}
	for k := 3; k >= 0; k-- {
		b[k] = byte('0' + i%10)
		i /= 10
	}
	return string(b)
}

func ids(files []PlannedFile) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.ID
	}
	return out
}

// kill is, for j's markers, the death of j's process: the store's hold of
// every marker j holds ends (the kernel's release of a directory lock, a
// lease that expires), and nothing else happens — no removal, no record.
// A Journal killed mid-request is never used again by the tests.
func kill(j *Journal) {
	for _, x := range j.r.lanes() {
		x.mu.Lock()
		x.release()
		x.mu.Unlock()
	}
}

// inspectDir is InspectStore of the directory dir.
func inspectDir(dir string) (Summary, error) {
	return InspectStore(context.Background(), DirStore(dir))
}

// withClock and withFS are the tests' internal seams (docs/policy.md: clock-is-internal), here beside their callers.
func withClock(k clock.Clock) Option {
	return optionFunc(func(c *config) {
		if k != nil {
			c.clock = k
		}
	})
}

func withFS(f fsys.FS) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.fs = f
		}
	})
}

// scan reads and verifies the run directory dir, reading again no immutable
// file of prev (nil or an earlier snapshot). Its error is dir's own: not
// readable, empty (errNoRun), no journal name (ErrNotRun).
func scan(fsy fsys.FS, dir string, prev *runread.Snapshot) (*runread.Snapshot, error) {
	return runread.ScanRun(store.LocOf(store.NewDir(fsy, dir)), prev, time.Now())
}

func receiptName(fileDigest string) string { return record.ReceiptNameRound(fileDigest, 1) }
