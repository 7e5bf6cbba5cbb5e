package journal

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
	"github.com/stretchr/testify/require"
)

// memFS serves a fstest.MapFS through the journal's seam, read-only, so
// that the fuzzers need no disk.
type memFS struct{ fstest.MapFS }

var errReadOnly = errors.New("memFS is read-only")

func (memFS) Mkdir(string, fs.FileMode) error         { return errReadOnly }
func (memFS) Chmod(string, fs.FileMode) error         { return errReadOnly }
func (memFS) Link(string, string) error               { return errReadOnly }
func (memFS) Remove(string) error                     { return errReadOnly }
func (memFS) SyncDir(string) error                    { return errReadOnly }
func (m memFS) Stat(name string) (fs.FileInfo, error) { return m.MapFS.Stat(name) }

func (m memFS) ReadDir(name string, n int) ([]fs.DirEntry, error) {
	des, err := fs.ReadDir(m.MapFS, name)
	if n > 0 && len(des) > n {
		des = des[:n]
	}
	return des, err
}

func (m memFS) OpenFile(name string, flag int, _ fs.FileMode) (fsys.File, error) {
	if flag != fsys.ReadFlags {
		return nil, errReadOnly
	}
	f, err := m.MapFS.Open(name)
	if err != nil {
		return nil, err
	}
	return roFile{f}, nil
}

type roFile struct{ fs.File }

func (roFile) Write([]byte) (int, error) { return 0, errReadOnly }
func (roFile) Sync() error               { return errReadOnly }
func (roFile) Lock(bool) error           { return nil } // no process holds a lock in a MapFS

// fuzzBase is a run holding one 429 (received at t0, 60 s overlong) as a
// MapFS under "run", and the time at which it is waiting.
func fuzzBase(t testing.TB) (fstest.MapFS, time.Time) {
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, plan3, t0, []int64{60}, []string{"a.bin"})
	m := fstest.MapFS{"run": {Mode: fs.ModeDir | 0o700}}
	for _, n := range allNames(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)
		m[path.Join("run", n)] = &fstest.MapFile{Data: b, Mode: 0o600}
	}
	return m, t0.Add(30 * time.Second)
}

// statusWith returns the status of base with file name replaced by data.
func statusWith(t testing.TB, base fstest.MapFS, name string, data []byte, now time.Time) Status {
	m := fstest.MapFS{}
	for k, v := range base {
		m[k] = v
	}
	m[path.Join("run", name)] = &fstest.MapFile{Data: data, Mode: 0o600}
	j, err := Open("run", Existing(), withFS(memFS{m}), withClock(newFakeClock(now)))
	require.NoError(t, err)
	return j.Status(now)
}

// seeds adds the table cases of the loaders as seeds: valid, edited,
// truncated and hostile files.
func seeds(f *testing.F, valid []byte) {
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(valid[:len(valid)-1])
	edited := append([]byte(nil), valid...)
	edited[len(edited)/3] ^= 1
	f.Add(edited)
	for _, s := range []string{"", "{}", "null", "[]", `"x"`, "{\"backoff_version\":\"1.0\"}", "{\"backoff_version\":null}",
		"{\"timing\":null}", "\xff\xfe", "{\"a\":" + string(make([]byte, 5000)) + "}"} {
		f.Add([]byte(s))
	}
}

// FuzzLoadEntry puts arbitrary bytes in place of backoff-0001.json (the
// 429) and as backoff-0002.json of a run that is waiting: loading never
// panics and the run is never clear or elapsed (crash-never-loses-restriction).
func FuzzLoadEntry(f *testing.F) {
	base, now := fuzzBase(f)
	seeds(f, base["run/backoff-0001.json"].Data)
	f.Add(validSecond(f, base))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range []string{"backoff-0001.json", "backoff-0002.json"} {
			st := statusWith(t, base, name, data, now)
			if st.State == Clear || st.State == Elapsed {
				t.Fatalf("%s replaced: %+v", name, st)
			}
		}
	})
}

// FuzzLoadManifest puts arbitrary bytes in place of run.json of a run that
// is waiting: never a panic, never clear or elapsed.
func FuzzLoadManifest(f *testing.F) {
	base, now := fuzzBase(f)
	seeds(f, base["run/run.json"].Data)
	f.Add([]byte(`{"plan_digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}`))
	f.Add([]byte(`{"backoff_version":"2.0","plan_digest":"x","created_at_utc":1,"manifest_digest":"y"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st := statusWith(t, base, "run.json", data, now)
		if st.State == Clear || st.State == Elapsed {
			t.Fatalf("run.json replaced: %+v", st)
		}
	})
}

// validSecond is a valid backoff-0002.json, the next record of the base
// run's chain, whose own restriction (1 s at t0+1) has passed by the
// fuzzers' time.
func validSecond(t testing.TB, base fstest.MapFS) []byte {
	e, _, _ := validSecondWithHead(t, base)
	return e
}

// validSecondWithHead is validSecond and the head that names it.
func validSecondWithHead(t testing.TB, base fstest.MapFS) (entry []byte, head string, headData []byte) {
	_, _, body, err := record.Unseal(base["run/backoff-0001.json"].Data)
	require.NoError(t, err)
	s, err := scan(memFS{base}, "run", nil)
	require.NoError(t, err)
	e := *body.(*record.EntryBody)
	e.Sequence = 2
	e.RetryAfter = record.RetryAfterJSON{Kind: "seconds", Value: 1}
	e.Timing = &record.TimingJSON{ReceivedAtUTC: t0.Unix() + 1, NotBeforeUTC: t0.Unix() + 2, ServerDelaySeconds: 1}
	seq, prev := s.NextLink()
	b, d, err := record.Seal(record.KindEntry, seq, prev, &e)
	require.NoError(t, err)
	hd, _, err := record.Seal(record.KindHead, seq, record.Link{Name: "backoff-0002.json", Digest: d}, &record.HeadBody{})
	require.NoError(t, err)
	return b, record.HeadName(seq), hd
}

// TestFuzzBaseIsWaiting makes sure the fuzzers start from a waiting run,
// and that a valid later entry with a shorter restriction (and the head
// that names it) keeps it waiting (the latest not_before wins).
func TestFuzzBaseIsWaiting(t *testing.T) {
	base, now := fuzzBase(t)
	st := statusWith(t, base, "run.json", base["run/run.json"].Data, now)
	require.Equal(t, Waiting, st.State, st.Reason)
	require.Equal(t, int64(30), st.RemainingSeconds)
	e2, hn, hd := validSecondWithHead(t, base)
	withHead := fstest.MapFS{}
	for k, v := range base {
		withHead[k] = v
	}
	withHead["run/"+hn] = &fstest.MapFile{Data: hd, Mode: 0o600}
	st = statusWith(t, withHead, "backoff-0002.json", e2, now)
	require.Equal(t, Waiting, st.State, st.Reason)
	require.Equal(t, int64(30), st.RemainingSeconds)
	require.Equal(t, Elapsed, statusWith(t, withHead, "backoff-0002.json", e2, t0.Add(time.Minute)).State)
	st = statusWith(t, base, "backoff-0002.json", e2, now)
	require.Equal(t, Unresolved, st.State, "without the head that names it, the new last record is a finding")
}

// fuzzBaseNew is a run in the format with parts and reviews, waiting at
// the returned time: a 60 s restriction at t0, two part receipts of b.bin
// (unknown), a.bin's commit without ACK reviewed as skip, c.bin never
// attempted.
func fuzzBaseNew(t testing.TB) (fstest.MapFS, time.Time) {
	clk := newFakeClock(t0)
	dir := filepath.Join(t.TempDir(), "run")
	j, err := Open(dir, withClock(clk), WithPlan(plan3))
	require.NoError(t, err)
	ctx := context.Background()
	part := WithUploadPart(ctx, "b.bin")
	for _, id := range []string{"b1", "b2"} {
		require.NoError(t, j.Begin(part, putReq(t)))
		require.NoError(t, j.Complete(part, putReq(t), readrecovery.JournalOutcome{StatusCode: 201, RequestID: id}))
	}
	a := WithUpload(ctx, "a.bin")
	require.NoError(t, j.Begin(a, putReq(t)))
	require.NoError(t, j.Complete(a, putReq(t), readrecovery.JournalOutcome{StatusCode: 500, RequestID: "a500"}))
	_, err = j.Review(ctx, "a.bin", DecisionSkip, "checked")
	require.NoError(t, err)
	record429(t, j, ctx, getReq(t), overlong, timing(t0, 60))
	m := fstest.MapFS{"run": {Mode: fs.ModeDir | 0o700}}
	for _, n := range allNames(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)
		m[path.Join("run", n)] = &fstest.MapFile{Data: b, Mode: 0o600}
	}
	return m, t0.Add(30 * time.Second)
}

// planWith returns the status and the continuation of base with file name
// replaced by data.
func planWith(t testing.TB, base fstest.MapFS, name string, data []byte, now time.Time) (Status, map[string]FileDecision) {
	m := fstest.MapFS{}
	for k, v := range base {
		m[k] = v
	}
	m[path.Join("run", name)] = &fstest.MapFile{Data: data, Mode: 0o600}
	j, err := Open("run", Existing(), withFS(memFS{m}), withClock(newFakeClock(now)))
	require.NoError(t, err)
	out := map[string]FileDecision{}
	c, err := j.PlanContinuation(plan3, NewApproval, now)
	if err == nil {
		for _, f := range c.Files {
			out[f.ID] = f
		}
	}
	return j.Status(now), out
}

func baseFile(t testing.TB, base fstest.MapFS, prefix string) (string, []byte) {
	for k, v := range base {
		if strings.HasPrefix(k, "run/"+prefix) {
			return strings.TrimPrefix(k, "run/"), v.Data
		}
	}
	t.Fatalf("no %s file", prefix)
	return "", nil
}

// FuzzLoadPart puts arbitrary bytes in place of each part receipt of b.bin:
// loading never panics, the run is never clear or elapsed, and b.bin is
// never acked, never-attempted or reviewed (a part's file is unknown).
func FuzzLoadPart(f *testing.F) {
	base, now := fuzzBaseNew(f)
	p1 := record.PartName(record.FileDigest("b.bin"), 1)
	p2 := record.PartName(record.FileDigest("b.bin"), 2)
	seeds(f, base["run/"+p2].Data)
	f.Add(base["run/"+p1].Data)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range []string{p1, p2} {
			st, files := planWith(t, base, name, data, now)
			if st.State == Clear || st.State == Elapsed {
				t.Fatalf("%s replaced: %+v", name, st)
			}
			if b, ok := files["b.bin"]; ok && (b.State != FileUnknown || b.Upload) {
				t.Fatalf("%s replaced: b.bin %+v", name, b)
			}
		}
	})
}

// FuzzLoadReview puts arbitrary bytes in place of review-0001.json: never a
// panic, never clear or elapsed; a.bin is unknown or reviewed, never acked
// or sent; b.bin stays unknown and c.bin never-attempted.
func FuzzLoadReview(f *testing.F) {
	base, now := fuzzBaseNew(f)
	name, valid := baseFile(f, base, "review-")
	seeds(f, valid)
	f.Add([]byte(strings.Replace(string(valid), `"skip"`, `"reupload"`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, files := planWith(t, base, name, data, now)
		if st.State == Clear || st.State == Elapsed {
			t.Fatalf("review replaced: %+v", st)
		}
		if len(files) == 0 {
			return
		}
		a, b, c := files["a.bin"], files["b.bin"], files["c.bin"]
		if a.State != FileUnknown && a.State != FileReviewed || a.Upload || b.State != FileUnknown || c.State != FileNeverAttempted {
			t.Fatalf("review replaced: %+v %+v %+v", a, b, c)
		}
	})
}

// FuzzLoadPlanList puts arbitrary bytes in place of plan.json: never a
// panic, never clear or elapsed.
func FuzzLoadPlanList(f *testing.F) {
	base, now := fuzzBaseNew(f)
	seeds(f, base["run/plan.json"].Data)
	f.Add([]byte("{\"files\":[]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, _ := planWith(t, base, record.PlanName, data, now)
		if st.State == Clear || st.State == Elapsed {
			t.Fatalf("plan.json replaced: %+v", st)
		}
	})
}

// FuzzSanitizeNote: a sanitized note is a fixed point, valid UTF-8,
// printable, within its bound, and keeps no URL query.
func FuzzSanitizeNote(f *testing.F) {
	for _, s := range []string{"", "ok", "a\nb\x1b[31m", "https://u:p@h/x?sig=S y", strings.Repeat("é", 300), "\xff\xfe", " \t a  b "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := record.SanitizeNote(s, record.MaxNoteBytes)
		if record.SanitizeNote(n, record.MaxNoteBytes) != n {
			t.Fatalf("not a fixed point: %q -> %q", s, n)
		}
		if !utf8.ValidString(n) || len(n) > record.MaxNoteBytes || strings.ContainsAny(n, "?\n\r\x1b") {
			t.Fatalf("unsafe: %q -> %q", s, n)
		}
		for _, r := range n {
			if !unicode.IsPrint(r) {
				t.Fatalf("unprintable %q in %q", r, n)
			}
		}
	})
}

// TestFuzzBaseNewIsWaiting: the new-format fuzz base is waiting with the
// expected classes, so that the fuzzers' properties are not vacuous.
func TestFuzzBaseNewIsWaiting(t *testing.T) {
	base, now := fuzzBaseNew(t)
	name, valid := baseFile(t, base, "review-")
	st, files := planWith(t, base, name, valid, now)
	require.Equal(t, Waiting, st.State, st.Reason)
	require.Equal(t, FileReviewed, files["a.bin"].State)
	require.Equal(t, FileUnknown, files["b.bin"].State)
	require.Equal(t, FileNeverAttempted, files["c.bin"].State)
}

// FuzzLoadHead puts arbitrary bytes in place of the run's head: never a
// panic, never clear or elapsed (the base waits), and b.bin stays unknown.
// Only the valid head itself keeps the run verifiable.
func FuzzLoadHead(f *testing.F) {
	base, now := fuzzBaseNew(f)
	name, valid := baseFile(f, base, "head-")
	seeds(f, valid)
	f.Fuzz(func(t *testing.T, data []byte) {
		st, files := planWith(t, base, name, data, now)
		if st.State == Clear || st.State == Elapsed {
			t.Fatalf("head replaced: %+v", st)
		}
		if b, ok := files["b.bin"]; ok && (b.State != FileUnknown || b.Upload) {
			t.Fatalf("head replaced: b.bin %+v", b)
		}
		if !bytes.Equal(data, valid) && st.State != Unresolved {
			t.Fatalf("a head that is not the valid one verified: %+v", st)
		}
	})
}

// FuzzTempName: parseTempName never panics, accepts exactly the names
// tempName makes of a record name or the marker's (written through a
// locked temporary file since R83), and its final name is a journal name.
func FuzzTempName(f *testing.F) {
	for _, s := range []string{record.TempName("backoff-0001.json"), record.TempName(receiptName(record.FileDigest("a"))), "x.tmp-0123456789abcdef",
		"backoff-0001.json.tmp", "pending-request.json.tmp-0123456789abcdef", ".tmp-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		final, ok := record.ParseTempName(name)
		if !ok {
			return
		}
		if !record.IsJournalName(final) || !strings.HasPrefix(name, final+record.TempInfix) || len(name) != len(final)+len(record.TempInfix)+record.TempHexLen {
			t.Fatalf("parseTempName(%q) = %q", name, final)
		}
	})
}
