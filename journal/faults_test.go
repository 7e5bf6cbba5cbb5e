package journal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery/journal/internal/record"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/journal/internal/fsys"
	"github.com/stretchr/testify/require"
)

var (
	errCrashed  = errors.New("injected crash: the process is gone")
	errInjected = errors.New("injected failure")
)

// faultFS is the real file system with a numbered log of every mutating
// step (create, write, fsync, close, link, remove, directory fsync, mkdir,
// chmod). At step crashAt it "crashes": the step is not performed (a torn
// write performs half of it) and every later operation, reads included,
// fails, leaving the directory as it is. At step failAt it fails once: the
// step is not performed, and later steps work.
type faultFS struct {
	mu      sync.Mutex
	ops     []string
	crashAt int
	torn    bool
	failAt  int
	crashed bool
	after   func() // called after each performed step
	// before is called with each step's label before the step (and before
	// any crash or failure), as another process acting at that moment.
	before func(label string)
	// files are the files created through it: a crash closes them, as
	// the kernel does at a process's death (the marker's lock goes).
	files []*faultFile
}

var _ fsys.FS = (*faultFS)(nil)

func newFaultFS() *faultFS { return &faultFS{crashAt: -1, failAt: -1} }

// base is the name of path in a step's label: a durable write's temporary
// file (name.tmp-<random hex>) reads name.tmp, so that labels are stable.
func base(path string) string {
	name := filepath.Base(path)
	if final, ok := record.ParseTempName(name); ok {
		return final + ".tmp"
	}
	return name
}

// step runs one mutating step; partial runs the torn half of a write.
func (f *faultFS) step(label string, do func() error, partial func()) error {
	if f.before != nil {
		f.before(label)
	}
	f.mu.Lock()
	if f.crashed {
		f.mu.Unlock()
		return errCrashed
	}
	i := len(f.ops)
	f.ops = append(f.ops, label)
	switch i {
	case f.crashAt:
		f.crashed = true
		files := f.files
		f.mu.Unlock()
		for _, w := range files {
			if !w.closed {
				w.closed = true
				w.File.Close()
			}
		}
		if f.torn && partial != nil {
			partial()
		}
		return errCrashed
	case f.failAt:
		f.mu.Unlock()
		return errInjected
	}
	f.mu.Unlock()
	err := do()
	if f.after != nil {
		f.after()
	}
	return err
}

func (f *faultFS) read() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return errCrashed
	}
	return nil
}

func (f *faultFS) Mkdir(name string, perm fs.FileMode) error {
	return f.step("mkdir "+base(name), func() error { return os.Mkdir(name, perm) }, nil)
}

func (f *faultFS) Chmod(name string, perm fs.FileMode) error {
	return f.step("chmod "+base(name), func() error { return os.Chmod(name, perm) }, nil)
}

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (fsys.File, error) {
	if flag&os.O_CREATE == 0 {
		if err := f.read(); err != nil {
			return nil, err
		}
		return fsys.OS{}.OpenFile(name, flag, perm)
	}
	var file fsys.File
	err := f.step("create "+base(name), func() (err error) {
		file, err = fsys.OS{}.OpenFile(name, flag, perm)
		return err
	}, nil)
	if err != nil {
		return nil, err
	}
	w := &faultFile{File: file, fs: f, name: base(name)}
	f.mu.Lock()
	f.files = append(f.files, w)
	f.mu.Unlock()
	return w, nil
}

func (f *faultFS) Link(oldname, newname string) error {
	return f.step("link "+base(newname), func() error { return os.Link(oldname, newname) }, nil)
}

func (f *faultFS) Remove(name string) error {
	return f.step("remove "+base(name), func() error { return os.Remove(name) }, nil)
}

func (f *faultFS) Stat(name string) (fs.FileInfo, error) {
	if err := f.read(); err != nil {
		return nil, err
	}
	return os.Stat(name)
}

func (f *faultFS) ReadDir(name string, n int) ([]fs.DirEntry, error) {
	if err := f.read(); err != nil {
		return nil, err
	}
	return fsys.OS{}.ReadDir(name, n)
}

func (f *faultFS) SyncDir(name string) error {
	return f.step("syncdir "+base(name), func() error { return fsys.OS{}.SyncDir(name) }, nil)
}

// faultFile is a file created through faultFS.
type faultFile struct {
	fsys.File
	fs     *faultFS
	name   string
	closed bool
}

func (w *faultFile) Write(b []byte) (int, error) {
	n := 0
	err := w.fs.step("write "+w.name, func() (err error) {
		n, err = w.File.Write(b)
		return err
	}, func() { w.File.Write(b[:len(b)/2]) })
	return n, err
}

func (w *faultFile) Sync() error {
	return w.fs.step("fsync "+w.name, w.File.Sync, nil)
}

func (w *faultFile) Close() error {
	if w.name == record.MarkerName+".tmp" && !w.closed {
		// The marker's file closes after the marker's removal (or at the
		// death of its process): that releases its lock and changes
		// nothing on disk, so it is no step.
		w.closed = true
		return w.File.Close()
	}
	err := w.fs.step("close "+w.name, func() error { w.closed = true; return w.File.Close() }, nil)
	if !w.closed {
		// A crashed or failed close still releases the descriptor: that
		// changes nothing in the directory.
		w.closed = true
		w.File.Close()
	}
	return err
}

// scenario is one journaled request run against a journal opened on a
// faultFS. It reports whether the request reached the network.
type scenario struct {
	name string
	// setup writes the starting run into dir.
	setup func(t *testing.T, dir string)
	// run performs Begin and the completion; sent says whether Begin
	// succeeded (the request would have been sent).
	run func(j *Journal) (sent bool, err error)
	// review marks a scenario that sends nothing (a review).
	review bool
	// other, when set, acts as another process on dir just before the
	// step with the given label of this Journal (see faultFS.before).
	other func(t *testing.T, dir, label string)
	// refused is the error the scenario ends with when nothing fails.
	refused error
	// want is the state of the reopened run, given which steps happened.
	want func(t *testing.T, dir string, done func(label string) bool, sent bool)
}

var upload = WithUpload(context.Background(), "a.bin")

// priorElapsed is a run holding one 429 whose restriction has elapsed at
// t0: a lost restriction would show as clear.
func priorElapsed(t *testing.T, dir string) {
	writeRun(t, dir, plan3, t0.Add(-100*time.Second), []int64{5}, nil)
}

var scenarios = []scenario{
	{
		name:  "Begin+Backoff",
		setup: priorElapsed,
		run: func(j *Journal) (bool, error) {
			req := putReq(nil)
			if err := j.Begin(upload, req); err != nil {
				return false, err
			}
			_, err := j.Backoff(upload, req, out429("r2"), secs(5), timing(t0, 5))
			return true, err
		},
		want: func(t *testing.T, dir string, done func(string) bool, sent bool) {
			st := reopen(t, dir, t0).Status(t0)
			switch {
			case !sent:
				// Begin failed: nothing was sent, so there is no 429 to lose.
				if markerExists(dir) {
					require.Equal(t, Unresolved, st.State)
				} else {
					require.Equal(t, Elapsed, st.State, st.Reason)
				}
			case done("remove pending-request.json"):
				require.Equal(t, Waiting, st.State, st.Reason)
				require.Equal(t, t0.Unix()+5, st.NotBeforeUTC)
			default:
				require.Equal(t, Unresolved, st.State, "crash-never-loses-restriction: the restriction is on disk or the marker remains")
			}
		},
	},
	{
		name:  "Begin+Complete(upload ACK)",
		setup: priorElapsed,
		run: func(j *Journal) (bool, error) {
			req := putReq(nil)
			if err := j.Begin(upload, req); err != nil {
				return false, err
			}
			return true, j.Complete(upload, req, readrecovery.JournalOutcome{StatusCode: 201, RequestID: "ok", ETag: `"e"`})
		},
		want: func(t *testing.T, dir string, done func(string) bool, sent bool) {
			j := reopen(t, dir, t0)
			st := j.Status(t0)
			c, err := j.PlanContinuation(plan3, NewApproval, t0)
			require.NoError(t, err)
			file := c.Files[0].State
			if markerExists(dir) {
				require.Equal(t, Unresolved, st.State)
			} else {
				require.Equal(t, Elapsed, st.State, "crash-never-loses-restriction: the earlier restriction is never lost: %s", st.Reason)
			}
			switch {
			case !sent:
				require.NotEqual(t, FileAcked, file)
			case done("link " + receiptName(record.FileDigest("a.bin"))):
				require.Equal(t, FileAcked, file, "the ACK is on record")
			default:
				require.Equal(t, FileUnknown, file, "upload-only-continuation: a sent upload without a receipt is never replayable")
				require.False(t, c.Files[0].Upload)
			}
		},
	},
	{
		name:  "Begin+Complete(GET)",
		setup: priorElapsed,
		run: func(j *Journal) (bool, error) {
			if err := j.Begin(context.Background(), getReq(nil)); err != nil {
				return false, err
			}
			return true, j.Complete(context.Background(), getReq(nil), readrecovery.JournalOutcome{StatusCode: 200})
		},
		want: func(t *testing.T, dir string, done func(string) bool, sent bool) {
			st := reopen(t, dir, t0).Status(t0)
			if markerExists(dir) {
				require.Equal(t, Unresolved, st.State)
			} else {
				require.Equal(t, Elapsed, st.State, st.Reason)
			}
		},
	},
	{
		name: "Open(create)",
		run: func(j *Journal) (bool, error) {
			return false, nil
		},
		want: func(t *testing.T, dir string, done func(string) bool, sent bool) {
			// No request was ever sent: a fresh run, or a partial
			// creation that this Open finishes (R84: no dead end; plan.json
			// is written first, run.json last, so a run without the linked
			// manifest sent nothing). Clear either way, never waiting or
			// elapsed, and nothing left that Verify finds.
			j, err := Open(dir, withClock(newFakeClock(t0)))
			require.NoError(t, err)
			st := j.Status(t0)
			require.Equal(t, Clear, st.State, st.Reason)
			found, err := verify(dir)
			require.NoError(t, err)
			require.Empty(t, found)
		},
	},
}

// The scenarios of parts and reviews (parts-are-not-acks, operator-review).
func init() {
	part := WithUploadPart(context.Background(), "a.bin")
	// fileState reopens dir and returns a.bin's class.
	fileState := func(t *testing.T, dir string) FileDecision {
		j := reopen(t, dir, t0)
		c, err := j.PlanContinuation(plan3, NewApproval, t0)
		require.NoError(t, err)
		return c.Files[0]
	}
	scenarios = append(scenarios,
		scenario{
			name:  "Begin+Complete(part 2xx)",
			setup: priorElapsed,
			run: func(j *Journal) (bool, error) {
				if err := j.Begin(part, putReq(nil)); err != nil {
					return false, err
				}
				return true, j.Complete(part, putReq(nil), readrecovery.JournalOutcome{StatusCode: 201, RequestID: "p1"})
			},
			want: func(t *testing.T, dir string, done func(string) bool, sent bool) {
				st := reopen(t, dir, t0).Status(t0)
				if markerExists(dir) {
					require.Equal(t, Unresolved, st.State)
				} else {
					require.Equal(t, Elapsed, st.State, "crash-never-loses-restriction: the earlier restriction is never lost: %s", st.Reason)
				}
				f := fileState(t, dir)
				require.NotEqual(t, FileAcked, f.State, "parts-are-not-acks: a part's 2xx is never the file's ACK")
				if sent {
					require.Equal(t, FileUnknown, f.State, "a sent part makes its file unknown: %s", f.Reason)
					require.False(t, f.Upload)
				}
			},
		},
		scenario{
			name:  "Begin+Backoff(part)",
			setup: priorElapsed,
			run: func(j *Journal) (bool, error) {
				if err := j.Begin(part, putReq(nil)); err != nil {
					return false, err
				}
				_, err := j.Backoff(part, putReq(nil), out429("p429"), secs(5), timing(t0, 5))
				return true, err
			},
			want: func(t *testing.T, dir string, done func(string) bool, sent bool) {
				scenarios[0].want(t, dir, done, sent)
				f := fileState(t, dir)
				require.NotEqual(t, FileAcked, f.State)
				if sent {
					require.Equal(t, FileUnknown, f.State, f.Reason)
				}
			},
		},
		scenario{
			// journal-claim-then-check: another process acks a.bin between this Journal's
			// check and its claim; the check under the claim refuses and
			// removes the marker again.
			name:    "Begin refused under the claim",
			setup:   priorElapsed,
			refused: errReplay,
			other: func(t *testing.T, dir, label string) {
				if label != "create "+record.MarkerName+".tmp" || fileExists(dir, receiptName(record.FileDigest("a.bin"))) {
					return
				}
				_, pd, err := digestOfPlan(plan3)
				require.NoError(t, err)
				appendRecord(t, dir, receiptName(record.FileDigest("a.bin")), record.KindReceipt, &record.ReceiptBody{PlanDigest: pd, FileDigest: record.FileDigest("a.bin"), Method: "PUT",
					URLDigest: urlDigest(t, secretURL), Attempt: 1, Status: 201, ACK: true, RecordedAtUTC: t0.Unix()})
			},
			run: func(j *Journal) (bool, error) {
				if err := j.Begin(upload, putReq(nil)); err != nil {
					return false, err
				}
				return true, nil
			},
			want: func(t *testing.T, dir string, done func(string) bool, sent bool) {
				require.False(t, sent, "journal-claim-then-check: never authorised to re-send an acked file")
				st := reopen(t, dir, t0).Status(t0)
				if markerExists(dir) {
					require.Equal(t, Unresolved, st.State)
				} else {
					require.Equal(t, Elapsed, st.State, st.Reason)
				}
				require.Equal(t, FileAcked, fileState(t, dir).State)
			},
		},
		scenario{
			name:   "Review(reupload)",
			review: true,
			setup: func(t *testing.T, dir string) {
				priorElapsed(t, dir)
				j := reopen(t, dir, t0)
				a := WithUpload(context.Background(), "a.bin")
				require.NoError(t, j.Begin(a, putReq(t)))
				require.NoError(t, j.Complete(a, putReq(t), readrecovery.JournalOutcome{StatusCode: 500, RequestID: "r500"}))
			},
			run: func(j *Journal) (bool, error) {
				_, err := j.Review(context.Background(), "a.bin", DecisionReupload, "checked")
				return false, err
			},
			want: func(t *testing.T, dir string, done func(string) bool, sent bool) {
				st := reopen(t, dir, t0).Status(t0)
				// A temporary file left behind is no finding (staleTemp):
				// only the marker decides.
				clean := !markerExists(dir)
				if clean {
					require.Equal(t, Elapsed, st.State, st.Reason)
				} else {
					require.Equal(t, Unresolved, st.State)
				}
				f := fileState(t, dir)
				if done("link review-0001.json") {
					require.Equal(t, FileReviewed, f.State, "the review is on disk")
					require.Equal(t, clean, f.Upload, f.Reason)
				} else {
					require.Equal(t, FileUnknown, f.State, "no review on disk: still unknown")
					require.False(t, f.Upload)
				}
			},
		},
		scenario{
			// pending-review: the way out of a killed worker's marker,
			// crashed or failed at each of its steps.
			name:   "ReviewPending",
			review: true,
			setup: func(t *testing.T, dir string) {
				priorElapsed(t, dir)
				j := reopen(t, dir, t0)
				require.NoError(t, j.Begin(WithUpload(context.Background(), "a.bin"), putReq(t)))
				kill(j)
			},
			run: func(j *Journal) (bool, error) {
				_, err := j.ReviewPending(context.Background(), "killed", 0)
				return false, err
			},
			want: func(t *testing.T, dir string, done func(string) bool, sent bool) {
				st := reopen(t, dir, t0).Status(t0)
				if done("link review-0001.json") {
					// The review is on disk: it resolves the marker, which
					// blocks nothing even if its removal never happened.
					require.Equal(t, Waiting, st.State, st.Reason)
					require.Equal(t, t0.Unix()+30, st.NotBeforeUTC)
				} else {
					require.Equal(t, Unresolved, st.State, "no review on disk: the marker still blocks")
					require.True(t, markerExists(dir))
				}
				require.Equal(t, FileUnknown, fileState(t, dir).State, "the dead worker's file is unknown either way")
			},
		},
	)
}

func fileExists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

func markerExists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, record.MarkerName))
	return err == nil
}

// runScenario sets up a fresh directory, runs sc on a journal over ff and
// returns the directory, whether the request was sent and the error.
func runScenario(t *testing.T, sc scenario, ff *faultFS) (dir string, sent bool, err error) {
	dir = filepath.Join(t.TempDir(), "run")
	if sc.setup == nil {
		_, err = Open(dir, withClock(newFakeClock(t0)), withFS(ff))
		return dir, false, err
	}
	sc.setup(t, dir)
	j, oerr := Open(dir, Existing(), withClock(newFakeClock(t0)), withFS(ff), WithPlan(plan3))
	require.NoError(t, oerr)
	if sc.other != nil {
		ff.before = func(label string) { sc.other(t, dir, label) }
	}
	sent, err = sc.run(j)
	if err != nil && (sc.refused == nil || !errors.Is(err, sc.refused)) && !(sc.review && !markerExists(dir)) {
		// After any persistence failure this process's Journal is
		// unresolved; a review that failed to write removed its marker
		// and left nothing that blocks (pending-review).
		require.Equal(t, Unresolved, j.Status(t0).State)
		require.ErrorIs(t, j.Admit(context.Background(), t0), ErrRestricted)
	}
	return dir, sent, err
}

// TestCrashAtEveryStep crashes each scenario before each of its steps
// (and tears each write in half), then reopens the run with the real file
// system: the restriction is on disk (waiting) or the marker remains
// (unresolved) — never clear, never a lost restriction, never a replayable
// sent upload.
func TestCrashAtEveryStep(t *testing.T) {
	total := 0
	for _, sc := range scenarios {
		ref := newFaultFS()
		_, _, err := runScenario(t, sc, ref)
		if sc.refused != nil {
			require.ErrorIs(t, err, sc.refused)
		} else {
			require.NoError(t, err)
		}
		total += crashEach(t, sc.name, ref.ops, func(t *testing.T, ff *faultFS) (string, bool, error) { return runScenario(t, sc, ff) },
			func(t *testing.T, i int, steps []string, dir string, sent bool, err error) {
				switch {
				case sc.name == "ReviewPending" && (markerRemovalAt(steps, i) || oldHeadRemovalAt(steps, i)):
					// The review is durable; the marker it resolves
					// blocks nothing, and a second review removes it
					// (reported as Removed, not as an error). The head
					// it replaced is removed by a later write; its
					// removal's failure is no error of the review's.
					require.NoError(t, err)
				case i < len(steps):
					require.ErrorIs(t, err, errCrashed, "a crash is reported to the caller (persistence-failure-is-terminal)")
				}
				before := stepsBefore(steps, i)
				sc.want(t, dir, func(step string) bool { return before(step) > 0 }, sent)
			})
	}
	t.Logf("crash points: %d", total)
}

// TestFailAtEveryStep fails each step once (the file system keeps
// working): Begin, Backoff or Complete returns the error — a persistence
// failure the transport treats as terminal — and the reopened run never
// lost a restriction.
func TestFailAtEveryStep(t *testing.T) {
	for _, sc := range scenarios {
		if sc.setup == nil {
			continue // Open(create) has no request to fail
		}
		ref := newFaultFS()
		_, _, err := runScenario(t, sc, ref)
		if sc.refused != nil {
			require.ErrorIs(t, err, sc.refused)
		} else {
			require.NoError(t, err)
		}
		steps := ref.ops
		for i := range steps {
			t.Run(fmt.Sprintf("%s/fail %02d %s", sc.name, i, steps[i]), func(t *testing.T) {
				ff := newFaultFS()
				ff.failAt = i
				dir, sent, err := runScenario(t, sc, ff)
				oldHead := func(step string) bool {
					return strings.HasPrefix(step, "remove head-") && !strings.HasSuffix(step, ".tmp")
				}
				// A pending review's removal of the marker it resolved:
				// harmless too (the review resolves it; a second review
				// removes it), reported as Removed, not as an error.
				resolved := func(step string) bool { return sc.name == "ReviewPending" && step == "remove "+record.MarkerName }
				harmless := oldHead(steps[i]) || (i > 0 && oldHead(steps[i-1])) || resolved(steps[i]) || (i > 0 && resolved(steps[i-1]))
				if harmless {
					// The removal of a head a newer one replaced: harmless
					// (the newer head counts; a later write removes it).
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, errInjected, "the failure is returned")
				}
				// The steps done: those before the failed one, and, when the
				// failure was harmless, every later one too (the run went on).
				last := i
				if harmless {
					last = len(steps) - 1
				}
				done := func(step string) bool {
					for k := 0; k <= last; k++ {
						if steps[k] == step && k != i {
							return true
						}
					}
					return false
				}
				sc.want(t, dir, done, sent)
				if !sent && !sc.review && sc.refused == nil {
					require.Less(t, i, beginSteps(steps), "only a Begin step (the marker's, an upload's begun head's) can keep the request from the network")
				}
			})
		}
	}
}

// crashPoint is one place a run of steps can crash: before step i (after
// all of them when i is len(steps)), or torn in the middle of write step i.
type crashPoint struct {
	i     int
	torn  bool
	label string
}

// crashPoints lists every crash point of steps, in order: before each
// step, a torn write after each "before" of a write, and after all.
func crashPoints(steps []string) []crashPoint {
	var out []crashPoint
	for i := 0; i <= len(steps); i++ {
		if i == len(steps) {
			out = append(out, crashPoint{i: i, label: "after all steps"})
			break
		}
		out = append(out, crashPoint{i: i, label: fmt.Sprintf("before %02d %s", i, steps[i])})
		if strings.HasPrefix(steps[i], "write ") {
			out = append(out, crashPoint{i: i, torn: true, label: fmt.Sprintf("torn %02d %s", i, steps[i])})
		}
	}
	return out
}

// crashEach runs one crash-point table: for every crash point of steps (a
// reference run's), a subtest runs the scenario on a file system that
// crashes there, and check judges what came out. It returns the number of
// points.
func crashEach(t *testing.T, name string, steps []string, run func(*testing.T, *faultFS) (string, bool, error),
	check func(t *testing.T, i int, steps []string, dir string, sent bool, err error)) int {
	t.Helper()
	require.NotEmpty(t, steps)
	t.Logf("%s: %d steps: %s", name, len(steps), strings.Join(steps, ", "))
	points := crashPoints(steps)
	for _, cp := range points {
		t.Run(name+"/"+cp.label, func(t *testing.T) {
			ff := newFaultFS()
			ff.crashAt, ff.torn = cp.i, cp.torn
			dir, sent, err := run(t, ff)
			check(t, cp.i, steps, dir, sent, err)
		})
	}
	return len(points)
}

// markerRemovalAt reports whether a crash before step i falls at a
// marker's removal: before it, or just after it.
func markerRemovalAt(steps []string, i int) bool {
	return i < len(steps) && (steps[i] == "remove "+record.MarkerName || (i > 0 && steps[i-1] == "remove "+record.MarkerName))
}

// oldHeadRemovalAt reports whether a crash before step i falls at the
// removal of a head a newer one replaced: before it, or just after it.
func oldHeadRemovalAt(steps []string, i int) bool {
	old := func(k int) bool {
		return k >= 0 && strings.HasPrefix(steps[k], "remove head-") && !strings.HasSuffix(steps[k], ".tmp")
	}
	return i < len(steps) && (old(i) || old(i-1))
}

// stepsBefore counts, for a crash before step i, how often a step ran.
func stepsBefore(steps []string, i int) func(step string) int {
	return func(step string) int {
		n := 0
		for k := 0; k < i && k < len(steps); k++ {
			if steps[k] == step {
				n++
			}
		}
		return n
	}
}

// beginSteps is the number of Begin's steps at the start of steps: the
// marker's and, for an upload, its begun head's (R85) with the removal of
// the head it replaces.
func beginSteps(steps []string) int {
	k := len(marker)
	if k < len(steps) && strings.HasPrefix(steps[k], "create head-") {
		k += len(durable("head-0001.json"))
		if k < len(steps) && strings.HasPrefix(steps[k], "remove head-") {
			k += 2
		}
	}
	return k
}
